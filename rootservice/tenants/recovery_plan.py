"""The plan of RECOVER LS ... FROM LOST SERVERS and FORCE DELETE SERVER,
pure: which log streams lose which members, the survivor of each LS that lost its majority,
its new term, what would be lost, and the digest of the reports the plan was made from.

Rules (TiDB PD's ``unsafe remove-failed-stores`` and CockroachDB's ``debug recover
make-plan``, reduced to this project's log streams):

- An LS is touched when a lost server is one of its effective members
  (:func:`rootservice.tenants.reports.effective_members`).
- **REMOVE_MEMBER**: the members left keep a majority of the current member list in
  service (:meth:`rootservice.tenants.host_health.HostHealth.healthy_member`): the lost
  servers leave the member list at the current term, a leader is elected first when the
  LS has none or it is lost. FORCE DELETE SERVER does only this.
- **RECOVER**: they do not. Every member left must be alive (a member that is neither alive
  nor named lost is refused: name it too, or start it) and report its replica; the
  **survivor** is chosen by term, then log end, then in service, then the tenant's primary
  zone priority (then the address, so the choice is deterministic); the member list shrinks
  to the members left and the survivor leads at a term above every term seen (reports of
  every server, dead ones' last reports included, and ``__all_ls_meta_table``).
- ``highest_log_end`` is the highest log end any replica of the LS ever reported (dead
  ones' last reports and ``__all_ls_log_mark`` included): ``lost_entries`` = what the
  survivor lacks of it.
- The **digest** covers what the plan depends on and does not move by itself: the removed
  servers, every touched LS's member list and, for RECOVER, each holder's (term, log end,
  in service) (a leaderless LS appends nothing; a holder still leading without a majority
  counts without its log end). The **plan id** is derived from it, so a
  DRY RUN and the run that applies the same state show the same id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.tenants.reports import LsView, effective_members
from rootservice.tenants.topology import LsPlan
from rootservice.tenants.vocabulary import LsKey

Action = Literal["RECOVER", "REMOVE_MEMBER"]


@dataclass(frozen=True)
class Holder:
    """A live member's replica as it reported it: ``term``, ``log_end_index``,
    ``in_service``, ``zone_priority`` of its zone in the tenant's primary zone (0 best), and
    ``leading``: it reports LEADER (an agent that leads appends without a majority, so its
    log end moves by itself and is left out of the digest; it has the highest term, so it
    is the survivor anyway)."""

    server: str
    term: int
    log_end_index: int
    in_service: bool
    zone_priority: int
    leading: bool = False


def survivor_rank(h: Holder) -> tuple[int, int, int, int, str]:
    """The sort key of survivor candidates, best first: the highest term, then the longest
    log, then in service, then the best primary-zone priority, then the address."""
    return (-h.term, -h.log_end_index, 0 if h.in_service else 1, h.zone_priority, h.server)


def choose_survivor(holders: Iterable[Holder]) -> Holder | None:
    """The survivor among ``holders`` (:func:`survivor_rank`), None when there is none."""
    return min(holders, key=survivor_rank, default=None)


@dataclass(frozen=True)
class LsStep:
    """What the plan does to one LS. ``survivor`` is the RECOVER leader (for REMOVE_MEMBER
    the current leader, "" when one is to be elected); ``new_term`` 0 for REMOVE_MEMBER
    (the member change keeps the term)."""

    tenant_id: int
    ls_id: int
    action: Action
    members_before: tuple[str, ...]
    members_after: tuple[str, ...]
    removed: tuple[str, ...]
    survivor: str = ""
    survivor_term: int = 0
    survivor_log_end: int = 0
    highest_log_end: int = 0
    new_term: int = 0
    holders: tuple[Holder, ...] = field(default_factory=tuple)

    @property
    def key(self) -> LsKey:
        """(tenant_id, ls_id)."""
        return (self.tenant_id, self.ls_id)

    @property
    def lost_entries(self) -> int:
        """RECOVER: log entries some replica reported and the survivor does not have (0 for
        REMOVE_MEMBER: the members left keep a majority, nothing acknowledged is lost)."""
        if self.action != "RECOVER":
            return 0
        return max(0, self.highest_log_end - self.survivor_log_end)


@dataclass(frozen=True)
class RecoveryPlan:
    """The removed servers, the steps by LS and the digest of the reports they rest on."""

    removed: tuple[str, ...]
    steps: tuple[LsStep, ...]
    digest: str

    @property
    def plan_id(self) -> str:
        """12 hex digits naming this plan (from the digest)."""
        return self.digest[:12]

    def recovering(self) -> list[LsStep]:
        """The RECOVER steps."""
        return [s for s in self.steps if s.action == "RECOVER"]

    def to_json(self) -> str:
        """The plan as the RECOVER_LS job's ``extra_info`` keeps it (read back by
        :meth:`from_json` when a new leader resumes the run)."""
        return json.dumps(
            {"plan_id": self.plan_id, **asdict(self)}, sort_keys=True, separators=(",", ":")
        )

    @classmethod
    def from_json(cls, text: str) -> RecoveryPlan:
        """The plan :meth:`to_json` wrote. Raises ``ValueError`` / ``KeyError`` /
        ``TypeError`` on another text."""
        d = json.loads(text)
        steps = []
        for s in d["steps"]:
            holders = tuple(Holder(**h) for h in s.pop("holders"))
            for k in ("members_before", "members_after", "removed"):
                s[k] = tuple(s[k])
            steps.append(LsStep(**s, holders=holders))
        return cls(tuple(d["removed"]), tuple(steps), d["digest"])


def plan_digest(removed: Iterable[str], steps: Iterable[LsStep]) -> str:
    """sha256 (hex) of the removed servers and, per LS, its action, member list and (for
    RECOVER) each holder's term, log end and in-service flag, in a canonical order."""
    lines = ["removed " + ",".join(sorted(removed))]
    for s in sorted(steps, key=lambda x: x.key):
        lines.append(f"ls {s.tenant_id}.{s.ls_id} {s.action} {','.join(s.members_before)}")
        if s.action == "RECOVER":
            for h in sorted(s.holders, key=lambda x: x.server):
                end = "leading" if h.leading else h.log_end_index
                lines.append(f"  {h.server} {h.term} {end} {int(h.in_service)}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@dataclass(frozen=True)
class PlanInputs:
    """What :func:`make_plan` reads: the layout's ``plans``, the ``views`` built from the
    reports, every server's last ``reports`` (dead ones' included), the highest
    ``proposal_id`` of each LS in ``__all_ls_meta_table`` (``meta_terms``), the highest log
    end ever reported of each LS (``marks``, :mod:`rootservice.tenants.log_marks`), and three
    questions on the whitelist and the zones."""

    plans: Mapping[LsKey, LsPlan]
    views: Mapping[LsKey, LsView]
    reports: Mapping[str, Mapping[LsKey, obrpc_pb2.ReplicaInfo]]
    meta_terms: Mapping[LsKey, int]
    marks: Mapping[LsKey, int]
    is_alive: Callable[[str], bool]
    healthy: Callable[[str, obrpc_pb2.ReplicaInfo | None, Set[str]], bool]
    zone_priority: Callable[[LsPlan, str], int]


def _ls_name(key: LsKey) -> str:
    return f"log stream {key[1]} of tenant {key[0]}"


def make_plan(
    lost: Iterable[str],
    inputs: PlanInputs,
    only: Callable[[LsKey], bool] = lambda k: True,
    *,
    minority: Callable[[LsKey, int], ObError] | None = None,
) -> RecoveryPlan:
    """The plan of removing the ``lost`` servers from every LS (``only`` those it accepts)
    that has one of them as a member. Raises OB_OP_NOT_ALLOW naming the LS when an LS to
    recover has a member that is neither alive nor lost, or no live member reporting its
    replica; with ``minority`` (FORCE DELETE, which recovers nothing), raises
    ``minority(key, member count)`` for the first LS that would lose its majority."""
    removed = tuple(sorted(set(lost)))
    gone = set(removed)
    steps: list[LsStep] = []
    for key in sorted(inputs.plans):
        if not only(key):
            continue
        plan = inputs.plans[key]
        view = inputs.views.get(key, LsView(key))
        members = effective_members(plan, view)
        out = tuple(m for m in members if m in gone)
        if not out:
            continue
        left = tuple(m for m in members if m not in gone)
        majority = len(members) // 2 + 1
        healthy = [m for m in left if inputs.healthy(m, view.replicas.get(m), gone)]
        all_reports = [t[key] for t in inputs.reports.values() if key in t]
        highest = max([inputs.marks.get(key, 0), *(r.log_end_index for r in all_reports)])
        if len(healthy) >= majority:
            leader = view.leader if view.leader not in gone else None
            r = view.replicas.get(leader) if leader else None
            steps.append(
                LsStep(
                    key[0],
                    key[1],
                    "REMOVE_MEMBER",
                    tuple(members),
                    left,
                    out,
                    survivor=leader or "",
                    survivor_term=r.term if r is not None else 0,
                    survivor_log_end=r.log_end_index if r is not None else 0,
                    highest_log_end=highest,
                )
            )
            continue
        if minority is not None:
            raise minority(key, len(members))
        unknown = [m for m in left if not inputs.is_alive(m)]
        if unknown:
            raise ObError(
                "OB_OP_NOT_ALLOW",
                f"recover {_ls_name(key)} while its member(s) {', '.join(unknown)} neither "
                "heartbeat nor are named in FROM LOST SERVERS (name them too, or start "
                "them); it is",
            )
        holders = tuple(
            Holder(
                m,
                view.replicas[m].term,
                view.replicas[m].log_end_index,
                view.replicas[m].in_service,
                inputs.zone_priority(plan, m),
                view.replicas[m].role == obrpc_pb2.LEADER,
            )
            for m in left
            if m in view.replicas
        )
        survivor = choose_survivor(holders)
        if survivor is None:
            raise ObError(
                "OB_OP_NOT_ALLOW",
                f"recover {_ls_name(key)}: no replica of it survives outside the lost "
                "servers; it is",
            )
        seen = max(
            [view.term, inputs.meta_terms.get(key, 0), *(r.term for r in all_reports)],
        )
        steps.append(
            LsStep(
                key[0],
                key[1],
                "RECOVER",
                tuple(members),
                tuple(sorted(h.server for h in holders)),
                out,
                survivor=survivor.server,
                survivor_term=survivor.term,
                survivor_log_end=survivor.log_end_index,
                highest_log_end=highest,
                new_term=seen + 1,
                holders=holders,
            )
        )
    return RecoveryPlan(removed, tuple(steps), plan_digest(removed, steps))


COLUMNS = (
    "TENANT_ID",
    "LS_ID",
    "PLAN_ID",
    "ACTION",
    "SURVIVOR",
    "SURVIVOR_TERM",
    "SURVIVOR_LOG_END",
    "HIGHEST_LOG_END",
    "LOST_ENTRIES",
    "NEW_TERM",
    "MEMBERS_BEFORE",
    "MEMBERS_AFTER",
    "REMOVED",
    "REPORT_DIGEST",
)
"""The result set of RECOVER LS (and its DRY RUN): one row per LS the plan touches."""

TYPES = (
    "BIGINT",
    "BIGINT",
    "VARCHAR",
    "VARCHAR",
    "VARCHAR",
    "BIGINT",
    "BIGINT",
    "BIGINT",
    "BIGINT",
    "BIGINT",
    "VARCHAR",
    "VARCHAR",
    "VARCHAR",
    "VARCHAR",
)


def plan_rows(plan: RecoveryPlan) -> list[tuple[Any, ...]]:
    """The rows of :data:`COLUMNS`, by LS."""
    return [
        (
            s.tenant_id,
            s.ls_id,
            plan.plan_id,
            s.action,
            s.survivor,
            s.survivor_term,
            s.survivor_log_end,
            s.highest_log_end,
            s.lost_entries,
            s.new_term,
            ",".join(s.members_before),
            ",".join(s.members_after),
            ",".join(s.removed),
            plan.digest[:16],
        )
        for s in plan.steps
    ]
