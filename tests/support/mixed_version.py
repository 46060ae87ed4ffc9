"""A rolling upgrade from the previous release to the current code with real processes: the
orchestration shared by tests/integration/test_mixed_version.py and ``make demo-upgrade``.

:class:`MixedCluster` starts root services and agents of either release (the previous one
from :mod:`tests.support.previous_release`'s virtualenv, with the command-line flags it
knows, which are today's: the flags of ``rootservice serve`` and ``observer-agent`` did not
change) on one database. :func:`rolling_upgrade` runs the whole sequence an operator runs:
everything on the previous release; the root services replaced one by one (the standby
first, then a failover, when there are two); BEGIN UPGRADE and BEGIN ROLLING UPGRADE; zone
by zone STOP ZONE, the agents replaced in an order drawn from the seed, START ZONE, back
ACTIVE and caught up; the root services and one zone rolled back to the previous release and
forward again; END ROLLING UPGRADE (the cluster version rises) and END UPGRADE.

Meanwhile :class:`Checker` asks the leader every half second and records what an operator
must never see during a correct rolling upgrade: a server INACTIVE outside the zone being
upgraded, a log stream without a leader on an ACTIVE server, and a statement answered
neither OK nor with an OceanBase error (a broken connection, a malformed answer). With one
root service the checker pauses while it is replaced (nobody answers then, by design).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from sql.client import execute, result_rows
from tests.support import pki
from tests.support.cluster import Proc, ProcSet, agent_cmd, rs_cmd, wait_until
from tests.support.ports import free_port
from tests.support.previous_release import PreviousRelease
from tests.support.timescale import scaled

#: Replays a run's restart order (the seed every run prints).
SEED_ENV = "OB_UPGRADE_SEED"

CURRENT = "current"
PREVIOUS = "previous"

RS_FLAGS: dict[str, Any] = {
    "lease_time": "2s",
    "server_suspect_time": "6s",
    "heartbeat_interval": "500ms",
    "empty_server_check_interval": "1s",
    "allow_short_timings": True,
    "rpc_timeout": "1s",
    "ls_check_interval": "300ms",
    "ls_log_sync_threshold": "1s",
    "stop_server_check_timeout": "2s",
    "leader_switch_timeout": "15s",
    "tenant_create_timeout": "20s",
}
AGENT_FLAGS: dict[str, Any] = {
    "heartbeat_interval": "500ms",
    "rpc_timeout": "1s",
    "disk_probe_interval": "200ms",
    "replica_size": "256K",
    "log_interval": "100ms",
}


def draw_seed() -> int:
    """The seed of this run: :data:`SEED_ENV` when set, else a fresh one."""
    raw = os.environ.get(SEED_ENV, "").strip()
    return int(raw) if raw else random.SystemRandom().randrange(1, 2**31)


@dataclass
class Counts:
    """What the checker saw. ``inactive``: (server, sample) pairs INACTIVE outside the zone
    being upgraded; ``leaderless_s``: seconds some log stream had no leader on an ACTIVE
    server (``leaderless_in_zone_s`` apart: log streams whose primary zone is the zone being
    upgraded, while their leader moves out and back); ``unclear``: statements answered neither OK nor with an OceanBase error (their
    text in ``unclear_what``); ``samples``, ``ob_errors``: for scale."""

    samples: int = 0
    inactive: int = 0
    leaderless_s: float = 0.0
    unclear: int = 0
    ob_errors: int = 0
    leaderless_in_zone_s: float = 0.0
    leaderless_in_zone_what: list[str] = field(default_factory=list)
    statements: int = 0
    inactive_what: list[str] = field(default_factory=list)
    leaderless_what: list[str] = field(default_factory=list)
    unclear_what: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line for the log of a run."""
        return (
            f"checker: {self.samples} samples, {self.statements} statements; INACTIVE outside "
            f"the upgraded zone {self.inactive}, seconds without a leader "
            f"{self.leaderless_s:.1f} (and {self.leaderless_in_zone_s:.1f} of log streams "
            f"whose primary zone was the one upgraded), unclear answers {self.unclear} "
            f"(OceanBase errors {self.ob_errors})"
        )


