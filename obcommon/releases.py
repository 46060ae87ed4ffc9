"""Releases, the version skew rule and the cluster version's arithmetic.

A release is ``major.minor.patch`` (pyproject.toml's ``version``, semantic versioning); its
*line* is ``(major, minor)``: patch releases of one line never differ in what they send or
store, so every rule here compares lines. ``releases.toml`` beside this module lists the
releases and the upgrades each may take (``can_be_upgraded_to``, as OceanBase's
``tools/upgrade/oceanbase_upgrade_dep.yml``).

The version skew rule, for a cluster running two releases during a rolling upgrade
(Kubernetes' version skew policy, turned round as the agents are the RS's clients):

- an agent is at most one release behind the RS leader and never ahead of it, nor below the
  cluster version (once finalized, the older release is gone for good);
- root services are within one release of each other.

"One release" is one minor version of the same major (0.1 and 0.2; 1.4 and 1.5); a major
version is never mixed. The cluster version (OceanBase's ``min_observer_version``) is the
release every process is known to run at least: behaviour that needs both sides new is gated
on it, and it only ever rises (:func:`encode` orders it as an integer).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from obcommon import version

#: Hidden override of the release this process reports (agents' default ``build_version``,
#: the RS's own release), so tests can play an older or a newer peer without building one.
#: Never documented for operators: it changes nothing but what is reported.
RELEASE_OVERRIDE_ENV = "OB_TEST_REPORTED_RELEASE"

#: What an agent's default ``build_version`` carries after its release (OceanBase writes
#: ``<version>_<build>`` too).
BUILD_SUFFIX = "_ob-rootservice-py"

TABLE = Path(__file__).with_name("releases.toml")

# A release at the start of the text, not followed by more version digits: "0.2.0",
# "0.2.0_ob-rootservice-py", "0.2.0.dev1"; not "4.2.0.0-ob-rootservice-py" (0.1.0's agents).
_RELEASE_RE = re.compile(r"(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?!\d|\.\d)")

SKEW_RULE = (
    "an agent may be at most one release behind the RS leader and never ahead of it or below "
    "the cluster version; root services must be within one release of each other"
)


@dataclass(frozen=True, order=True)
class Release:
    """``major.minor.patch``; ordered as versions are."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def line(self) -> tuple[int, int]:
        """``(major, minor)``: what the skew rule and the cluster version compare."""
        return (self.major, self.minor)


