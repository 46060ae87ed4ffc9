"""RS failover chaos run (``make chaos``): real root services, many agents.

Starts a private PostgreSQL (tests/support/pgserver.py), seeds a bootstrapped cluster of N servers
(3 zones), starts two ``rootservice serve`` processes on it and N agents - real
:class:`observer_agent.agent.Agent` objects (their lease loop, rs_list rotation, leader
hints and epoch refusal), all in one background event loop of this process, each knowing
both root services. Then, trial after trial, it injects one fault, rotating through:

- ``kill9``: kill -9 of the leader;
- ``sigstop``: SIGSTOP of the leader for ``lease_time + 2 s``, then SIGCONT;
- ``delete_kill9``: an acknowledged DELETE SERVER, then kill -9 of the leader at once;
- ``pg_restart``: PostgreSQL restarted (fast shutdown, start) under the load;
- ``pg_outage``: PostgreSQL stopped for ``lease_time + 1 s``, then started again: the
  leader's renewal fails, it steps down, and an RS takes office once the database is back.

For each trial it measures, from the moment of the fault: the time until an RS reports
FULL_SERVICE under a new epoch (take-office time; for ``pg_restart`` until the lease is held
again in FULL_SERVICE, 0 when the leader survived; for ``pg_outage`` from the database's
return), and the time until the new leader counts
every server that was not deleted alive (its agent found the new leader) with every such
server ACTIVE in ``__all_server`` (recovery). A thread polls
``__all_server`` every 50 ms throughout: a server missing from the table (lost), a deleted
server back to NORMAL (resurrected), and any server not ACTIVE are recorded - the last split
into "during the take-office grace" (must never happen) and after it (an agent that did
not find the new leader in time). The killed RS is restarted as the new standby; a paused
one is resumed and must step down; the writes it attempted and had refused are counted from
its ``GetMetrics``.

Prints one line per trial and the figures: trials, take-office p50/p99/max, recovery
p50/p99/max, writes rejected, servers lost / resurrected / INACTIVE during the grace (all
must be 0), and exits 1 when one of those is not 0. Every wait is bounded.

Usage::

    .venv/bin/python tests/chaos/chaos.py                    # 200 agents, 20 trials
    .venv/bin/python tests/chaos/chaos.py --agents 50 --trials 4 --lease-time 2s
    .venv/bin/python tests/chaos/chaos.py --quick --out counts.json  # smoke run (its test)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # the repository: tests.support

from obcommon.clock import SystemClock  # noqa: E402
from obcommon.durations import parse_duration  # noqa: E402
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc  # noqa: E402
from observer_agent.agent import Agent  # noqa: E402
from observer_agent.service import start_server, stop_server  # noqa: E402
from observer_agent.settings import AgentSettings  # noqa: E402
from rootservice.db import engine as dbengine  # noqa: E402
from rootservice.db import param_repo, timestamps, zone_repo  # noqa: E402
from rootservice.db.tables import all_server  # noqa: E402
from rootservice.db.zone_repo import ZoneInfo  # noqa: E402
from rootservice.servers.status import ServerStatus  # noqa: E402
from sql.client import execute  # noqa: E402
from tests.support.cluster import Proc, rs_cmd  # noqa: E402
from tests.support.pgserver import PgServer  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

ZONES = ("z1", "z2", "z3")
CLUSTER_ID = "c0ffee-chaos"
KINDS = ("kill9", "sigstop", "delete_kill9", "pg_restart", "pg_outage")
LEADER_STATES = ("WAIT_BOOTSTRAP", "BOOTSTRAPPING", "IN_SERVICE", "FULL_SERVICE")


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p * len(s) + 0.5) - 1))]


def metrics(addr: str, timeout_s: float = 0.5) -> dict[str, Any] | None:
    """``GetMetrics`` of one RS, None when it does not answer in time."""
    try:
        with grpc.insecure_channel(addr, options=[("grpc.enable_http_proxy", 0)]) as ch:
            resp = obrpc_pb2_grpc.AdminServiceStub(ch).GetMetrics(
                obrpc_pb2.MetricsRequest(), timeout=timeout_s
            )
    except grpc.RpcError:
        return None
    return json.loads(resp.json)  # type: ignore[no-any-return]


def wait_for(pred: Any, timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll ``pred`` until truthy (returned) or raise TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / interval_s) + 2):
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")


# --- the cluster -------------------------------------------------------------------------------


def seed(url: str, servers: list[str]) -> None:
    """3 zones and the servers, bootstrapped, never alive (as a restarted RS finds them)."""
    engine = dbengine.make_engine(url)
    try:
        dbengine.upgrade(engine)
        now = SystemClock().now_us()
        ts = timestamps.us_to_datetime(now)
        rows = []
        for i, addr in enumerate(servers):
            ip, port = addr.rsplit(":", 1)
            s = ServerStatus(id=i + 1, zone=ZONES[i % 3], ip=ip, port=int(port), sql_port=2881)
            s.last_offline_time = now
            rows.append(s.to_row() | {"gmt_create": ts, "gmt_modified": ts})
        with engine.begin() as conn:
            for z in ZONES:
                zone_repo.upsert_zone(conn, ZoneInfo(z, "ACTIVE", "r1", ""), now)
            conn.execute(all_server.insert(), rows)
            param_repo.set_param(conn, param_repo.PARAM_CLUSTER_ID, CLUSTER_ID, now)
            param_repo.set_param(conn, param_repo.PARAM_MAX_SERVER_ID, str(len(servers)), now)
            param_repo.set_param(conn, param_repo.PARAM_BOOTSTRAP_TIME, str(now), now)
    finally:
        engine.dispose()


class Agents:
    """N real agents in one event loop on a daemon thread, each serving its
    ``ObserverService`` (so a new leader's heartbeat requests reach them) unless
    ``serve`` is False."""

    def __init__(
        self, servers: list[str], rs_list: list[str], tmp: Path, hb: str, serve: bool = True
    ) -> None:
        self.serve = serve
        self.agents = [
            Agent(
                AgentSettings(
                    rs_list=rs_list,
                    rpc_addr=addr,
                    sql_port=2881,
                    zone=ZONES[i % 3],
                    data_dir=tmp / f"agent-{i}",
                    heartbeat_interval=hb,
                    rpc_timeout="1s",
                    disk_probe_interval="1h",
                    resource_refresh_interval="1h",
                ),
                SystemClock(),
            )
            for i, addr in enumerate(servers)
        ]
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="agents", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            servers = []
            for a in self.agents:
                if self.serve:
                    server, _ = await start_server(a)
                    servers.append((a, server))
                else:
                    a.mark_serving()
            try:
                await asyncio.gather(*(a.run(self._stop) for a in self.agents))
            finally:
                for a, server in servers:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(stop_server(a, server, 0.1), 2)

        self.loop.run_until_complete(main())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)


class Watch:
    """Polls ``__all_server`` every 50 ms; records servers lost (missing, not deleted),
    resurrected (deleted, then shown other than DELETING) and every not-ACTIVE sighting of a
    server that was not deleted, with its wall-clock time in microseconds.

    A server whose DELETE SERVER is on its way is in ``pending`` and not judged: the
    statement wakes the empty-server checker, which can remove an agent without replicas
    before the answer arrives. Once answered (:meth:`deleted_now`), only polls that began
    after the answer judge it (an earlier read may still show it ACTIVE)."""

    def __init__(self, engine: sa.Engine, servers: list[str]) -> None:
        self.engine = engine
        self.servers = servers
        self.deleted: set[str] = set()
        self.pending: set[str] = set()
        #: server -> time.monotonic_ns() when its DELETE SERVER was answered.
        self.deleted_at: dict[str, int] = {}
        self.lost: set[str] = set()
        self.resurrected: set[str] = set()
        self.not_active: list[tuple[int, str, str]] = []
        self.last: dict[str, str] = {}
        self.polls = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name="watch", daemon=True)

    def _run(self) -> None:
        # Bounded: one hour of polling at most.
        for _ in range(72_000):
            if self._stop.wait(0.05):
                return
            began = time.monotonic_ns()
            try:
                with self.engine.connect() as conn:
                    rows = conn.execute(
                        sa.text("SELECT svr_ip, svr_port, status FROM __all_server")
                    ).all()
            except sa.exc.SQLAlchemyError:
                continue  # the database restarting
            # Taken after the read: the rows were committed before this instant.
            now = int(time.time() * 1e6)
            self.judge({f"{ip}:{port}": st for ip, port, st in rows}, began, now)

    def judge(self, seen: dict[str, str], began: int, now: int) -> None:
        """One poll's rows (``"ip:port" -> status``) judged: ``began`` is when its read
        began (``time.monotonic_ns()``), ``now`` when it ended (wall clock, microseconds)."""
        self.last = seen
        self.polls += 1
        for s in self.servers:
            st = seen.get(s)
            # deleted_now() fills deleted_at before it clears pending: a server is in one
            # of the two while its statement is answered.
            if s in self.pending or began <= self.deleted_at.get(s, -1):
                continue
            if s in self.deleted:
                if st is not None and st != "DELETING":
                    self.resurrected.add(s)
            elif st is None:
                self.lost.add(s)
            elif st != "ACTIVE":
                self.not_active.append((now, s, st))

    def deleting(self, server: str) -> None:
        """``server``'s DELETE SERVER is about to be sent: not judged until answered."""
        self.pending.add(server)

    def deleted_now(self, server: str) -> None:
        """``server``'s DELETE SERVER was accepted just now."""
        self.deleted_at[server] = time.monotonic_ns()
        self.deleted.add(server)
        self.pending.discard(server)

    def all_active(self) -> bool:
        return all(self.last.get(s) == "ACTIVE" for s in self.servers if s not in self.deleted)

    def start(self) -> None:
        self._t.start()

    def stop(self) -> None:
        self._stop.set()
        self._t.join(10)


class Chaos:
    """Two RS processes, N agents, the trials and their figures."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.lease_s = parse_duration(args.lease_time) / 1e6
        self.pg = PgServer()
        self.pg.create_database("chaos")
        self.url = self.pg.url("chaos")
        base = args.port_base
        if base:
            self.servers = [f"127.0.0.1:{base + i}" for i in range(args.agents)]
        else:  # ports of this process's block (tests/support/ports.py): beside other runs
            self.servers = [f"127.0.0.1:{free_port()}" for _ in range(args.agents)]
        seed(self.url, self.servers)
        self.rs_addrs = [f"127.0.0.1:{free_port()}" for _ in range(2)]
        self.rs: dict[str, Proc] = {}
        self.starts = 0
        self.engine = sa.create_engine(self.url, pool_pre_ping=True)
        self.watch = Watch(self.engine, self.servers)
        self.agents: Agents | None = None
        self.results: list[dict[str, Any]] = []

    # --- processes -------------------------------------------------------------------------

    def spawn_rs(self, addr: str) -> Proc:
        self.starts += 1
        port = addr.rsplit(":", 1)[1]
        p = Proc(
            rs_cmd(
                self.url,
                addr,
                self.tmp / f"rs-{port}",
                lease_time=self.args.lease_time,
                heartbeat_interval=self.args.heartbeat_interval,
                rpc_timeout="500ms",
                empty_server_check_interval="1h",
                allow_short_timings=True,
                # Failover under load, not the trust boundary: the simulated agents of
                # tests/bench/loadgen.py speak plaintext.
                insecure=True,
            ),
            self.tmp / "logs",
            name=f"rs-{port}-{self.starts}",
        )
        self.rs[addr] = p
        return p

    def leader(self) -> tuple[str, dict[str, Any]] | None:
        found = []
        for a in self.rs_addrs:
            if a in self.rs and self.rs[a].alive:
                m = metrics(a)
                if m and m["state"] in LEADER_STATES:
                    found.append((a, m))
        return found[0] if len(found) == 1 else None

    def full_service_leader(self, min_epoch: int) -> tuple[str, dict[str, Any]] | None:
        got = self.leader()
        if got and got[1]["state"] == "FULL_SERVICE" and got[1]["epoch"] >= min_epoch:
            return got
        return None

    def setup(self) -> None:
        for a in self.rs_addrs:
            self.spawn_rs(a)
        for a in self.rs_addrs:
            self.rs[a].wait_healthy(a, timeout_s=60)
        wait_for(lambda: self.full_service_leader(1), 60, "a leader in FULL_SERVICE")
        self.agents = Agents(
            self.servers,
            self.rs_addrs,
            self.tmp / "agents",
            self.args.heartbeat_interval,
            serve=not self.args.no_agent_servers,
        )
        self.agents.start()
        self.watch.start()
        wait_for(self.watch.all_active, 120, f"all {len(self.servers)} servers ACTIVE", 0.2)
        # The seeded servers were INACTIVE until their first heartbeat: not a finding.
        self.watch.not_active.clear()
        log(f"cluster up: 2 root services, {len(self.servers)} agents ACTIVE")

    def close(self) -> None:
        if self.watch._t.is_alive():
            self.watch.stop()
        if self.agents is not None:
            self.agents.stop()
        for p in self.rs.values():
            with contextlib.suppress(Exception):
                p.stop(10)
        self.engine.dispose()
        self.pg.stop()

    # --- one trial -----------------------------------------------------------------------------

    def trial(self, n: int, kind: str) -> dict[str, Any]:
        old, m = wait_for(lambda: self.full_service_leader(1), 60, "a leader before the trial")
        epoch = m["epoch"]
        rejected_before = m.get("writes_rejected_total", 0)
        other = next(a for a in self.rs_addrs if a != old)
        result: dict[str, Any] = {"trial": n, "kind": kind, "old_epoch": epoch}
        if kind == "delete_kill9":
            victim = next(s for s in reversed(self.servers) if s not in self.watch.deleted)
            self.watch.deleting(victim)
            resp = execute([old], f"ALTER SYSTEM DELETE SERVER '{victim}'", 30)
            if resp.error.code:
                raise RuntimeError(f"DELETE SERVER refused: {resp.error.name} {resp.error.message}")
            self.watch.deleted_now(victim)
            result["deleted"] = victim
        seen_before = len(self.watch.not_active)
        t0 = time.monotonic()
        if kind in ("kill9", "delete_kill9"):
            self.rs[old].kill()
        elif kind == "sigstop":
            self.rs[old].pause()
        elif kind == "pg_restart":
            self.pg.restart()
            # Give a renewal the time to fail (and the leader to step down) before looking.
            time.sleep(self.lease_s)
        else:
            self.pg.outage()
            time.sleep(self.lease_s + 1)
            self.pg.recover()
            t0 = time.monotonic()
        try:
            new, m_new = wait_for(
                lambda: self.full_service_leader(epoch if kind == "pg_restart" else epoch + 1),
                60,
                "FULL_SERVICE under a new epoch",
                0.02,
            )
            took = time.monotonic() - t0
            survived = kind == "pg_restart" and m_new["epoch"] == epoch
            result["take_office_s"] = 0.0 if survived else took
            result["epoch"] = m_new["epoch"]
            result["leader"] = new
            # When the new leader's take-office grace ends (its own clock, this host's).
            grace_until = m_new["take_office_grace_until_us"]
            want = len(self.servers) - len(self.watch.deleted)

            def recovered() -> bool:
                m = metrics(new)
                return bool(m and m["alive"] >= want and self.watch.all_active())

            wait_for(recovered, 120, "every server alive and ACTIVE again", 0.05)
            result["recovery_s"] = time.monotonic() - t0
            if kind == "sigstop":
                time.sleep(max(0.0, self.lease_s + 2 - (time.monotonic() - t0)))
        finally:
            if kind == "sigstop":
                self.rs[old].resume()
        # A not-ACTIVE sighting before the grace ended means a row written INACTIVE during
        # the take-over or its grace (never allowed); after it, an agent that found the new
        # leader late.
        sightings = self.watch.not_active[seen_before:]
        result["inactive_in_grace"] = sorted({s for t, s, _ in sightings if t < grace_until})
        result["inactive_after_grace"] = sorted({s for t, s, _ in sightings if t >= grace_until})
        if kind in ("kill9", "delete_kill9"):
            self.spawn_rs(old).wait_healthy(old, timeout_s=60)
        if kind == "sigstop":
            m_old = wait_for(
                lambda: (x := metrics(old)) and x["state"] == "NOT_MASTER" and x,
                30,
                "the resumed leader stepped down",
            )
            time.sleep(self.lease_s)
        if kind not in ("kill9", "delete_kill9"):
            # The old leader lives on: count the writes it attempted and had refused.
            m_old = metrics(old) or {}
            result["writes_rejected"] = m_old.get("writes_rejected_total", 0) - rejected_before
        if not kind.startswith("pg_") and result["leader"] != other:
            raise RuntimeError(f"{result['leader']} leads after the fault, expected {other}")
        states = [metrics(a) for a in self.rs_addrs]
        leaders = [s for s in states if s and s["state"] in LEADER_STATES]
        result["leaders_after"] = len(leaders)
        return result

    def run(self) -> int:
        self.setup()
        for n in range(1, self.args.trials + 1):
            kind = KINDS[(n - 1) % len(KINDS)]
            r = self.trial(n, kind)
            self.results.append(r)
            log(
                f"trial {n:>3} {kind:<12} epoch {r['old_epoch']}->{r['epoch']}  "
                f"take office {r['take_office_s']:.2f}s  all alive+ACTIVE after {r['recovery_s']:.2f}s"
                + (f"  writes rejected {r['writes_rejected']}" if "writes_rejected" in r else "")
                + (f"  deleted {r['deleted']}" if "deleted" in r else "")
                + (
                    f"  INACTIVE in/after grace {len(r['inactive_in_grace'])}/"
                    f"{len(r['inactive_after_grace'])}"
                    if r["inactive_in_grace"] or r["inactive_after_grace"]
                    else ""
                )
            )
            time.sleep(1.0)
        return self.report()

    def report(self) -> int:
        took = [
            r["take_office_s"]
            for r in self.results
            if not (r["kind"] == "pg_restart" and r["take_office_s"] == 0.0)
        ]
        rec = [r["recovery_s"] for r in self.results]
        survived = sum(
            1 for r in self.results if r["kind"] == "pg_restart" and r["take_office_s"] == 0.0
        )
        rejected = sum(r.get("writes_rejected", 0) for r in self.results)
        two_leaders = sum(1 for r in self.results if r["leaders_after"] != 1)
        in_grace = sum(len(r["inactive_in_grace"]) for r in self.results)
        after_grace = sum(len(r["inactive_after_grace"]) for r in self.results)
        w = self.watch
        lines = [
            "",
            f"chaos: {len(self.servers)} agents, 2 root services, lease_time {self.args.lease_time}, "
            f"agent heartbeat {self.args.heartbeat_interval}",
            f"  trials                       {len(self.results)} ("
            + ", ".join(f"{k} {sum(1 for r in self.results if r['kind'] == k)}" for k in KINDS)
            + ")",
            f"  take office (s)              p50 {pct(took, 0.5):.2f}  p99 {pct(took, 0.99):.2f}  max {max(took, default=0):.2f}"
            f"  ({len(took)} failovers; the leader survived {survived} PostgreSQL restarts)",
            f"  every server alive (s)       p50 {pct(rec, 0.5):.2f}  p99 {pct(rec, 0.99):.2f}  max {max(rec, default=0):.2f}",
            f"  writes rejected              {rejected} (by leaders that lived on: SIGSTOP, PostgreSQL)",
            f"  servers lost                 {len(w.lost)}",
            f"  servers resurrected          {len(w.resurrected)} (of {len(w.deleted)} deleted)",
            f"  INACTIVE during take-over/grace  {in_grace}",
            f"  INACTIVE after the grace     {after_grace} (agents that found the new leader late)",
            f"  trials ending without exactly one leader  {two_leaders}",
            f"  table polls                  {w.polls}",
        ]
        print("\n".join(lines), flush=True)
        bad = len(w.lost) + len(w.resurrected) + in_grace + two_leaders
        if self.args.out is not None:
            counts = {
                "agents": len(self.servers),
                "trials": len(self.results),
                "kinds": {k: sum(1 for r in self.results if r["kind"] == k) for k in KINDS},
                "failovers": len(took),
                "leader_survived_pg_restarts": survived,
                "deleted": len(w.deleted),
                "lost": len(w.lost),
                "resurrected": len(w.resurrected),
                "inactive_in_grace": in_grace,
                "inactive_after_grace": after_grace,
                "trials_without_one_leader": two_leaders,
                "table_polls": w.polls,
            }
            Path(self.args.out).write_text(json.dumps(counts, indent=1))
        return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns 0 when nothing was lost, resurrected or INACTIVE in a grace."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--agents", type=int, default=200)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--lease-time", default="3s")
    p.add_argument("--heartbeat-interval", default="500ms")
    p.add_argument(
        "--port-base",
        type=int,
        default=41000,
        help="agent i is 127.0.0.1:base+i; 0: free ports of tests/support/ports.py",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 6 agents, one trial of each kind, lease_time 2s, free ports",
    )
    p.add_argument("--out", type=Path, help="also write the counts of the report as JSON")
    p.add_argument(
        "--no-agent-servers",
        action="store_true",
        help="agents serve no ObserverService (a new leader's heartbeat requests then fail)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.agents, args.trials, args.lease_time, args.port_base = 6, len(KINDS), "2s", 0
    logging.basicConfig(level=logging.ERROR)
    tmp = Path(tempfile.mkdtemp(prefix="ob-chaos-"))
    chaos = None
    try:
        chaos = Chaos(args, tmp)
        return chaos.run()
    except (TimeoutError, RuntimeError, AssertionError) as e:
        log(f"FAILED: {e}")
        if chaos is not None:
            for proc in chaos.rs.values():
                log(f"--- {proc.name} ---\n{proc.log_tail(30)}")
        return 1
    finally:
        if chaos is not None:
            chaos.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