class MixedCluster:
    """Root services and agents of the current code and of ``prev`` on ``db_url``, their
    processes through ``procs`` (stopped by its owner)."""

    def __init__(
        self,
        procs: ProcSet,
        tmp: Path,
        db_url: str,
        prev: PreviousRelease,
        *,
        rs_count: int = 1,
        say: Callable[[str], None] = print,
    ) -> None:
        self.procs = procs
        self.tmp = tmp
        self.db_url = db_url
        self.prev = prev
        self.say = say
        self.rs_addrs = [f"127.0.0.1:{free_port()}" for _ in range(rs_count)]
        self.rs: dict[str, Proc] = {}
        self.rs_release: dict[str, str] = {}
        self.agents: dict[str, Proc] = {}
        self.zone_of: dict[str, str] = {}
        self.agent_release: dict[str, str] = {}
        self.counts = Counts()
        #: The primary zone of tenant t1 (where its leaders belong).
        self.primary_zone = "z1"
        self._lock = threading.Lock()
        self._starts = 0

    # ----------------------------------------------------------------- processes

    def _command(self, cmd: list[str], release: str, script: Path) -> list[str]:
        # rs_cmd / agent_cmd run "<python> -m <module>"; the previous release runs its own
        # console script (never this checkout's modules: its cwd is not the checkout).
        assert cmd[1] == "-m", cmd
        return cmd if release == CURRENT else [str(script), *cmd[3:]]

    def _start(self, cmd: list[str], name: str, release: str) -> Proc:
        self._starts += 1
        env = self.prev.env() if release == PREVIOUS else None
        return self.procs.start(cmd, f"{name}-{release}-{self._starts}", env=env, cwd=self.tmp)

    def start_rs(self, addr: str, release: str, wait: bool = True) -> Proc:
        """Start the root service of ``addr`` (its data directory kept across releases);
        waits until it is alive unless ``wait`` is False."""
        name = f"rs{self.rs_addrs.index(addr) + 1}"
        cmd = rs_cmd(self.db_url, addr, self.tmp / name, **RS_FLAGS)
        p = self._start(self._command(cmd, release, self.prev.rootservice), name, release)
        p.health_service = "liveness"
        self.rs[addr], self.rs_release[addr] = p, release
        if wait:
            p.wait_healthy(addr, timeout_s=60)
        return p

    def start_agent(
        self, zone: str, release: str, addr: str | None = None, rs_list: list[str] | None = None
    ) -> str:
        """Start the agent of ``addr`` (a new one when None) in ``zone`` knowing ``rs_list``
        (default: every root service); its data directory is kept across releases."""
        addr = addr or f"127.0.0.1:{free_port()}"
        name = f"agent-{addr.rsplit(':', 1)[1]}"
        rs = rs_list or self.rs_addrs
        cmd = agent_cmd(rs, addr, free_port(), zone, self.tmp / name, **AGENT_FLAGS)
        p = self._start(self._command(cmd, release, self.prev.observer_agent), name, release)
        p.wait_healthy(addr, timeout_s=60)
        self.agents[addr], self.zone_of[addr], self.agent_release[addr] = p, zone, release
        return addr

    def replace_agent(self, addr: str, release: str) -> None:
        """Stop the agent of ``addr`` politely and start it again on ``release``."""
        self.agents[addr].stop()
        self.start_agent(self.zone_of[addr], release, addr)

    # ----------------------------------------------------------------- statements

    def sql(self, statement: str, timeout_s: float = 60.0) -> obrpc_pb2.SqlResponse | None:
        """``statement`` on the leader; None when no root service answered (counted as
        unclear). Every answer is classified."""
        try:
            resp = execute(
                self.rs_addrs, statement, timeout_s=scaled(timeout_s), credentials=pki.credentials()
            )
        except Exception as e:  # any failure to answer is what the checker counts
            self._classify(statement, None, f"{type(e).__name__}: {str(e)[:200]}")
            return None
        self._classify(statement, resp, "")
        return resp

    def _classify(self, statement: str, resp: obrpc_pb2.SqlResponse | None, why: str) -> None:
        with self._lock:
            self.counts.statements += 1
            if resp is not None and resp.error.code == 0:
                return
            if resp is not None and resp.error.name.startswith("OB_") and resp.error.message:
                self.counts.ob_errors += 1
                return
            if resp is not None:
                why = f"{resp.error.code} {resp.error.name!r} {resp.error.message!r}"
            self.counts.unclear += 1
            self.counts.unclear_what.append(f"{statement[:60]}: {why}")

    def ok(self, statement: str, timeout_s: float = 60.0) -> list[list[Any]]:
        """The rows of ``statement``; AssertionError naming the error otherwise."""
        resp = self.sql(statement, timeout_s)
        assert resp is not None, f"{statement}: no root service answered"
        assert resp.error.code == 0, f"{statement}: {resp.error.name} {resp.error.message}"
        return result_rows(resp)

    def until_ok(self, statement: str, timeout_s: float, what: str) -> list[list[Any]]:
        """Run ``statement`` until it is accepted (each refusal must be an OceanBase error:
        a pre-check naming what still blocks)."""
        last: list[str] = []

        def accepted() -> bool:
            resp = self.sql(statement, timeout_s=20)
            if resp is not None and resp.error.code == 0:
                last[:] = ["ok"]
                self._rows = result_rows(resp)
                return True
            last[:] = [resp.error.message if resp is not None else "no answer"]
            return False

        wait_until(accepted, timeout_s, interval_s=0.5, message=f"{what} (last: {last})")
        return self._rows

    _rows: list[list[Any]] = []

    def servers(self) -> dict[str, tuple[str, str, str]]:
        """``addr -> (zone, status, build_version)`` from ``__all_server``."""
        return {
            f"{ip}:{port}": (zone, status, build)
            for ip, port, zone, status, build in self.ok(
                "SELECT svr_ip, svr_port, zone, status, build_version FROM __all_server"
            )
        }

    def cluster_version(self) -> str:
        """``min_observer_version`` as SHOW PARAMETERS shows it (a current leader only)."""
        rows = self.ok("SHOW PARAMETERS LIKE 'min_observer_version'")
        return str(rows[0][6])

    def stage(self, title: str) -> None:
        """Print a stage with the cluster version (when the leader knows one)."""
        leader_release = {self.rs_release.get(a) for a in self.rs if self.rs[a].alive}
        version = "n/a (no 0.2.0 root service yet)"
        if CURRENT in leader_release and PREVIOUS not in leader_release:
            try:
                version = self.cluster_version()
            except AssertionError:
                version = "unknown"
        self.current_stage = title
        self.say(f"== {title} [cluster version {version}]")

    current_stage = ""