def parse(text: str) -> Release | None:
    """The release at the start of ``text`` (``"0.2.0"``, ``"0.2.0_ob-rootservice-py"``), or
    None when it does not start with one."""
    m = _RELEASE_RE.match(text.strip())
    if m is None:
        return None
    return Release(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def oceanbase_form(r: Release) -> str:
    """``r`` as OceanBase spells a version, four numbers ``major.minor.major_patch.
    minor_patch`` (``CALC_VERSION``; its tools' ``get_version`` needs four): a release's patch
    is OceanBase's major patch and it has no minor patch, so 0.2.0 is ``"0.2.0.0"``. What
    ``min_observer_version`` and ``compatible`` show (SHOW PARAMETERS, GV$OB_PARAMETERS)."""
    return f"{r}.0"


def parse_strict(text: str) -> Release:
    """``text`` as a release; ``ValueError`` naming it when it is none."""
    r = parse(text)
    if r is None or text.strip() != str(r):
        raise ValueError(f"{text!r} is not a release major.minor.patch")
    return r


def encode(r: Release) -> int:
    """``r`` as one integer ordered as releases are (OceanBase's ``CALC_VERSION``: major in the
    high bits), what the database compares when it raises the cluster version."""
    return (r.major << 32) | (r.minor << 16) | r.patch


def decode(n: int) -> Release:
    """The inverse of :func:`encode`."""
    return Release(n >> 32, (n >> 16) & 0xFFFF, n & 0xFFFF)


@dataclass(frozen=True)
class ReleaseEntry:
    """One ``[[release]]`` of ``releases.toml``."""

    release: Release
    commit: str
    can_be_upgraded_to: tuple[Release, ...]
    agent_build_version: str


@cache
def table() -> tuple[ReleaseEntry, ...]:
    """The entries of ``releases.toml``, oldest first. Raises ``ValueError`` on a malformed
    table (a release twice, out of order, or an unknown target)."""
    raw = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    out = [
        ReleaseEntry(
            parse_strict(e["version"]),
            e.get("commit", ""),
            tuple(parse_strict(t) for t in e.get("can_be_upgraded_to", [])),
            e.get("agent_build_version", ""),
        )
        for e in raw["release"]
    ]
    versions = [e.release for e in out]
    if versions != sorted(set(versions)):
        raise ValueError(f"{TABLE}: releases must be listed once each, oldest first")
    for e in out:
        for t in e.can_be_upgraded_to:
            if t not in versions or t <= e.release:
                raise ValueError(f"{TABLE}: {e.release} -> {t}: not a later listed release")
    return tuple(out)


def oldest() -> Release:
    """The first release: the one whose agents did not put their release in ``build_version``."""
    return table()[0].release


def of_build_version(build_version: str) -> Release:
    """The release an agent of ``build_version`` runs: the release it starts with, else the
    oldest release (only 0.1.0's agents sent a build version without one; later agents refuse
    to start with such a setting)."""
    return parse(build_version) or oldest()


def current() -> Release:
    """The release this process reports: :data:`RELEASE_OVERRIDE_ENV` when set (tests), else
    the installed distribution's, else the newest of ``releases.toml`` (a checkout that was
    never installed). Raises ``ValueError`` for an override that is no release."""
    override = os.environ.get(RELEASE_OVERRIDE_ENV, "").strip()
    if override:
        return parse_strict(override)
    return parse(version.release()) or table()[-1].release


def default_build_version() -> str:
    """What an agent reports as ``build_version`` unless told otherwise:
    ``"0.2.0_ob-rootservice-py"``."""
    return f"{current()}{BUILD_SUFFIX}"


def _one_release_apart(a: Release, b: Release) -> bool:
    return a.major == b.major and abs(a.minor - b.minor) <= 1


def agent_refusal(agent: Release, leader: Release, cluster: Release) -> str | None:
    """Why an agent of release ``agent`` may not hold a lease from an RS leader of ``leader``
    with the cluster version at ``cluster``; None when the skew rule allows it. Patch
    releases of one line are alike."""
    if agent.line > leader.line:
        return f"agent release {agent} is ahead of RS leader release {leader}"
    if not _one_release_apart(agent, leader):
        return f"agent release {agent} is more than one release behind RS leader release {leader}"
    if agent.line < cluster.line:
        return f"agent release {agent} is below the cluster version {cluster} (upgrade finalized)"
    return None


def rs_refusal(mine: Release, other: Release) -> str | None:
    """Why a root service of ``mine`` may not run beside one of ``other``; None when they are
    within one release of each other."""
    if _one_release_apart(mine, other):
        return None
    return f"root service release {mine} is more than one release from {other}"


def may_upgrade(src: Release, dst: Release) -> bool:
    """Whether ``releases.toml`` lists ``dst`` among the direct upgrades of ``src``'s line
    (the same line is no upgrade and always allowed)."""
    if src.line == dst.line:
        return True
    return any(
        e.release.line == src.line and any(t.line == dst.line for t in e.can_be_upgraded_to)
        for e in table()
    )


# --------------------------------------------------------------------------- feature gates

#: Since 0.2.0 an agent that stops cleanly says so in its last lease request
#: (``server_status`` bit 0x2): a 0.1.0 RS refuses a request with a bit it does not know, so
#: agents set it only once the cluster version is 0.2.0 (every RS then knows it).
STOPPING_NOTICE = Release(0, 2, 0)


#: The ``server_status`` bit of that last lease request.
STOPPING_STATUS_BIT = 0x2


def stopping_bit(cluster: Release) -> int:
    """:data:`STOPPING_STATUS_BIT` when the cluster version ``cluster`` lets an agent send it
    (:data:`STOPPING_NOTICE`), else 0: the agent starts the exchange, so it decides."""
    return STOPPING_STATUS_BIT if gate_open(cluster, STOPPING_NOTICE) else 0


def gate_open(cluster: Release, since: Release) -> bool:
    """Whether behaviour introduced in release ``since`` may be used with the cluster version at
    ``cluster``: only the side that starts an exchange asks this (CockroachDB's rule); the side
    that receives handles the new behaviour whatever its own view of the cluster version."""
    return cluster.line >= since.line
