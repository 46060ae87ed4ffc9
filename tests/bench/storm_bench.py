"""Storm benchmark (``make bench-storm``): N simulated agents over mutual
TLS against real root services, and the storms a 10,000-server cluster must ride out.

Every scenario runs its own RS (``--certs-dir``: one connection per simulated agent, each with
its own node certificate from tests/bench/bench_pki.py) on a fresh database seeded with N
servers (heartbeat_bench.seed_database), N agents from tests/bench/loadgen.py (raw HTTP/2
client; reconnects back off with full jitter, base 100 ms, cap 2 s, reset on success - the
policy of obcommon/backoff.py), and a thread polling ``__all_server`` every 100 ms
(:class:`DbWatch`; a read-only SQLite connection, or PostgreSQL). Scenarios (``--scenarios``):

1. ``reconnect``: steady state, then kill -9 of the RS and, after ``--down`` seconds (5),
   the same RS again on the same port and database; once half of the agents are back,
   ``--kill`` of them die (streams cancelled, no reconnect). Figures: restart ->
   FULL_SERVICE, restart -> every live agent back (its first accepted lease; goal 2
   lease_time), servers shown not ACTIVE in ``__all_server`` and ``lease_expire`` events
   after the restart other than the killed ones (goal 0), every agent back -> the killed all
   shown INACTIVE (goal lease_time + 2 s), the lease streams the RS saw on resumed / full
   TLS handshakes, the new RS's peak RSS (psutil every 100 ms), and the agents' reconnect
   spread: per agent, restart -> its first accepted lease (p50/p99/max).
2. ``mass-expiry``: 30 % of the agents stop at once, silently (``pause K silent``: no more
   requests, streams and TCP connections left open - what a power loss looks like to the RS
   until TCP keepalive notices; the simulated agents' process still answers HTTP/2 PINGs).
   Figures: their lease end (latest accepted send + lease_time) -> the RS counting all of
   them (GetMetrics ``lease_expired``) and -> ``__all_server`` showing all of them not
   ACTIVE (goal: lease_time + 1 s after the lease end, i.e. within 1 s), the survivors'
   heartbeat p99 over the window, survivors expired (goal 0).
3. ``overload``: (a) a CPU hog (a separate process busy 50 ms of every 100 ms) for
   ``--duration`` seconds with the N agents; (b) the RS's capacity C measured with the same
   agents asking back to back (period 0, ``--capacity-s`` seconds), then the period set so
   that the N agents offer 1.5 C for ``--duration`` seconds. After each, K = min(100, N/10)
   agents stop (cancelled streams) and their detection is timed (lease end -> GetMetrics).
   False expiries per phase: servers with a ``lease_expire`` event in
   ``__all_rootservice_event_history`` whose agent the bench did not stop (goal 0).
4. ``failover``: two RS on a private PostgreSQL (tests/support/pgserver.py), agents that
   know both addresses (``--targets``: a refusal's ``leader_hint`` is followed, else the
   next address, as observer_agent/rs_list.py), kill -9 of the leader. Figures: kill -> the
   standby answering as leader (GetMetrics state past standby) and in FULL_SERVICE, kill ->
   all N alive on it, servers not ACTIVE meanwhile + ``lease_expire`` events (goal 0), the
   agents' reconnect spread from the kill.

Prints one table (scenario, figure, value, goal, met?) and writes every figure to ``--out``
(.bench/storm.json). Nothing is asserted: this is a benchmark. Every process and temp dir is
removed on exit, also on Ctrl-C / SIGTERM.

Usage::

    .venv/bin/python -m tests.bench.storm_bench                       # N = 10,000
    .venv/bin/python -m tests.bench.storm_bench --quick               # N = 200, short phases
    .venv/bin/python -m tests.bench.storm_bench --agents 500 --scenarios reconnect --down 80
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import psutil
import sqlalchemy as sa
from tabulate import tabulate

from obcommon.durations import parse_duration
from tests.bench import heartbeat_bench as hb
from tests.bench.bench_pki import BenchPki
from tests.support.pgserver import PgServer
from tests.support.ports import free_port

SCENARIOS = ("reconnect", "mass-expiry", "overload", "failover")
#: GetMetrics states of an RS that holds office (tests/chaos/chaos.py).
LEADER_STATES = ("WAIT_BOOTSTRAP", "BOOTSTRAPPING", "IN_SERVICE", "FULL_SERVICE")
WATCH_S = 0.1  # __all_server and RSS polling interval
METRICS_POLL_S = 0.05
log = hb.log
#: The bench's own GetMetrics channel retries a dead RS every 100-200 ms: gRPC's default
#: reconnect backoff (1 s growing to 120 s) would date an RS restart tens of seconds late.
WATCH_CHANNEL = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 200),
]


def pcts(xs: list[float]) -> dict[str, float | None]:
    """p50 / p99 / max of ``xs`` (nearest rank), None when empty."""
    s = sorted(xs)
    if not s:
        return {"p50": None, "p99": None, "max": None}

    def at(p: float) -> float:
        return s[min(len(s) - 1, max(0, int(round(p * len(s) + 0.5)) - 1))]

    return {"p50": at(0.5), "p99": at(0.99), "max": s[-1]}


# --- watchers ------------------------------------------------------------------------------------


class DbWatch:
    """Polls ``__all_server`` every 100 ms in a thread (bounded to an hour): per poll, the
    wall-clock time and how many servers are not ACTIVE; per server port, the first time it
    was seen not ACTIVE since :meth:`reset`. Reads ``lease_expire`` events on demand."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url, pool_pre_ping=True)
        self.samples: list[tuple[float, int]] = []
        self.first_inactive: dict[int, float] = {}
        # Per port, the first time seen not ACTIVE after :meth:`mark` (empty before a mark).
        self.inactive_since_mark: dict[int, float] = {}
        self.marked = False
        self.failures = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name="dbwatch", daemon=True)

    def _run(self) -> None:
        q = sa.text("SELECT svr_port FROM __all_server WHERE status <> 'ACTIVE'")
        for _ in range(36_000):
            if self._stop.wait(WATCH_S):
                return
            try:
                with self.engine.connect() as conn:
                    ports = [r[0] for r in conn.execute(q)]
            except sa.exc.SQLAlchemyError:
                self.failures += 1  # the database restarting, a locked SQLite
                continue
            now = time.time()  # after the read: what it saw was committed before now
            with self._lock:
                self.samples.append((now, len(ports)))
                for p in ports:
                    self.first_inactive.setdefault(p, now)
                    if self.marked:
                        self.inactive_since_mark.setdefault(p, now)

    def start(self) -> DbWatch:
        self._t.start()
        return self

    def reset(self) -> None:
        with self._lock:
            self.samples.clear()
            self.first_inactive.clear()

    def mark(self) -> None:
        """Start recording, per port, when it is first seen not ACTIVE from now on."""
        with self._lock:
            self.inactive_since_mark.clear()
            self.marked = True

    def not_active_now(self) -> int:
        with self._lock:
            return self.samples[-1][1] if self.samples else -1

    def max_not_active(self, since: float, until: float = float("inf")) -> int:
        with self._lock:
            return max((c for t, c in self.samples if since <= t <= until), default=0)

    def first_all_active(self, since: float) -> float | None:
        with self._lock:
            return next((t for t, c in self.samples if t >= since and c == 0), None)

    def expired_since(self, since: float) -> dict[int, int]:
        """Port -> time (us) of each ``lease_expire`` event at or after ``since`` (wall s)."""
        q = sa.text(
            "SELECT value1, event_time FROM __all_rootservice_event_history "
            "WHERE event = 'lease_expire' AND event_time >= :t"
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q, {"t": int(since * 1e6)}).all()
        return {int(str(v).rsplit(":", 1)[1]): int(t) for v, t in rows}

    def stop(self) -> None:
        self._stop.set()
        if self._t.is_alive():
            self._t.join(10)
        self.engine.dispose()