class Checker(threading.Thread):
    """Samples the cluster every ``interval_s`` through ``c`` until :meth:`finish`, adding
    to ``c.counts``. ``zone``: the zone being upgraded (None between zones)."""

    def __init__(self, c: MixedCluster, interval_s: float = 0.5) -> None:
        super().__init__(name="upgrade-checker", daemon=True)
        self.c = c
        self.interval_s = interval_s
        self.zone: str | None = None
        self.paused = threading.Event()
        self._done = threading.Event()
        self._last: float | None = None
        # Held for a whole sample: pause() takes it so that a sample begun before the pause
        # cannot send its second statement to the root service being stopped (a clean-clone
        # run counted that "connection refused" as an unclear answer).
        self._sampling = threading.Lock()

    def finish(self) -> Counts:
        """Stop sampling; the counts."""
        self._done.set()
        self.join(timeout=scaled(30))
        return self.c.counts

    def pause(self) -> None:
        """Stop sampling until :meth:`resume` (the only root service is being replaced);
        returns once a sample in flight has finished."""
        self.paused.set()
        with self._sampling:
            pass

    def resume(self) -> None:
        """Sample again, the gap not counted."""
        self._last = None
        self.paused.clear()

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            with self._sampling:
                if not self.paused.is_set():
                    self.sample()

    def sample(self) -> None:
        """One look: statuses and leaders. Statements that fail are counted by the cluster's
        classification, the sample is skipped then."""
        c = self.c
        # The zone under upgrade before and after the queries: a zone finishing between the
        # two (its servers ACTIVE in a later read by the upgrade, the zone reset to None)
        # leaves a sample taken while it was still upgrading - a clean-clone run counted
        # one of its servers INACTIVE "while upgrading None" that way. Either zone is exempt.
        zone_before = self.zone
        a = c.sql("SELECT svr_ip, svr_port, zone, status FROM __all_server", timeout_s=10)
        b = c.sql("SELECT tenant_id, ls_id, svr_ip, svr_port, role FROM DBA_OB_LS_LOCATIONS", 10)
        now = time.monotonic()
        if self.paused.is_set() or a is None or b is None or a.error.code or b.error.code:
            self._last = None
            return
        status = {f"{ip}:{p}": (z, st) for ip, p, z, st in result_rows(a)}
        leaders: dict[tuple[int, int], bool] = {}
        rows = result_rows(b)
        for tenant, ls, ip, port, role in rows:
            ok = role == "LEADER" and status.get(f"{ip}:{port}", ("", ""))[1] == "ACTIVE"
            key = (int(str(tenant)), int(str(ls)))
            leaders[key] = leaders.get(key, False) or ok
        zone = self.zone
        exempt = {zone_before, zone}
        with c._lock:
            counts = c.counts
            counts.samples += 1
            for addr, (z, st) in sorted(status.items()):
                if st != "ACTIVE" and z not in exempt:
                    counts.inactive += 1
                    counts.inactive_what.append(
                        f"{addr} ({z}) {st} while upgrading {zone} at "
                        f"{time.strftime('%H:%M:%S')} in stage {c.current_stage!r}"
                    )
            missing = [k for k, led in sorted(leaders.items()) if not led]
            if missing and self._last is not None:
                gap = now - self._last
                what = (
                    f"{missing} at {time.strftime('%H:%M:%S')} in stage {c.current_stage!r} "
                    f"(zone {zone}): {[r for r in rows if (int(str(r[0])), int(str(r[1]))) in missing]}"
                )
                if zone is not None and zone == c.primary_zone:
                    # Their leader belongs in the zone being upgraded (its primary zone):
                    # moving out of it and back in is that zone's upgrade, counted apart.
                    counts.leaderless_in_zone_s += gap
                    counts.leaderless_in_zone_what.append(what)
                else:
                    counts.leaderless_s += gap
                    counts.leaderless_what.append(what)
        self._last = now


