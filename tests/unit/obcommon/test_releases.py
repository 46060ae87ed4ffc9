"""Releases, the version skew rule and the gates (obcommon/releases.py and releases.toml)."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from obcommon import releases
from obcommon.releases import Release

ROOT = Path(__file__).resolve().parents[3]
R = Release


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0.2.0", R(0, 2, 0)),
        ("0.2.0_ob-rootservice-py", R(0, 2, 0)),
        ("0.2.0.dev1", R(0, 2, 0)),
        ("12.34.56-x", R(12, 34, 56)),
        # 0.1.0's agents: four numbers, not a release of this project.
        ("4.2.0.0-ob-rootservice-py", None),
        ("4.2.0.0-test", None),
        ("v2", None),
        ("", None),
        ("0.2", None),
    ],
)
def test_parse_reads_a_leading_release_only(text: str, want: Release | None) -> None:
    assert releases.parse(text) == want


def test_a_build_version_without_a_release_is_the_oldest_releases() -> None:
    assert releases.of_build_version("4.2.0.0-ob-rootservice-py") == R(0, 1, 0)
    assert releases.of_build_version("spoofed") == R(0, 1, 0)
    assert releases.of_build_version("0.3.1_x") == R(0, 3, 1)


def test_encode_orders_as_releases_do_and_decodes_back() -> None:
    rs = [R(0, 1, 0), R(0, 1, 9), R(0, 2, 0), R(0, 10, 0), R(1, 0, 0)]
    assert sorted(rs, key=releases.encode) == rs
    assert [releases.decode(releases.encode(r)) for r in rs] == rs


# --- the skew rule: both sides of every boundary ---------------------------------------------


@pytest.mark.parametrize(
    ("agent", "leader", "cluster", "refused"),
    [
        # Same release, and patch releases of one line, either way.
        (R(0, 2, 0), R(0, 2, 0), R(0, 2, 0), None),
        (R(0, 2, 9), R(0, 2, 0), R(0, 2, 0), None),
        # Ahead of the leader: one minor refused, the same line allowed.
        (R(0, 3, 0), R(0, 2, 0), R(0, 1, 0), "ahead of"),
        (R(1, 2, 0), R(0, 2, 0), R(0, 1, 0), "ahead of"),
        # Behind: one release allowed, two refused.
        (R(0, 1, 0), R(0, 2, 0), R(0, 1, 0), None),
        (R(0, 0, 9), R(0, 2, 0), R(0, 0, 0), "more than one release behind"),
        # Across a major: never mixed.
        (R(0, 9, 0), R(1, 0, 0), R(0, 9, 0), "more than one release behind"),
        # The cluster version: at it allowed, one below refused.
        (R(0, 1, 0), R(0, 2, 0), R(0, 2, 0), "below the cluster version"),
        (R(0, 2, 0), R(0, 2, 0), R(0, 2, 0), None),
    ],
)
def test_agent_skew_rule(
    agent: Release, leader: Release, cluster: Release, refused: str | None
) -> None:
    why = releases.agent_refusal(agent, leader, cluster)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why
        assert str(agent) in why


@pytest.mark.parametrize(
    ("mine", "other", "ok"),
    [
        (R(0, 2, 0), R(0, 2, 5), True),
        (R(0, 2, 0), R(0, 1, 0), True),
        (R(0, 1, 0), R(0, 2, 0), True),
        (R(0, 3, 0), R(0, 1, 0), False),
        (R(0, 1, 0), R(0, 3, 0), False),
        (R(1, 0, 0), R(0, 9, 0), False),
    ],
)
def test_root_services_within_one_release(mine: Release, other: Release, ok: bool) -> None:
    assert (releases.rs_refusal(mine, other) is None) is ok


def test_gates_open_at_their_release_and_not_below() -> None:
    assert not releases.gate_open(R(0, 1, 0), releases.STOPPING_NOTICE)
    assert releases.gate_open(R(0, 2, 0), releases.STOPPING_NOTICE)
    assert releases.stopping_bit(R(0, 1, 0)) == 0
    assert releases.stopping_bit(R(0, 2, 0)) == releases.STOPPING_STATUS_BIT


# --- the table ---------------------------------------------------------------------------------


def test_the_table_ends_with_pyprojects_release() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert str(releases.table()[-1].release) == declared


def test_every_listed_upgrade_is_within_the_skew_rule() -> None:
    for e in releases.table():
        for target in e.can_be_upgraded_to:
            # The old release's agents beside the new leader, before finalizing.
            assert releases.agent_refusal(e.release, target, e.release) is None
            assert releases.rs_refusal(e.release, target) is None
            assert releases.may_upgrade(e.release, target)
    assert not releases.may_upgrade(R(0, 2, 0), R(0, 1, 0))


def test_every_previous_release_has_its_commit_and_proto() -> None:
    for e in releases.table()[:-1]:
        assert len(e.commit) == 40
        assert (ROOT / "releases" / str(e.release) / "obrpc.proto").is_file()


def test_the_kept_proto_is_the_releases_own() -> None:
    git = shutil.which("git")
    first = releases.table()[0]
    if git is None:
        pytest.skip("no git")
    shown = subprocess.run(
        [git, "show", f"{first.commit}:obcommon/proto/obrpc.proto"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        pytest.skip(f"the release's commit is not in this clone: {shown.stderr.strip()}")
    kept = (ROOT / "releases" / str(first.release) / "obrpc.proto").read_text()
    assert kept == shown.stdout


def test_the_override_is_what_a_process_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(releases.RELEASE_OVERRIDE_ENV, "0.1.0")
    assert releases.current() == R(0, 1, 0)
    assert releases.default_build_version() == "0.1.0_ob-rootservice-py"
    monkeypatch.setenv(releases.RELEASE_OVERRIDE_ENV, "zero")
    with pytest.raises(ValueError, match="zero"):
        releases.current()
    monkeypatch.delenv(releases.RELEASE_OVERRIDE_ENV)
    assert releases.current() == releases.table()[-1].release