class PeakRss:
    """The peak RSS (MiB) of process ``pid``, polled every 100 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.peak_mib = 0.0
        self._ps = psutil.Process(pid)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name="rss", daemon=True)
        self._t.start()

    def _run(self) -> None:
        for _ in range(36_000):
            try:
                self.peak_mib = max(self.peak_mib, self._ps.memory_info().rss / (1 << 20))
            except psutil.Error:
                return
            if self._stop.wait(WATCH_S):
                return

    def stop(self) -> float:
        self._stop.set()
        self._t.join(5)
        return self.peak_mib


HOG_CODE = (
    "import time\n"
    "for _ in range(36000):\n"
    "    t = time.monotonic()\n"
    "    while time.monotonic() - t < 0.05: pass\n"
    "    time.sleep(0.05)\n"
)


# --- one cluster ---------------------------------------------------------------------------------


class Rig:
    """The processes of one scenario: RS(es), load generators, a DbWatch, a temp dir."""

    def __init__(self, name: str, n: int, args: argparse.Namespace, pki: BenchPki) -> None:
        self.n = n
        self.args = args
        self.pki = pki
        self.tmp = Path(tempfile.mkdtemp(prefix=f"storm-{name}-"))
        self.children = hb.Children()
        self.clients: dict[str, hb.RsClient] = {}
        self.argv: dict[str, list[str]] = {}
        self.rs: dict[str, hb.Child] = {}
        self.gens: list[hb.Child] = []
        self.watch: DbWatch | None = None
        self.pg: PgServer | None = None
        self.starts = 0

    def database(self, pg: bool) -> tuple[str, str]:
        """Seed the database: (RS URL, watch URL) - SQLite in the temp dir (watched
        read-only), or a private PostgreSQL."""
        if pg:
            self.pg = PgServer()
            self.pg.create_database("storm")
            url = self.pg.url("storm")
            watch_url = url
        else:
            path = self.tmp / "rootservice.db"
            url = f"sqlite:///{path}"
            watch_url = f"sqlite:///file:{path}?mode=ro&uri=true"
        t0 = time.monotonic()
        hb.seed_database(url, self.n)
        log(f"seeded {self.n} servers in {time.monotonic() - t0:.1f}s")
        return url, watch_url

    def add_rs(self, url: str) -> str:
        addr = f"127.0.0.1:{free_port()}"
        certs = self.pki.server_dir(self.tmp / f"certs-{addr.rsplit(':', 1)[1]}", addr)
        self.argv[addr] = hb.rs_argv(
            url,
            addr,
            self.tmp / f"data-{len(self.argv)}",
            self.args.lease_time,
            f"127.0.0.1:{free_port()}",
            certs,
        )
        self.clients[addr] = hb.RsClient(addr, certs, WATCH_CHANNEL)
        return addr

    def start_rs(self, addr: str) -> hb.Child:
        self.starts += 1
        rs = self.children.start(
            f"rs{self.starts}", self.argv[addr], self.tmp / f"rs{self.starts}.log", False
        )
        self.rs[addr] = rs
        return rs

    def metrics(self, addr: str, timeout: float = 1.0) -> dict[str, Any] | None:
        try:
            return self.clients[addr].metrics(timeout=timeout)
        except grpc.RpcError:
            return None

    def start_agents(self, targets: list[str]) -> dict[str, Any]:
        """The load generators; wait for every agent's first answer, the RS's take-office
        heartbeat requests and every server ACTIVE in ``__all_server`` (bounded)."""
        leader = next(a for a in targets if self.rs.get(a) is not None)
        self.gens = hb.start_loadgens(
            self.children,
            targets[0],
            self.n,
            self.args,
            self.tmp,
            "storm",
            self.pki.nodes_dir,
            targets if len(targets) > 1 else None,
        )
        ready = hb.connect_phase(self.rs[leader], self.gens, self.n, self.args)
        hb.wait_take_office_requests(self.rs[leader], self.n)
        assert self.watch is not None
        deadline = time.monotonic() + 60 + self.n / 100
        while self.watch.not_active_now() != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        log(f"{self.watch.not_active_now()} servers not ACTIVE; steady for {self.args.warmup}s")
        self.watch.reset()  # the seeded servers were INACTIVE until their first lease
        time.sleep(self.args.warmup)
        return ready

    def send_all(self, line: str) -> None:
        for g in self.gens:
            g.send(line)

    def recovery(self, since: float, answering: float | None = None) -> dict[str, Any]:
        """Per-agent seconds from ``since`` (wall) to its first accepted lease after ``mark``
        (``spread_s``), and from ``answering`` (the RS's first answer) when given."""
        self.send_all("recovery")
        got = [g.expect("recovery", 60) for g in self.gens]
        at = [t for r in got for t in r["recovered_at"]]
        spread = [t - since for t in at if t]
        return {
            "agents": len(at),
            "not_recovered": sum(1 for t in at if not t),
            "recovered_at_max": max(at, default=0.0),
            "spread_s": pcts(spread),
            "from_first_answer_s": pcts([t - answering for t in at if t]) if answering else None,
            "moves": sum(r["moves"] for r in got),
            "connect_failures": sum(r["connect_failures"] for r in got),
            "tls_resumed": sum(r.get("tls_resumed", 0) for r in got),
            "tls_full": sum(r.get("tls_full", 0) for r in got),
        }

    def close(self) -> None:
        for g in self.gens:
            with contextlib.suppress(Exception):
                g.send("quit")
        self.children.close()
        for c in self.clients.values():
            c.close()
        if self.watch is not None:
            self.watch.stop()
        if self.pg is not None:
            self.pg.stop()
        if self.args.keep_logs:
            dest = Path(self.args.keep_logs) / self.tmp.name
            dest.mkdir(parents=True, exist_ok=True)
            for f in self.tmp.glob("*.log"):
                shutil.copyfile(f, dest / f.name)
        shutil.rmtree(self.tmp, ignore_errors=True)


def single_rs(rig: Rig) -> str:
    """One RS on SQLite in FULL_SERVICE with N agents in steady state; returns its address."""
    url, watch_url = rig.database(pg=False)
    addr = rig.add_rs(url)
    rs = rig.start_rs(addr)
    rig.clients[addr].wait_serving(rs, 30)
    rig.clients[addr].wait_state(rs, "FULL_SERVICE", 120)
    rig.watch = DbWatch(watch_url).start()
    rig.start_agents([addr])
    return addr


def wait_until(pred: Any, timeout_s: float, interval_s: float = METRICS_POLL_S) -> float | None:
    """Poll ``pred()`` until true (bounded): the wall time it first held, or None."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / interval_s) + 10):
        if pred():
            return time.time()
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)
    return None


def false_expiries(watch: DbWatch, since: float, stopped: set[int]) -> list[int]:
    """Ports with a ``lease_expire`` event since ``since`` whose agent the bench did not stop."""
    return sorted(p for p in watch.expired_since(since) if p - hb.PORT_BASE not in stopped)


def ms(a: float | None, b: float | None) -> float | None:
    return (a - b) * 1000 if a is not None and b is not None else None


# --- scenarios -----------------------------------------------------------------------------------


def progress(rig: Rig) -> tuple[int, int]:
    """(agents back since ``mark``, live agents) over every load generator."""
    rig.send_all("progress")
    got = [g.expect("progress", 30) for g in rig.gens]
    return sum(r["recovered"] for r in got), sum(r["live"] for r in got)


def reconnect(rig: Rig) -> dict[str, Any]:
    """kill -9 the RS under N agents, restart it after ``--down`` s on the same port/DB;
    ``--kill`` agents die (streams cancelled) once half of the agents are back."""
    n, args = rig.n, rig.args
    lease_s = parse_duration(args.lease_time) / 1e6
    addr = single_rs(rig)
    assert rig.watch is not None
    t_kill = time.time()
    rig.rs[addr].proc.kill()
    rig.rs[addr].proc.wait(10)
    rig.send_all("mark")  # after the kill: no lease of the old process counts
    log(f"reconnect: RS killed; restarting it in {args.down:g}s")
    time.sleep(args.down)
    t_restart = time.time()
    rs = rig.start_rs(addr)
    rss = PeakRss(rs.proc.pid)
    full: list[float] = []
    serving: list[float] = []
    killed: list[dict[str, Any]] = []
    t_killed: list[float] = []

    def all_back() -> bool:
        if rs.proc.poll() is not None:
            raise RuntimeError(f"the restarted RS exited:\n{rs.tail()}")
        m = rig.metrics(addr, timeout=0.5)
        if m and not serving:
            serving.append(time.time())
        if m and m.get("state") == "FULL_SERVICE" and not full:
            full.append(time.time())
        back, live = progress(rig)
        if args.kill and not killed and back >= live // 2:
            # Agents that die during the storm: some had come back, some had not.
            per = [
                args.kill // len(rig.gens) + (i < args.kill % len(rig.gens))
                for i in range(len(rig.gens))
            ]
            rig.watch.mark()  # type: ignore[union-attr]
            t_killed.append(time.time())
            for g, k in zip(rig.gens, per, strict=True):
                g.send(f"pause {k}")
            killed.extend(g.expect("paused", args.period * 2 + 10) for g in rig.gens)
            log(f"reconnect: {args.kill} agents killed with {back} of {live} back")
            return False
        return back >= live

    wait_until(all_back, 120 + n / 50, 0.2)
    rec = rig.recovery(t_restart, serving[0] if serving else None)
    t_end = max(rec.pop("recovered_at_max"), t_restart)
    ports = {hb.PORT_BASE + i for p in killed for i in p["indexes"]}
    first = rig.watch.first_inactive
    since_kill = rig.watch.inactive_since_mark

    def killed_shown() -> bool:
        return all(p in since_kill for p in ports)

    wait_until(killed_shown, max(0.0, t_end + 3 * lease_s - time.time()) + 10, WATCH_S)
    # A late expiry would show right after the grace: keep watching a little longer.
    time.sleep(2.0)
    expired = rig.watch.expired_since(t_restart)
    m = rig.metrics(addr, timeout=5.0) or {}
    seen = [since_kill.get(p) for p in ports]
    t_db = max(x for x in seen if x) if seen and all(seen) else None
    return {
        "agents": n,
        "down_s": args.down,
        "lease_time_s": lease_s,
        "killed_to_restart_s": t_restart - t_kill,
        # Process start, imports, database open: until GetMetrics first answers.
        "restart_to_first_answer_ms": ms(serving[0] if serving else None, t_restart),
        "restart_to_full_service_ms": ms(full[0] if full else None, t_restart),
        "restart_to_all_back_ms": ms(t_end, t_restart) if rec["not_recovered"] == 0 else None,
        "shown_inactive_not_killed": len(
            [p for p, t in first.items() if t >= t_restart and p not in ports]
        ),
        "lease_expire_events_not_killed": len([p for p in expired if p not in ports]),
        "killed": len(ports),
        "killed_back_before": sum(p["recovered"] for p in killed),
        "restart_to_kill_ms": ms(t_killed[0] if t_killed else None, t_restart),
        "killed_shown_inactive": sum(1 for x in seen if x),
        "all_back_to_killed_shown_inactive_ms": ms(t_db, t_end)
        if rec["not_recovered"] == 0
        else None,
        "rs_lease_streams_resumed": m.get("lease_streams_resumed_total", 0),
        "rs_lease_streams_full_tls": m.get("lease_streams_full_tls_total", 0),
        "rs_peak_rss_mib": rss.stop(),
        "reconnect": rec,
    }


def mass_expiry(rig: Rig) -> dict[str, Any]:
    """30 % of the agents go silent at once; time the RS and ``__all_server``."""
    n, args = rig.n, rig.args
    addr = single_rs(rig)
    assert rig.watch is not None
    k = max(1, int(n * 0.3))
    t0 = time.time()
    rig.send_all("start")
    ex = hb.expiry(rig.clients[addr], rig.gens, n, args, k=k, silent=True, slack_s=30 + n / 500)
    stopped = set(ex["indexes"])
    ports = [hb.PORT_BASE + i for i in stopped]
    lease_end = ex["lease_end"]

    def db_all() -> bool:
        return all(p in rig.watch.first_inactive for p in ports)  # type: ignore[union-attr]

    wait_until(db_all, max(0.0, lease_end - time.time()) + 30 + n / 500, WATCH_S)
    rig.send_all("stop")
    windows = [g.expect("window", 60) for g in rig.gens]
    lat = sorted(x for w in windows for x in w["latency_us"])
    seen = [rig.watch.first_inactive.get(p) for p in ports]
    t_db = max(seen) if seen and all(seen) else None  # type: ignore[type-var]
    return {
        "agents": n,
        "stopped": k,
        "how": "silent: no more requests, streams and TCP connections left open",
        "lease_time_s": parse_duration(args.lease_time) / 1e6,
        "rs_detected": ex["detected"],
        "lease_end_to_rs_detected_all_ms": ex["all_detected_after_expiry_ms"],
        "lease_end_to_first_detected_ms": ex["first_detected_after_expiry_ms"],
        "lease_end_to_db_all_inactive_ms": ms(t_db, lease_end),
        "db_inactive_seen": sum(1 for x in seen if x),
        "rs_expire_detect_lag_us": ex["rs_expire_detect_lag_us"],
        "survivors_p99_ms": hb.pct(lat, 0.99) / 1000,
        "survivors_max_ms": (lat[-1] if lat else 0) / 1000,
        "survivor_timeouts": sum(w["timeouts"] for w in windows),
        "survivors_expired": len(false_expiries(rig.watch, t0, stopped)),
    }


def overload(rig: Rig) -> dict[str, Any]:
    """(a) a CPU hog, (b) 1.5x the RS's capacity; false expiries and detection of K stopped."""
    n, args = rig.n, rig.args
    addr = single_rs(rig)
    assert rig.watch is not None
    client = rig.clients[addr]
    stopped: set[int] = set()
    out: dict[str, Any] = {"agents": n}

    def window(seconds: float) -> dict[str, Any]:
        rig.send_all("start")
        time.sleep(seconds)
        rig.send_all("stop")
        ws = [g.expect("window", 60) for g in rig.gens]
        lat = sorted(x for w in ws for x in w["latency_us"])
        return {
            "hb_per_s": sum(w["responses"] / w["seconds"] for w in ws),
            "p99_ms": hb.pct(lat, 0.99) / 1000,
            "timeouts": sum(w["timeouts"] for w in ws),
            "errors": sum(sum(w["errors"].values()) for w in ws),
        }

    def detect() -> dict[str, Any]:
        ex = hb.expiry(client, rig.gens, n, args, k=min(100, max(1, n // 10)))
        stopped.update(ex["indexes"])
        # Also from __all_server: an overloaded RS's GetMetrics (on the heartbeats' gRPC
        # server) times out, as at 10,000 agents; the table is what dashboards read.
        ports = [hb.PORT_BASE + i for i in ex["indexes"]]
        first = rig.watch.first_inactive  # type: ignore[union-attr]
        wait_until(
            lambda: all(p in first for p in ports),
            max(0.0, ex["lease_end"] - time.time()) + 30,
            WATCH_S,
        )
        seen = [first.get(p) for p in ports]
        t_db = max(x for x in seen if x) if seen and all(seen) else None
        return {
            "stopped": ex["batch"],
            "detected": ex["detected"],
            "lease_end_to_detected_all_ms": ex["all_detected_after_expiry_ms"],
            "lease_end_to_db_all_inactive_ms": ms(t_db, ex["lease_end"]),
            "db_inactive_seen": sum(1 for x in seen if x),
            "getmetrics_failed_polls": ex.get("failed_polls", 0),
        }

    # (a) the CPU hog
    t0 = time.time()
    hog = rig.children.start("hog", [sys.executable, "-c", HOG_CODE], rig.tmp / "hog.log", False)
    log(f"overload (a): CPU hog for {args.duration:g}s")
    a = window(args.duration)
    a |= detect()
    hog.stop()
    a["false_expiries"] = false_expiries(rig.watch, t0, stopped)
    out["cpu_hog"] = a
    # (b) 1.5x capacity
    t1 = time.time()
    rig.send_all("period 0")
    log(f"overload (b): capacity, agents back to back for {args.capacity_s:g}s")
    cap = window(args.capacity_s)
    c = cap["hb_per_s"]
    period = n / (1.5 * c) if c > 0 else args.period
    rig.send_all(f"period {period:.6f}")
    log(
        f"overload (b): capacity {c:,.0f} hb/s; period {period:.4f}s offers 1.5x for {args.duration:g}s"
    )
    b = window(args.duration)
    b |= detect()
    b["capacity_hb_per_s"] = c
    b["capacity_p99_ms"] = cap["p99_ms"]
    b["period_s"] = period
    b["offered_hb_per_s"] = n / period
    b["false_expiries"] = false_expiries(rig.watch, t1, stopped)
    out["over_capacity"] = b
    return out


def failover(rig: Rig) -> dict[str, Any]:
    """Two RS on PostgreSQL, agents knowing both; kill -9 the leader."""
    n = rig.n
    url, watch_url = rig.database(pg=True)
    addrs = [rig.add_rs(url), rig.add_rs(url)]
    for a in addrs:
        rig.start_rs(a)
    for a in addrs:
        rig.clients[a].wait_serving(rig.rs[a], 60)
    found: list[str] = []

    def one_leader() -> bool:
        ms_ = {a: rig.metrics(a) for a in addrs}
        found[:] = [a for a, m in ms_.items() if m and m.get("state") == "FULL_SERVICE"]
        return len(found) == 1

    if wait_until(one_leader, 120, 0.2) is None:
        raise RuntimeError("no single leader in FULL_SERVICE within 120s")
    leader = found[0]
    standby = next(a for a in addrs if a != leader)
    epoch = (rig.metrics(leader) or {}).get("epoch", 0)
    rig.watch = DbWatch(watch_url).start()
    rig.start_agents([leader, standby])
    t_kill = time.time()
    rig.rs[leader].proc.kill()
    rig.rs[leader].proc.wait(10)
    rig.send_all("mark")  # after the kill: no lease of the old leader counts
    log("failover: leader killed")
    office: list[float] = []
    full: list[float] = []

    def all_alive() -> bool:
        m = rig.metrics(standby)
        if not m or m.get("epoch", 0) <= epoch:
            return False
        if m.get("state") in LEADER_STATES and not office:
            office.append(time.time())
        if m.get("state") == "FULL_SERVICE" and not full:
            full.append(time.time())
        return m.get("alive", 0) >= n

    t_alive = wait_until(all_alive, 180 + n / 50)
    time.sleep(2.0)
    expired = rig.watch.expired_since(t_kill)
    return {
        "agents": n,
        "kill_to_standby_leader_ms": ms(office[0] if office else None, t_kill),
        "kill_to_full_service_ms": ms(full[0] if full else None, t_kill),
        "kill_to_all_alive_ms": ms(t_alive, t_kill),
        "max_not_active_after_kill": rig.watch.max_not_active(t_kill),
        "lease_expire_events_after_kill": len(expired),
        "reconnect": rig.recovery(t_kill),
    }


RUNNERS = {
    "reconnect": reconnect,
    "mass-expiry": mass_expiry,
    "overload": overload,
    "failover": failover,
}


# --- report --------------------------------------------------------------------------------------


def table_rows(results: dict[str, Any], lease_s: float) -> list[list[str]]:
    """(scenario, figure, value, goal, met?) rows; '-' where there is no goal or no value."""
    rows: list[list[str]] = []

    def row(sc: str, fig: str, v: Any, goal: str = "-", met: bool | None = None) -> None:
        if isinstance(v, float):
            v = f"{v:,.1f}"
        elif isinstance(v, int):
            v = f"{v:,}"
        elif v is None:
            v, met = "-", None if met is None else False
        rows.append([sc, fig, str(v), goal, "-" if met is None else ("yes" if met else "NO")])

    def spread(sc: str, r: dict[str, Any], since: str) -> None:
        for label, s in ((since, r["spread_s"]), ("RS's first answer", r["from_first_answer_s"])):
            if s:
                v = "/".join("-" if s[k] is None else f"{s[k]:.2f}" for k in ("p50", "p99", "max"))
                row(sc, f"agents' reconnect from {label} s p50/p99/max", v)
        row(sc, "agents not recovered", r["not_recovered"], "0", r["not_recovered"] == 0)

    r = results.get("reconnect")
    if r and "error" not in r:
        sc = f"reconnect N={r['agents']:,} down {r['down_s']:g}s"
        lease = r["lease_time_s"]
        row(sc, "restart -> RS answers GetMetrics ms", r["restart_to_first_answer_ms"])
        row(sc, "restart -> FULL_SERVICE ms", r["restart_to_full_service_ms"])
        v = r["restart_to_all_back_ms"]
        goal = 2 * lease * 1000
        row(sc, "restart -> every agent back ms", v, f"<= {goal:,.0f}", v is not None and v <= goal)
        m = r["shown_inactive_not_killed"]
        row(sc, "servers shown not ACTIVE (not killed)", m, "0", m == 0)
        e = r["lease_expire_events_not_killed"]
        row(sc, "lease_expire events (not killed)", e, "0", e == 0)
        if r["killed"]:
            row(
                sc,
                "killed during the storm (back before) / shown INACTIVE",
                f"{r['killed']} ({r['killed_back_before']}) / {r['killed_shown_inactive']}",
                "-",
                r["killed_shown_inactive"] == r["killed"],
            )
            v = r["all_back_to_killed_shown_inactive_ms"]
            goal = (lease + 2) * 1000
            row(
                sc,
                "every agent back -> killed all shown INACTIVE ms",
                v,
                f"<= {goal:,.0f}",
                v is not None and v <= goal,
            )
        row(
            sc,
            "RS lease streams TLS resumed / full",
            f"{r['rs_lease_streams_resumed']:,} / {r['rs_lease_streams_full_tls']:,}",
        )
        x = r["reconnect"]
        row(
            sc, "agents' TLS handshakes resumed / full", f"{x['tls_resumed']:,} / {x['tls_full']:,}"
        )
        row(sc, "RS peak RSS MiB", r["rs_peak_rss_mib"])
        spread(sc, r["reconnect"], "restart")
    r = results.get("mass-expiry")
    if r and "error" not in r:
        sc = f"mass-expiry {r['stopped']:,} of {r['agents']:,}"
        for fig, key in (
            ("lease end -> RS detected all ms", "lease_end_to_rs_detected_all_ms"),
            ("lease end -> __all_server all INACTIVE ms", "lease_end_to_db_all_inactive_ms"),
        ):
            v = r[key]
            row(sc, fig, v, "<= 1,000", v is not None and v <= 1000)
        row(sc, "survivors' heartbeat p99 ms", r["survivors_p99_ms"])
        row(sc, "survivors expired", r["survivors_expired"], "0", r["survivors_expired"] == 0)
    r = results.get("overload")
    if r and "error" not in r:
        for key, label in (("cpu_hog", "CPU hog 0.5 core"), ("over_capacity", "1.5x capacity")):
            x = r[key]
            sc = f"overload {label} N={r['agents']:,}"
            if key == "over_capacity":
                row(sc, "capacity C hb/s", x["capacity_hb_per_s"])
                row(
                    sc,
                    "offered / answered hb/s",
                    f"{x['offered_hb_per_s']:,.0f} / {x['hb_per_s']:,.0f}",
                )
            else:
                row(sc, "answered hb/s", x["hb_per_s"])
            row(sc, "heartbeat p99 ms", x["p99_ms"])
            fe = len(x["false_expiries"])
            row(sc, "false expiries", fe, "0", fe == 0)
            for fig, k in (
                ("lease end -> RS detected (GetMetrics) ms", "lease_end_to_detected_all_ms"),
                ("lease end -> __all_server all INACTIVE ms", "lease_end_to_db_all_inactive_ms"),
            ):
                v = x.get(k)
                row(
                    sc,
                    f"{x['stopped']} stopped: {fig}",
                    v,
                    "<= 1,000",
                    v is not None and v <= 1000,
                )
    r = results.get("failover")
    if r and "error" not in r:
        sc = f"failover N={r['agents']:,}"
        row(sc, "kill -> standby answers as leader ms", r["kill_to_standby_leader_ms"])
        row(sc, "kill -> FULL_SERVICE ms", r["kill_to_full_service_ms"])
        row(sc, "kill -> all alive on new leader ms", r["kill_to_all_alive_ms"])
        m = r["max_not_active_after_kill"]
        row(sc, "max not ACTIVE after kill", m, "0", m == 0)
        e = r["lease_expire_events_after_kill"]
        row(sc, "lease_expire events after kill", e, "0", e == 0)
        spread(sc, r["reconnect"], "kill")
    for name, r in results.items():
        if "error" in r:
            rows.append([name, "FAILED", r["error"][:80], "-", "-"])
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios; 0, or 1 when a scenario failed to run, 130 on Ctrl-C."""
    p = argparse.ArgumentParser(description="storm benchmark of the RootService")
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--down", type=float, default=5.0, help="reconnect: seconds the RS is down")
    p.add_argument(
        "--kill",
        type=int,
        default=None,
        help="reconnect: agents killed once half are back (default min(10, max(2, N/1000)))",
    )
    p.add_argument("--duration", type=float, default=20.0, help="overload: seconds per phase")
    p.add_argument("--capacity-s", type=float, default=5.0, help="overload: capacity window")
    p.add_argument("--warmup", type=float, default=5.0, help="steady seconds before a storm")
    p.add_argument("--period", type=float, default=2.0, help="heartbeat period (s)")
    p.add_argument("--lease-time", default="10s")
    p.add_argument("--procs", type=int, default=2, help="load generator processes")
    p.add_argument("--connect-spread", type=float, default=None)
    p.add_argument("--keep-logs", default="", help="copy the processes' logs to this dir")
    p.add_argument("--quick", action="store_true", help="N=200, 5 s phases, 2 s warm-up")
    p.add_argument("--out", default=str(hb.ROOT / ".bench" / "storm.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.agents, args.duration, args.warmup, args.capacity_s = 200, 5.0, 2.0, 3.0
    if args.kill is None:
        args.kill = min(10, max(2, args.agents // 1000))
    # What heartbeat_bench's helpers read.
    args.streams_per_channel, args.client = 1, "raw"
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not scenarios or set(scenarios) - set(SCENARIOS):
        p.error(f"--scenarios takes a comma-separated subset of {','.join(SCENARIOS)}")
    if not 1 <= args.agents <= 65535 - hb.PORT_BASE:
        p.error(f"--agents must be 1..{65535 - hb.PORT_BASE}")
    lease_s = parse_duration(args.lease_time) / 1e6

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    results: dict[str, Any] = {}
    status = 0
    pki_tmp = Path(tempfile.mkdtemp(prefix="storm-pki-"))
    rig: Rig | None = None
    try:
        pki = BenchPki.create(pki_tmp)
        secs = pki.add_nodes(range(hb.PORT_BASE, hb.PORT_BASE + args.agents))
        log(f"wrote a CA and {args.agents:,} node certificates in {secs:.1f}s")
        for sc in scenarios:
            log(f"=== {sc}, N={args.agents:,}")
            rig = Rig(sc, args.agents, args, pki)
            try:
                results[sc] = RUNNERS[sc](rig)
            except (RuntimeError, OSError, grpc.RpcError, sa.exc.SQLAlchemyError) as e:
                detail = e.details() if isinstance(e, grpc.RpcError) else e  # type: ignore[attr-defined]
                log(f"{sc} failed: {type(e).__name__}: {detail}")
                results[sc] = {"error": f"{type(e).__name__}: {detail}"[:2000]}
                status = 1
            finally:
                rig.close()
                rig = None
    except KeyboardInterrupt:
        log("interrupted: processes stopped, temp dirs removed")
        status = 130
    finally:
        if rig is not None:
            rig.close()
        shutil.rmtree(pki_tmp, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    rows = table_rows(results, lease_s)
    if rows:
        print(
            tabulate(
                rows, headers=["scenario", "figure", "value", "goal", "met?"], disable_numparse=True
            )
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": psutil.cpu_count(), "python": sys.version.split()[0]},
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "pid": os.getpid(),
        "load_average": os.getloadavg(),
        "backoff": "loadgen.backoff_delay: exponential, full jitter, base 100 ms, cap 2 s",
        "results": results,
        "table": rows,
    }
    out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    log(f"results written to {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