@dataclass
class Run:
    """What :func:`rolling_upgrade` measured."""

    seed: int
    counts: Counts
    timings: dict[str, float]
    cluster_versions: list[str]


def upgrade_zone(
    c: MixedCluster, checker: Checker, zone: str, release: str, rng: random.Random
) -> None:
    """STOP ZONE (once the other zones are back and caught up: the RS's own check), the
    zone's agents replaced by ``release`` in an order drawn from ``rng``, START ZONE, and
    back: every agent of the zone ACTIVE on ``release``."""
    # The zone's upgrade starts with its STOP ZONE, which moves its leaders off: a 0.1.0
    # leader answers that statement before the view shows the new leaders, so the gap
    # belongs to this zone (a clean-clone run counted 0.57 s of it against the others).
    checker.zone = zone
    c.until_ok(f"ALTER SYSTEM STOP ZONE '{zone}'", 90, f"STOP ZONE {zone} accepted")
    order = sorted(a for a, z in c.zone_of.items() if z == zone)
    rng.shuffle(order)
    c.say(f"   {zone}: restarting {', '.join(order)} on the {release} release")
    for addr in order:
        c.replace_agent(addr, release)
    c.ok(f"ALTER SYSTEM START ZONE '{zone}'")
    prefix = "0.1.0" if release == PREVIOUS else ""

    def back() -> bool:
        shown = c.servers()
        return all(
            shown[a][1] == "ACTIVE"
            and (shown[a][2].startswith("4.2.0.0") if prefix else not shown[a][2].startswith("4."))
            for a in order
        )

    wait_until(back, 60, interval_s=0.5, message=f"zone {zone} ACTIVE on {release}")
    if zone == c.primary_zone:
        # Caught up: the leaders come back to their primary zone (a bounded wait; should
        # they not, a gap later counts against the other zones).
        try:
            wait_until(partial(leaders_in, c, zone), 30, interval_s=0.5, message="leaders back")
        except AssertionError:
            c.say(f"   the leaders did not come back to {zone}")
    checker.zone = None


def leaders_in(c: MixedCluster, zone: str) -> bool:
    """Whether every log stream's leader is on a server of ``zone``."""
    rows = c.ok("SELECT tenant_id, ls_id, svr_ip, svr_port, role FROM DBA_OB_LS_LOCATIONS")
    led = {
        (t, ls)
        for t, ls, ip, port, role in rows
        if role == "LEADER" and c.zone_of.get(f"{ip}:{port}") == zone
    }
    return bool(rows) and led == {(r[0], r[1]) for r in rows}


