"""ALTER SYSTEM FORCE DELETE SERVER and ALTER SYSTEM RECOVER LS ... FROM LOST SERVERS: removing servers that are gone for good, and recovering the log
streams that lost their majority with them.

**FORCE DELETE SERVER 'a' [, ...]** (servers that do not heartbeat): the plan
(:mod:`rootservice.tenants.recovery_plan`) must hold only REMOVE_MEMBER steps (an LS that
would lose its majority is refused, naming it: that is RECOVER LS's business); the servers
are buried (:class:`rootservice.servers.tombstones.ServerBurial`: tombstone, DELETING, a
DELETE_SERVER job), then removed from every member list, a leader elected first where
needed. Their units move, and their replicas are rebuilt elsewhere, by the balancer as after
DELETE SERVER, as soon as some server of the zone has room; the empty-server checker removes
their ``__all_server`` rows then. The tombstone stays for ever.

**RECOVER LS [TENANT t] [LS n] FROM LOST SERVERS 'a' [, ...] [DRY RUN]**: stages, each a
progress step of a ``RECOVER_LS`` job row and an event (module ``disaster_recovery``):

1. ``recover_ls_plan``: fresh reports requested, the plan made (survivor, new term, members
   left, what would be lost) and recorded in the job's ``extra_info``.
2. ``recover_ls_check``: fresh reports again; refused (job FAILED) when the digest changed
   or a removed server heartbeats.
3. ``recover_ls_bury``: the removed servers buried, in the transaction that records the
   stage: the commit point.
4. ``recover_ls``: per LS, the survivor leads at the new term with the members left, and
   the REMOVE_MEMBER steps; ``recover_ls_done`` (SUCCESS, or FAILED naming the LS that
   failed: run the statement again).

Scheduling (balancer, lost-replica checker, reconciler, rebuilder) is paused for the whole
run and resumes however it ends. A new leader (task ``lost_server_recovery``, once per term)
fails a run found before its commit point (nothing was changed) and finishes one found after
it from the plan in its job row (the member changes are idempotent), so no LS is left with
some members on the new list and others on the old. DRY RUN stops after stage 1 and writes
nothing.

Both statements answer once ``DBA_OB_LS_LOCATIONS`` agrees: each LS they changed shows one
LEADER row, on the leader the reports name and on none of the removed servers
(:class:`rootservice.tenants.view_agreement.ViewAgreement`); otherwise they fail with
OB_WAIT_LEADER_SWITCH_TIMEOUT naming the LS (the change itself is done, see the job).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from obcommon.addresses import format_server, parse_server
from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import event_repo, job_repo
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.servers.tombstones import ServerBurial
from rootservice.servers.whitelist import Whitelist
from rootservice.tenants.member_removal import MemberRemoval, keys_filter
from rootservice.tenants.pause import ActGate, SchedulingPause
from rootservice.tenants.recovery_plan import RecoveryPlan, make_plan
from rootservice.tenants.topology import LayoutCache
from rootservice.tenants.view_agreement import ViewAgreement
from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)

JOB_TYPE = "RECOVER_LS"
MODULE = "disaster_recovery"


@dataclass
class Outcome:
    """What a statement did: its ``plan``, the job ids (the RECOVER_LS job first when there
    is one, then the DELETE_SERVER jobs of the burial) and the LS whose member change failed
    (with the error)."""

    plan: RecoveryPlan
    jobs: list[int] = field(default_factory=list)
    failures: dict[LsKey, ObError] = field(default_factory=dict)


class LostServers:
    """The two statements and the resumption task (``name = "lost_server_recovery"``).
    One statement at a time (a lock held for the whole run)."""

    name = "lost_server_recovery"

    def __init__(
        self,
        *,
        whitelist: Whitelist,
        burial: ServerBurial,
        removal: MemberRemoval,
        layout: LayoutCache,
        pause: SchedulingPause,
        term: ActGate,
        store: MetaStore,
        clock: Clock,
        wake: Callable[[str], None],
        views: ViewAgreement,
        view_timeout_us: int,
    ) -> None:
        """``wake(name)`` runs a task now (the balancer and the checkers after a burial);
        ``views`` is the wait for ``DBA_OB_LS_LOCATIONS`` before the statements answer,
        bounded by ``view_timeout_us``."""
        self.whitelist = whitelist
        self.burial = burial
        self.removal = removal
        self.layout = layout
        self.pause = pause
        self.term = term
        self.store = store
        self.clock = clock
        self.wake = wake
        self.views = views
        self.view_timeout_us = view_timeout_us
        self._lock = threading.Lock()
        self._checked_epoch = 0

    # --- validation ------------------------------------------------------------------

    def _resolve(self, servers: list[str], *, allow_buried: bool) -> list[str]:
        """The canonical keys of the statement's servers: each whitelisted (or, with
        ``allow_buried``, buried) and not heartbeating. Raises OB_INVALID_ARGUMENT,
        OB_SERVER_NOT_IN_WHITE_LIST, OB_SERVER_ALREADY_DELETED, OB_OP_NOT_ALLOW."""
        keys: list[str] = []
        for text in servers:
            key = format_server(*parse_server(text))
            if key in keys:
                raise ObError("OB_INVALID_ARGUMENT", f"server '{key}' listed twice")
            keys.append(key)
        if not keys:
            raise ObError("OB_INVALID_ARGUMENT", "empty server list")
        stones = self.whitelist.tombstones
        for key in keys:
            s = self.whitelist.get(key)
            buried = stones.get(key) is not None
            if buried and not allow_buried:
                raise ObError("OB_SERVER_ALREADY_DELETED", detail=f"server '{key}' is buried")
            if s is None and not buried:
                raise ObError("OB_SERVER_NOT_IN_WHITE_LIST", detail=f"server '{key}'")
            if s is not None and s.is_alive():
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"removing server '{key}' as lost while it heartbeats (its lease is "
                    "valid: use DELETE SERVER, or stop its agent first); it is",
                )
        return keys

    # --- FORCE DELETE SERVER -------------------------------------------------------------

    def force_delete(self, servers: list[str]) -> Outcome:
        """FORCE DELETE SERVER (see the module). Raises what :meth:`_resolve` raises,
        OB_OP_NOT_ALLOW naming the first LS that would lose its majority, and ``ObError``
        of the burial's transaction; nothing is changed by a refusal. Member changes that
        fail after the burial are returned in ``failures`` (the LS keeps the buried member
        until its unit moves and the reconciler's member change drops it)."""
        with self._lock, self.pause.hold("FORCE DELETE SERVER"):
            keys = self._resolve(servers, allow_buried=False)
            gone = set(keys)

            def minority(key: LsKey, members: int) -> ObError:
                return ObError(
                    "OB_OP_NOT_ALLOW",
                    f"force delete server(s) {', '.join(keys)} while log stream {key[1]} "
                    f"of tenant {key[0]} would keep less than a majority of {members} "
                    "members in service",
                    detail="recover it with ALTER SYSTEM RECOVER LS ... FROM LOST SERVERS",
                )

            plan = make_plan(keys, self.removal.inputs(gone), minority=minority)
            text = "ALTER SYSTEM FORCE DELETE SERVER " + ", ".join(f"'{k}'" for k in keys)
            out = Outcome(plan, self.burial.bury(keys, "FORCE DELETE SERVER", text))
            self.removal.forget(keys)
            for step in plan.steps:
                try:
                    self.removal.remove_member(step.key, gone, "force delete server")
                except ObError as e:
                    out.failures[step.key] = e
                    log.warning("FORCE DELETE: LS %s keeps %s for now: %s", step.key, keys, e)
        self._wake_all()
        self._wait_views(out, "force delete server")
        return out

    def _wait_views(self, out: Outcome, what: str) -> None:
        """The statement answers once ``DBA_OB_LS_LOCATIONS`` shows each LS it changed led
        by its leader, none by a removed server (:meth:`ViewAgreement.wait_led`, within
        ``leader_switch_timeout``). Raises OB_WAIT_LEADER_SWITCH_TIMEOUT naming the LS whose
        rows still disagree: the change itself is done (see the job)."""
        changed = [s for s in out.plan.steps if s.key not in out.failures]
        if not changed:
            return
        self.views.wait_led(
            [s.key for s in changed],
            out.plan.removed,
            sorted({m for s in changed for m in s.members_after}),
            self.clock.now_us() + self.view_timeout_us,
            f"{what} {', '.join(out.plan.removed)} done (job(s) {', '.join(map(str, out.jobs))})",
        )

    def _wake_all(self) -> None:
        for name in ("balancer", "empty_server_checker", "lost_replica_checker", "ls_reconciler"):
            self.wake(name)

    # --- RECOVER LS --------------------------------------------------------------------

    def recover(
        self,
        servers: list[str],
        tenant_id: int | None = None,
        ls_id: int | None = None,
        *,
        dry_run: bool = False,
    ) -> Outcome:
        """RECOVER LS (see the module) of the LS selected by ``tenant_id`` / ``ls_id``
        (None: all). Raises what :meth:`_resolve` raises; OB_ENTRY_NOT_EXIST for an LS that
        does not exist; OB_OP_NOT_ALLOW when no selected LS lost its majority to these
        servers, or an LS to recover has an unnamed dead member or no survivor;
        OB_STATE_NOT_MATCH when a report changed between the plan and its check;
        ``ObError`` of the store. The job row is FAILED by a refusal after stage 1."""
        only = keys_filter(tenant_id, ls_id)
        topo = self.layout.topology(force=True)
        if not any(only(k) for k in topo.plans):
            what = f"log stream {ls_id}" if ls_id is not None else "log streams"
            raise ObError(
                "OB_ENTRY_NOT_EXIST",
                f"{what}{f' of tenant {tenant_id}' if tenant_id is not None else ''}",
            )
        with self._lock, self.pause.hold("RECOVER LS"):
            keys = self._resolve(servers, allow_buried=True)
            gone = set(keys)
            plan = make_plan(keys, self.removal.inputs(gone), only)
            if not plan.recovering():
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"recover ls from lost servers {', '.join(keys)} when no selected log "
                    "stream lost its majority to them (FORCE DELETE SERVER removes them "
                    "from the others); it is",
                )
            if dry_run:
                return Outcome(plan)
            job = self._stage(None, plan, "planned", 10, "recover_ls_plan", keys=keys)
            out = Outcome(plan, [job])
            try:
                again = make_plan(keys, self.removal.inputs(gone), only)
                if again.digest != plan.digest:
                    raise ObError(
                        "OB_STATE_NOT_MATCH",
                        detail=f"the replica reports changed since plan {plan.plan_id} was "
                        f"made (now {again.plan_id}): run the statement again",
                    )
                back = [k for k in keys if (s := self.whitelist.get(k)) and s.is_alive()]
                if back:
                    raise ObError(
                        "OB_OP_NOT_ALLOW",
                        f"recover ls from lost server(s) {', '.join(back)}, which heartbeat "
                        "again; it is",
                    )
                self._stage(job, plan, "checked", 20, "recover_ls_check")
                out.jobs += self.burial.bury(
                    keys,
                    f"RECOVER LS plan {plan.plan_id}",
                    f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS (plan {plan.plan_id})",
                    stage=(job, 40, self._info(plan, "buried")),
                    events=[self._event(job, plan, "recover_ls_bury")],
                )
                self.removal.forget(keys)
            except ObError as e:
                self._finish(job, plan, e)
                raise
            try:
                out.failures = self._apply(plan)
            except Exception as e:
                # Not left INPROGRESS until the next term: the statement runs again.
                self._finish(job, plan, ObError("OB_ERR_UNEXPECTED", detail=str(e)[:200]))
                raise
            self._finish(job, plan, self._failure(out.failures))
        self._wake_all()
        self._wait_views(out, "recover ls from lost servers")
        return out

    def _apply(self, plan: RecoveryPlan) -> dict[LsKey, ObError]:
        """Stage 4: every step, RECOVER first; returns the failures by LS."""
        gone = set(plan.removed)
        failures: dict[LsKey, ObError] = {}
        for step in plan.recovering():
            try:
                self.removal.recover(step, gone)
            except ObError as e:
                failures[step.key] = e
        for step in plan.steps:
            if step.action == "REMOVE_MEMBER":
                try:
                    self.removal.remove_member(step.key, gone, "recover ls from lost servers")
                except ObError as e:
                    failures[step.key] = e
        return failures

    @staticmethod
    def _failure(failures: dict[LsKey, ObError]) -> ObError | None:
        if not failures:
            return None
        named = "; ".join(f"LS {k[1]} of tenant {k[0]}: {e}" for k, e in sorted(failures.items()))
        return ObError("OB_ERR_SYS", detail=f"not recovered (run the statement again): {named}")

    # --- the job row and the events ------------------------------------------------------

    @staticmethod
    def _info(plan: RecoveryPlan, stage: str, error: str = "") -> str:
        d = json.loads(plan.to_json())
        d["stage"] = stage
        if error:
            d["error"] = error
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    def _event(self, job: int, plan: RecoveryPlan, name: str, extra: str = "") -> Event:
        return Event(
            self.clock.now_us(),
            MODULE,
            name,
            (
                ("job_id", job),
                ("plan_id", plan.plan_id),
                ("removed", ",".join(plan.removed)),
                ("ls", ",".join(f"{s.tenant_id}.{s.ls_id}" for s in plan.steps)),
                ("digest", plan.digest[:16]),
            ),
            extra,
        )

    def _stage(
        self,
        job: int | None,
        plan: RecoveryPlan,
        stage: str,
        progress: int,
        event: str,
        keys: list[str] | None = None,
    ) -> int:
        """Record ``stage`` in the job row (created when ``job`` is None) and its event, in
        one fenced transaction. Returns the job id."""
        now = self.clock.now_us()
        with self.store.txn() as conn:
            if job is None:
                ip, port = parse_server((keys or list(plan.removed))[0])
                job = job_repo.create_job(
                    conn,
                    JOB_TYPE,
                    ip,
                    port,
                    now,
                    self.store.rs_addr,
                    "ALTER SYSTEM RECOVER LS FROM LOST SERVERS "
                    + ", ".join(f"'{k}'" for k in plan.removed),
                )
            job_repo.set_job_progress(conn, job, progress, self._info(plan, stage), now)
            event_repo.insert_events(conn, [self._event(job, plan, event)], self.store.rs_addr)
        return job

    def _finish(self, job: int, plan: RecoveryPlan, error: ObError | None) -> None:
        """End the job: SUCCESS, or FAILED with ``error``; event ``recover_ls_done`` /
        ``recover_ls_failed``."""
        now = self.clock.now_us()
        status = "SUCCESS" if error is None else "FAILED"
        info = self._info(plan, "done" if error is None else "failed", str(error or ""))
        name = "recover_ls_done" if error is None else "recover_ls_failed"
        with self.store.txn() as conn:
            job_repo.set_job_progress(conn, job, 100 if error is None else 40, info, now)
            job_repo.finish_job(conn, job, status, now, error.code if error is not None else 0)
            event_repo.insert_events(
                conn, [self._event(job, plan, name, str(error or ""))], self.store.rs_addr
            )
        if error is not None:
            log.warning("RECOVER LS job %d (plan %s) FAILED: %s", job, plan.plan_id, error)

    # --- resumption after a failover ---------------------------------------------------

    def run_once(self) -> int:
        """Once per term: end the RECOVER_LS jobs a previous leader left INPROGRESS. One
        found before its commit point (stage ``planned`` / ``checked``: nothing changed) is
        FAILED; one found after it is finished from its plan (stage 4, scheduling paused).
        Returns the jobs ended. Raises ``ObError`` from the store (retried next round)."""
        if not self.term.may_act():
            return 0
        epoch = self.store.epoch
        if epoch == self._checked_epoch:
            return 0
        ended = 0
        # Statements hold this lock for their whole run: a job INPROGRESS seen under it
        # belongs to no running statement of this RS.
        with self._lock, self.pause.hold("RECOVER LS resumed"):
            with self.store.read() as conn:
                jobs = job_repo.inprogress_jobs(conn, JOB_TYPE)
            for j in jobs:
                try:
                    info = json.loads(j.extra_info)
                    plan = RecoveryPlan.from_json(j.extra_info)
                except (ValueError, KeyError, TypeError) as e:
                    log.warning("RECOVER_LS job %d: unreadable plan (%s)", j.job_id, e)
                    continue
                if info.get("stage") == "buried":
                    log.warning(
                        "RECOVER LS job %d (plan %s) resumed after an RS failover",
                        j.job_id,
                        plan.plan_id,
                    )
                    self._finish(j.job_id, plan, self._failure(self._apply(plan)))
                else:
                    self._finish(
                        j.job_id,
                        plan,
                        ObError(
                            "OB_CANCELED",
                            detail="interrupted by an RS failover before its commit point; "
                            "nothing was changed: run the statement again",
                        ),
                    )
                ended += 1
        self._checked_epoch = epoch
        if ended:
            self._wake_all()
        return ended