def rolling_upgrade(
    c: MixedCluster,
    seed: int,
    *,
    zones: tuple[int, ...] = (2, 1, 1),
    ls_count: int = 2,
    rollback_zone: str = "z1",
    rs_rollback: bool = True,
) -> tuple[Run, Checker]:
    """The whole sequence of the module doc on ``c`` (its root services not started yet):
    ``zones[i]`` agents in zone z<i+1>, tenant t1 with ``ls_count`` log streams. Returns
    what was measured and the checker (finished). With ``rs_rollback`` the root services
    are also taken back to the previous release once the zones were upgraded, and forward
    again (the previous release's leader then serves current agents, and ``rollback_zone``
    goes back under it). Raises AssertionError when a step does
    not complete."""
    rng = random.Random(seed)
    timings: dict[str, float] = {}
    versions: list[str] = []
    t0 = time.monotonic()
    c.say(f"mixed-version upgrade seed {seed} ({SEED_ENV}={seed} replays it)")

    c.stage(f"start {len(c.rs_addrs)} root service(s) and {sum(zones)} agents on {c.prev.release}")
    for addr in c.rs_addrs:
        c.start_rs(addr, PREVIOUS)
    per_zone = {f"z{i}": n for i, n in enumerate(zones, start=1)}
    for zone, n in per_zone.items():
        for _ in range(n):
            c.start_agent(zone, PREVIOUS)
    first = {z: next(a for a, zz in c.zone_of.items() if zz == z) for z in per_zone}
    items = ", ".join(f"ZONE '{z}' SERVER '{a}'" for z, a in first.items())
    c.ok(f"ALTER SYSTEM BOOTSTRAP REGION 'r1' {items}")
    for addr, zone in c.zone_of.items():
        if addr not in first.values():
            c.ok(f"ALTER SYSTEM ADD SERVER '{addr}' ZONE '{zone}'")
    wait_until(
        lambda: (
            all(s[1] == "ACTIVE" for s in c.servers().values())
            and len(c.servers()) == len(c.agents)
        ),
        60,
        message="every server ACTIVE",
    )
    c.ok("CREATE RESOURCE UNIT u1 MAX_CPU 1, MEMORY_SIZE '2G', LOG_DISK_SIZE '4G'")
    zone_list = ", ".join(f"'{z}'" for z in per_zone)
    c.ok(f"CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ({zone_list})")
    c.ok(f"CREATE TENANT t1 RESOURCE_POOL_LIST ('p1'), PRIMARY_ZONE 'z1', LS_COUNT {ls_count}")
    timings["previous release up"] = time.monotonic() - t0

    checker = Checker(c)
    checker.start()
    try:
        wait_until(lambda: c.counts.samples > 2, 30, message="the checker sampling")
        _replace_root_services(c, checker, CURRENT)
        timings["root services upgraded"] = time.monotonic() - t0
        versions.append(c.cluster_version())
        c.stage("ALTER SYSTEM BEGIN UPGRADE, BEGIN ROLLING UPGRADE")
        c.until_ok("ALTER SYSTEM BEGIN UPGRADE", 60, "BEGIN UPGRADE accepted")
        c.ok("ALTER SYSTEM BEGIN ROLLING UPGRADE")
        for zone in per_zone:
            c.stage(f"zone {zone} to the current release")
            upgrade_zone(c, checker, zone, CURRENT, rng)
        if rs_rollback:
            # Back to the previous release under current agents: its root service must start
            # on the expanded schema and take their leases; the zone's current agents then
            # stop under it (their stopping notice is gated: it would refuse one).
            c.stage(f"root services back to {c.prev.release} (rollback before finalizing)")
            _replace_root_services(c, checker, PREVIOUS)
        c.stage(f"zone {rollback_zone} back to {c.prev.release} (rollback before finalizing)")
        upgrade_zone(c, checker, rollback_zone, PREVIOUS, rng)
        if rs_rollback:
            _replace_root_services(c, checker, CURRENT)
        refused = c.sql("ALTER SYSTEM END ROLLING UPGRADE")
        assert refused is not None and refused.error.name == "OB_OP_NOT_ALLOW", refused
        c.say(f"   END ROLLING UPGRADE refused meanwhile: {refused.error.message[:160]}")
        c.stage(f"zone {rollback_zone} forward again")
        upgrade_zone(c, checker, rollback_zone, CURRENT, rng)
        timings["zones upgraded"] = time.monotonic() - t0
        c.stage("ALTER SYSTEM END ROLLING UPGRADE")
        c.until_ok("ALTER SYSTEM END ROLLING UPGRADE", 60, "END ROLLING UPGRADE accepted")
        versions.append(c.cluster_version())
        c.ok("ALTER SYSTEM END UPGRADE")
        c.stage("ALTER SYSTEM END UPGRADE done")
    finally:
        counts = checker.finish()
    c.say(counts.line())
    timings["finalized"] = time.monotonic() - t0
    return Run(seed, counts, timings, versions), checker


def _replace_root_services(c: MixedCluster, checker: Checker, release: str) -> None:
    """Every root service restarted on ``release``: with one, the checker pauses meanwhile;
    with several, the standbys first, then the leader (a failover to one already
    replaced)."""
    c.stage(f"root services to the {release} release")
    single = len(c.rs_addrs) == 1
    leader = _leader(c)
    order = [a for a in c.rs_addrs if a != leader] + [leader]
    for addr in order:
        if single:
            checker.pause()
        c.rs[addr].stop()
        c.start_rs(addr, release, wait=True)
        if not single:
            # The next one stops only once this one follows the leader again.
            wait_until(partial(_member_seen, c, addr), 60, message=f"root service {addr} a member")
        else:
            wait_until(partial(_answers, c), 60, message="the root service leading")
            checker.resume()


def _answers(c: MixedCluster) -> bool:
    """Whether a statement succeeds, not classified: while the only root service is replaced
    nobody answers by design, and the checker is paused."""
    try:
        resp = execute(
            c.rs_addrs,
            "SELECT zone FROM __all_zone",
            timeout_s=scaled(10),
            credentials=pki.credentials(),
        )
    except Exception:  # not up yet: the caller waits
        return False
    return resp.error.code == 0


#: The states of a root service in office (its metrics' ``state``; both releases).
LEADER_STATES = ("WAIT_BOOTSTRAP", "BOOTSTRAPPING", "IN_SERVICE", "FULL_SERVICE")


def rs_metrics(addr: str) -> dict[str, Any] | None:
    """``GetMetrics`` of the root service at ``addr`` (both releases), None when it does not
    answer."""
    try:
        with pki.channel(addr) as ch:
            resp = obrpc_pb2_grpc.AdminServiceStub(ch).GetMetrics(
                obrpc_pb2.MetricsRequest(), timeout=scaled(2)
            )
    except grpc.RpcError:
        return None
    return dict(json.loads(resp.json))


def rs_state(addr: str) -> str | None:
    """The state the root service at ``addr`` reports, None when it does not answer."""
    m = rs_metrics(addr)
    return None if m is None else str(m.get("state"))


def _leader(c: MixedCluster) -> str:
    if len(c.rs_addrs) == 1:
        return c.rs_addrs[0]

    def one() -> str | None:
        found = [a for a in c.rs_addrs if rs_state(a) in LEADER_STATES]
        return found[0] if len(found) == 1 else None

    return str(wait_until(one, 60, message="exactly one root service in office"))


def _member_seen(c: MixedCluster, addr: str) -> bool:
    # A standby again (the state of one that follows) while another leads.
    others = [a for a in c.rs_addrs if a != addr]
    return rs_state(addr) not in (None, *LEADER_STATES) and any(
        rs_state(a) == "FULL_SERVICE" for a in others
    )


def stopping_notices_refused(procs: ProcSet) -> list[str]:
    """The lines where an agent of ``procs`` says its stopping notice was refused (an RS of
    the previous release refuses the status bit it does not know)."""
    return [
        line
        for p in procs.started
        for line in p.log_text().splitlines()
        if "is stopping (refused" in line
    ]


def refuse_previous_agent(c: MixedCluster, zone: str = "z3") -> tuple[str, Proc]:
    """After finalization: a new agent of the previous release, added to ``zone``; returns
    its address and process once the leader refused its lease (its log names why)."""
    # The leader only: a 0.1.0 agent logs one lease refusal a minute, and the standby's
    # OB_RS_NOT_MASTER took that line (the leader's refusal was logged 80 s later).
    addr = c.start_agent(zone, PREVIOUS, rs_list=[_leader(c)])
    c.ok(f"ALTER SYSTEM ADD SERVER '{addr}' ZONE '{zone}'")
    p = c.agents[addr]
    wait_until(
        lambda: "below the cluster version" in p.log_text(),
        60,
        message="the previous release's agent refused",
    )
    return addr, p


def refuse_previous_rs(c: MixedCluster) -> Proc:
    """After finalization: every root service stopped, one started on the previous
    release; returns it once it exited (what it wrote is in its log)."""
    for p in c.rs.values():
        p.stop()
    p = c.start_rs(c.rs_addrs[0], PREVIOUS, wait=False)
    p.wait(60)
    return p
