"""Heartbeat benchmark (``make bench``): N simulated agents against a real RS on loopback.

Each N is run in up to four configurations (``--servers``, all by default,
"Benchmark"): ``rs-tls`` (the RS over mutual TLS, ``--certs-dir``: every agent has its own
connection and its own node certificate, as the RS accepts a lease for server X only from
node certificate X), ``rs`` (the RS in plaintext, ``--insecure``), ``echo`` (the bare echo
server, plaintext) and ``echo-tls`` (the echo server over the same mutual TLS). The
certificates - one CA, one node certificate per agent, an ``rs.crt`` and a
``client.root.crt`` per server - are written once per run into its temp dir by
tests/bench/bench_pki.py (obcommon.security.certs). By default every configuration uses one
connection per agent (``--streams-per-channel 1``, what real agents do), so that the
TLS / plaintext ratios compare the same traffic; the connections are opened at random
offsets over ``--connect-spread`` seconds (default max(period, N / 250)).

For each N and configuration, it

1. seeds a SQLite database in a temp dir with 3 zones and N servers (127.0.0.1:20000+i) as a
   restarted RS finds them (whitelisted, never alive until they heartbeat), plus the
   cluster_id / max_used_server_id / bootstrap_time parameters;
2. starts the real RS (``python -m rootservice.cli serve``) and waits for FULL_SERVICE;
3. starts ``--procs`` load generators (tests/bench/loadgen.py), each simulating N/procs
   agents with one ``LeaseStream`` per agent, jittered start, one request per ``--period``,
   and waits until every agent had an answer and the RS's take-office heartbeat requests
   (to N addresses where nobody listens) are over;
4. after ``--warmup`` seconds, measures ``--duration`` seconds: heartbeats/s, latency
   p50/p99/max (send -> matching response), errors and timeouts, the CPU (cores) and RSS of
   the RS, the CPU of the load generators and of the whole machine, and the episodes of
   responses slower than 50 ms dated from FULL_SERVICE (the RS's periodic tasks run every
   10 s - empty-server checker - and 30 s - CheckAllServerTask - from then);
5. reads the RS's ``GetMetrics``: checker tick p50/p99 (over the RS's last 4,096 ticks,
   which in these runs is every tick since the take-office grace ended) and max (over its
   life), hb_handle_us, alive count (should be N);
6. stops heartbeating on a batch of K = min(100, N/10) agents and polls ``GetMetrics``
   every 20 ms until the RS counts K more lease_expired servers: reports the time from the
   batch's last accepted request (send time) + lease_time to that moment, and the RS's own
   ``expire_detect_lag_us`` (now - (last_hb_time + lease_time) at detection);
7. (right after step 4, before step 6) unless ``--scrape-interval 0``: ``--scrape-rounds``
   (2) more windows with the same RS and load while a thread scrapes the RS's ``/metrics``
   (``--http-addr``; HTTPS with ``client.root.crt`` for ``rs-tls``) every
   ``--scrape-interval`` seconds (5), alternating with plain windows (P S P S), and reports
   CPU per heartbeat and p99 with / without (means over the windows of each kind), the
   scrape time p50 / max and the body size;
8. runs the same load against a bare ``grpc.aio`` echo server (tests/bench/echo_server.py)
   so the RS's CPU and p99 are also given as a ratio to gRPC's own cost;
9. with ``--profile``, one more window per configuration with the server
   under py-spy (tests/bench/pyspy_profile.py; after the measured windows, so the sampling is in
   none of their figures): the top functions by own and by inclusive samples are printed
   and kept in the JSON, the raw stacks written beside ``--out``.

Reported per configuration: the server's CPU per heartbeat (microseconds of CPU time per
answered heartbeat in the window), heartbeats/s, latency p50/p99/max, the server's RSS,
errors; the CPU the server and the load generators spent while the agents connected (the
TLS handshakes are paid there, once per stream); the load generators' CPU and RSS, and for
TLS the seconds, CPU and memory it took them to load one SSLContext (or one set of channel
credentials) per agent. Ratios per N: TLS / plaintext (RS and echo) and RS / echo (plaintext
and TLS) of the CPU per heartbeat and of p99.

Every measured window gets a saturation verdict (tests/bench/saturation.py), printed in the
``verdict`` column beside its figures (legend under the table) and kept in the JSON as
``"saturation"``: whether the usable cores (the process's CPU affinity, which the server and
the load generators inherit; ``taskset -c 1`` makes it one core) were full, a load generator
was full, the server was at one core, and whether the server kept up with the offered
heartbeats (answered share and p99 below the period). A ratio is given only where neither of
its two windows was saturated and its denominator (e.g. the echo server) kept up; elsewhere
it reads ``n/a (saturated: ...)`` or ``n/a (<config> did not keep up)``, with the full reason
under the table and in the JSON's ``withheld``.

Prints one table row per (configuration, N) and writes everything to ``.bench/heartbeat.json``.
Every process is stopped (SIGTERM, then SIGKILL) and every temp dir removed, also on Ctrl-C.
No figure is asserted: this is a benchmark, not a test.

Usage::

    .venv/bin/python -m tests.bench.heartbeat_bench                 # N = 1,000 and 10,000
    .venv/bin/python -m tests.bench.heartbeat_bench --quick         # smoke run: N=200, 3 s
    .venv/bin/python -m tests.bench.heartbeat_bench --agents 5000 --duration 30 --servers rs-tls
    .venv/bin/python -m tests.bench.heartbeat_bench --agents 5000 --duration 30 \
        --servers rs-tls,echo-tls --scrape-interval 0 --repeat 3   # the RS/echo ratio

Options: ``--agents`` (comma-separated N, default 1000,10000), ``--duration`` (steady-state
seconds, 20; 30 or more always includes one CheckAllServerTask run), ``--warmup`` (5),
``--period`` (heartbeat period, 2 s), ``--procs`` (load generator processes, 2),
``--lease-time`` (passed to the RS, 10s), ``--streams-per-channel`` (lease streams sharing
one TCP connection in a plaintext load generator, 1; TLS is always 1), ``--connect-spread``
(seconds), ``--client`` (``raw``: the load generators'
minimal HTTP/2 client, ~0.05 ms of CPU per heartbeat, default; ``grpc``: grpc.aio like
observer_agent, ~0.4 ms, which saturates a 2-core machine before the server does),
``--servers`` (comma-separated of ``rs-tls,rs,echo,echo-tls``, all by default),
``--repeat`` (rounds of every configuration, alternating; the ratios per round and, per N,
their median with its spread: a ratio of two windows measured a minute apart moves with the
machine, 1.14x-1.42x over ten single pairs of nearly the same code on a shared 2-core VM),
``--profile`` (step 9), ``--out`` (JSON path).
Client-side latency includes the load generators' own scheduling delay; when the machine
is saturated or other processes use its usable cores, the output says so.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import queue
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tabulate import tabulate

from obcommon.durations import parse_duration
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import CertError, Role
from obcommon.security.tls import SecurityConfigError, TransportSecurity
from rootservice.db import engine as dbengine
from rootservice.db import event_repo, param_repo, timestamps, zone_repo
from rootservice.db.tables import all_server
from rootservice.db.zone_repo import ZoneInfo
from rootservice.servers.status import ServerStatus
from tests.bench.bench_pki import BenchPki
from tests.bench.pyspy_profile import Profile, render
from tests.bench.saturation import (
    ANSWERED_SHARE,
    LOADGEN_CORE,
    MACHINE_BUSY_SHARE,
    SERVER_CORE,
    verdict,
    withheld,
)
from tests.support.ports import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LOADGEN = HERE / "loadgen.py"
ECHO = HERE / "echo_server.py"
ZONES = ("z1", "z2", "z3")  # agent i is in ZONES[i % 3] (loadgen.py)
CLUSTER_ID = "c0ffee"  # loadgen.py sends it
SQL_PORT = 2881
PORT_BASE = 20000
POLL_S = 0.02
#: The configurations, in the order they run for each N.
CONFIGS = ("rs-tls", "rs", "echo", "echo-tls")
READY_TIMEOUT_S = 240.0  # for every agent's first answer (after the connect spread)
LOAD_TIMEOUT_S = 60.0  # plus 50 ms per agent, for the load generators to build their agents
TAKE_OFFICE_WAIT_S = 300.0  # for the RS's take-office heartbeat requests to drain
QUIET_LOG_WAIT_S = 30.0  # the same when the RS logs nothing about them


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(data: list[int], p: float) -> int:
    """Nearest-rank percentile of sorted ``data`` (as rootservice.metrics does)."""
    if not data:
        return 0
    return data[min(len(data) - 1, max(0, int(round(p * len(data) + 0.5)) - 1))]


def cpu_s(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(t.user + t.system)


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity, e.g. ``taskset -c 1``; the load
    generators and the server it starts inherit it), or every CPU where the platform has
    no affinity."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(psutil.cpu_count() or 1))


def busy_seconds(per_cpu: list[Any], cpus: list[int] | None = None) -> float:
    """Busy CPU seconds in ``per_cpu`` (``psutil.cpu_times(percpu=True)``: one named tuple
    of seconds per CPU), over every CPU or over ``cpus`` (indexes) only."""
    # Linux counts guest time inside user time; steal is another VM's.
    not_busy = ("idle", "iowait", "steal", "guest", "guest_nice")
    chosen = per_cpu if cpus is None else [per_cpu[c] for c in cpus if c < len(per_cpu)]
    return float(sum(getattr(t, f) for t in chosen for f in t._fields if f not in not_busy))


def machine_busy_s(cpus: list[int] | None = None) -> tuple[float, float]:
    """(busy CPU seconds, wall seconds) since boot, for deltas: over all cores, or over
    ``cpus`` only (the usable ones: another core's load is not this run's)."""
    return busy_seconds(psutil.cpu_times(percpu=True), cpus), time.monotonic()


# --- database seeding ------------------------------------------------------------------------


def seed_database(url: str, n: int) -> None:
    """3 zones and ``n`` whitelisted servers that have never heartbeated (as
    tests/support/harness.py seed_cluster leaves them), in one transaction with one executemany."""
    engine = dbengine.make_engine(url)
    try:
        dbengine.upgrade(engine)
        now = int(time.time() * 1e6)
        ts = timestamps.us_to_datetime(now)
        rows = []
        for i in range(n):
            s = ServerStatus(
                id=i + 1, zone=ZONES[i % 3], ip="127.0.0.1", port=PORT_BASE + i, sql_port=SQL_PORT
            )
            s.last_offline_time = now
            rows.append(s.to_row() | {"gmt_create": ts, "gmt_modified": ts})
        with engine.begin() as conn:
            for z in ZONES:
                zone_repo.upsert_zone(conn, ZoneInfo(z, "ACTIVE", "r1", ""), now)
            conn.execute(all_server.insert(), rows)
            param_repo.set_param(conn, param_repo.PARAM_CLUSTER_ID, CLUSTER_ID, now)
            param_repo.set_param(conn, param_repo.PARAM_MAX_SERVER_ID, str(n), now)
            param_repo.set_param(conn, param_repo.PARAM_BOOTSTRAP_TIME, str(now), now)
    finally:
        engine.dispose()


# --- child processes ---------------------------------------------------------------------------


class Child:
    """A subprocess whose stdout lines are queued by a reader thread."""

    def __init__(self, name: str, argv: list[str], stderr_path: Path, read_stdout: bool) -> None:
        self.name = name
        self.stderr_path = stderr_path
        self._err = open(stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE if read_stdout else self._err,
            stderr=self._err,
            cwd=ROOT,
        )
        self.ps = psutil.Process(self.proc.pid)
        self.lines: queue.Queue[str | None] = queue.Queue()
        if read_stdout:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace"))
        self.lines.put(None)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise RuntimeError(f"{self.name} is gone ({e}); see {self.stderr_path}") from None

    def next_line(self, deadline: float) -> str | None:
        """The next stdout line, or None when ``deadline`` (time.monotonic()) passes.
        Raises RuntimeError when the child exited."""
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            line = self.lines.get(timeout=left)
        except queue.Empty:
            return None
        if line is None:
            raise RuntimeError(f"{self.name} exited; see {self.stderr_path}:\n{self.tail()}")
        return line

    def expect(self, event: str, timeout: float) -> dict[str, Any]:
        """The next stdout JSON line with ``"event": event`` (other lines are skipped)."""
        deadline = time.monotonic() + timeout
        for _ in range(10_000):
            line = self.next_line(deadline)
            if line is None:
                break
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict) and obj.get("event") == event:
                    return obj
        raise RuntimeError(f"{self.name}: no {event!r} within {timeout:.0f}s\n{self.tail()}")

    def tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            self._err.flush()
            lines = self.stderr_path.read_text(errors="replace").splitlines()
            return "\n".join(lines[-n:])
        return ""

    def stop(self) -> None:
        """SIGTERM, wait up to 5 s, then SIGKILL; never raises."""
        with contextlib.suppress(Exception):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(5)
        with contextlib.suppress(Exception):
            self._err.close()


class Children:
    """Every child of one run, stopped in reverse order in ``close()``."""

    def __init__(self) -> None:
        self.items: list[Child] = []

    def start(self, *args: Any, **kwargs: Any) -> Child:
        c = Child(*args, **kwargs)
        self.items.append(c)
        return c

    def close(self) -> None:
        for c in reversed(self.items):
            c.stop()
        self.items.clear()


# --- RS access ---------------------------------------------------------------------------------


class RsClient:
    """The benchmark's admin channel to the RS: plaintext, or mutual TLS as ``root`` with
    ``certs_dir/client.root.crt`` (GetMetrics needs a client certificate); ``options``:
    gRPC channel arguments (e.g. a short reconnect backoff to watch an RS restart)."""

    def __init__(
        self,
        addr: str,
        certs_dir: Path | None = None,
        options: list[tuple[str, Any]] | None = None,
    ) -> None:
        security = TransportSecurity.for_dir(certs_dir, Role.CLIENT, "root")
        self.channel = security.channel(addr, options)
        self.admin = obrpc_pb2_grpc.AdminServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def metrics(self, timeout: float = 5.0) -> dict[str, Any]:
        r = self.admin.GetMetrics(obrpc_pb2.MetricsRequest(), timeout=timeout)
        out: dict[str, Any] = json.loads(r.json)
        return out

    def wait_serving(self, rs: Child, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.1) + 10):
            if rs.proc.poll() is not None:
                raise RuntimeError(f"the RS exited with {rs.proc.returncode}:\n{rs.tail()}")
            with contextlib.suppress(grpc.RpcError):
                r = self.health.Check(
                    health_pb2.HealthCheckRequest(service="liveness"), timeout=1.0
                )
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        raise RuntimeError(f"the RS was not SERVING within {timeout:.0f}s:\n{rs.tail()}")

    def wait_state(self, rs: Child, state: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        m: dict[str, Any] = {}
        for _ in range(int(timeout / 0.1) + 10):
            if rs.proc.poll() is not None:
                raise RuntimeError(f"the RS exited with {rs.proc.returncode}:\n{rs.tail()}")
            with contextlib.suppress(grpc.RpcError):
                m = self.metrics()
                if m.get("state") == state:
                    return m
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        raise RuntimeError(f"the RS is {m.get('state')}, not {state}, after {timeout:.0f}s")

    def close(self) -> None:
        self.channel.close()


class Scraper:
    """Scrapes the RS's ``/metrics`` every ``interval_s`` in a thread, as Prometheus would: over HTTPS with ``certs_dir``'s ``client.root.crt`` and
    ``ca.crt``, else plain HTTP (an ``--insecure`` RS). Records each scrape's wall time
    (milliseconds) and body size (bytes); a failed scrape is counted, not raised."""

    def __init__(self, http_addr: str, certs_dir: Path | None, interval_s: float) -> None:
        self.interval_s = interval_s
        self.ctx: ssl.SSLContext | None = None
        if certs_dir is not None:
            self.ctx = ssl.create_default_context(cafile=str(certs_dir / "ca.crt"))
            # The RS's certificate names its RPC address; the HTTP listener shares it.
            self.ctx.check_hostname = False
            self.ctx.load_cert_chain(certs_dir / "client.root.crt", certs_dir / "client.root.key")
        scheme = "https" if self.ctx is not None else "http"
        self.url = f"{scheme}://{http_addr}/metrics"
        self.times_ms: list[float] = []
        self.sizes: list[int] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def scrape_once(self) -> None:
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(self.url, timeout=10, context=self.ctx) as r:
                body = r.read()
        except (OSError, urllib.error.URLError) as e:
            self.failures.append(str(e))
            return
        self.times_ms.append((time.perf_counter() - t) * 1000)
        self.sizes.append(len(body))

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            self.scrape_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t)))

    def start(self) -> None:
        # Started once per scraped window: a stop() of the previous window must not end
        # this one's thread at once.
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)

    def summary(self) -> dict[str, Any]:
        t = sorted(self.times_ms)
        return {
            # Over every scraped window.
            "scrapes": len(t),
            "failures": len(self.failures),
            "first_failure": self.failures[0] if self.failures else "",
            "scrape_ms": {
                "p50": t[len(t) // 2] if t else None,
                "max": t[-1] if t else None,
            },
            "metrics_bytes": max(self.sizes) if self.sizes else None,
        }


# --- one run -------------------------------------------------------------------------------------


def connect_spread(n: int, args: argparse.Namespace) -> float:
    """Seconds over which the agents' connections are opened: ``--connect-spread``, or
    max(period, N / 250), so that ~250 connects a second reach the server: a TLS connect and
    first heartbeat cost the RS ~5 ms of CPU (measured at N=4,000), and 10,000 agents
    connecting within 10 s kept it saturated long enough for gRPC to cancel queued calls."""
    if args.connect_spread is not None:
        return float(args.connect_spread)
    return max(args.period, n / 250)


def start_loadgens(
    children: Children,
    target: str,
    n: int,
    args: argparse.Namespace,
    tmp: Path,
    tag: str,
    node_certs: Path | None = None,
    targets: list[str] | None = None,
) -> list[Child]:
    """``--procs`` load generators for agents 0..n-1 against ``target``; with
    ``node_certs`` (bench_pki's nodes dir) each agent connects over mutual TLS; with
    ``targets`` the agents know every RS address and follow leader hints."""
    procs = max(1, min(args.procs, n))
    gens = []
    first = 0
    for p in range(procs):
        count = n // procs + (1 if p < n % procs else 0)
        argv = [
            sys.executable,
            str(LOADGEN),
            "--target",
            target,
            "--first",
            str(first),
            "--count",
            str(count),
            "--port-base",
            str(PORT_BASE),
            "--period",
            str(args.period),
            "--timeout",
            str(args.period),
            "--streams-per-channel",
            str(args.streams_per_channel),
            "--client",
            args.client,
            "--ready-timeout",
            str(READY_TIMEOUT_S),
            "--connect-spread",
            str(connect_spread(n, args)),
        ]
        if node_certs is not None:
            argv += ["--node-certs", str(node_certs)]
        if targets:
            argv += ["--targets", ",".join(targets)]
        gens.append(children.start(f"loadgen{p}", argv, tmp / f"{tag}-loadgen{p}.log", True))
        first += count
    return gens


def stalls(slow: list[tuple[float, int]], gap_s: float = 0.25) -> list[dict[str, Any]]:
    """Group the responses slower than 50 ms (sorted by send time) into episodes: requests
    sent less than ``gap_s`` apart belong to one. Each: wall-clock start, seconds covered,
    how many requests, worst latency (ms)."""
    out: list[dict[str, Any]] = []
    for t, us in slow:
        if out and t - out[-1]["last"] <= gap_s:
            e = out[-1]
            e["last"] = t
            e["requests"] += 1
            e["worst_ms"] = max(e["worst_ms"], us / 1000)
        else:
            out.append({"start": t, "last": t, "requests": 1, "worst_ms": us / 1000})
    for e in out:
        e["sent_over_s"] = round(e.pop("last") - e["start"], 3)
    return out


def wait_ready(gens: list[Child], n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Wait until every simulated agent has had its first answer (bounded)."""
    t0 = time.monotonic()
    # Loading one TLS context per agent takes ~5 ms each on a busy machine: bounded apart.
    for g in gens:
        g.expect("loaded", LOAD_TIMEOUT_S + 0.05 * n)
    log(f"load generators built their agents after {time.monotonic() - t0:.1f}s")
    t1 = time.monotonic()
    wait_s = args.period + connect_spread(n, args) + READY_TIMEOUT_S + 15
    ready = [g.expect("ready", wait_s) for g in gens]
    unanswered = sum(r["agents"] - r["answered"] for r in ready)
    if unanswered:
        log(f"warning: {unanswered} agents had no answer within {READY_TIMEOUT_S:.0f}s")
    secs = time.monotonic() - t1
    log(f"{n - unanswered} agents answered after {secs:.1f}s")
    tls_load = [r.get("tls_load") or {} for r in ready]
    return {
        "all_answered_s": secs,
        "unanswered": unanswered,
        "connections": sum(r["channels"] for r in ready),
        "connect_failures": sum(r.get("connect_failures", 0) for r in ready),
        "spread_s": connect_spread(n, args),
        # Per load generator: loading one TLS context per agent (empty in plaintext).
        "loadgen_tls_load": tls_load,
        "loadgen_rss_mib_ready": [r.get("rss_mib", 0.0) for r in ready],
    }


def connect_phase(
    server: Child, gens: list[Child], n: int, args: argparse.Namespace, config: str = ""
) -> dict[str, Any]:
    """:func:`wait_ready` plus the CPU seconds the server and the load generators spent from
    the generators' start until every agent had its first answer: connects, TLS handshakes
    (once per stream) and the first heartbeats. With ``--profile-connect`` the server is
    under py-spy for the phase (its summary under ``"profile"``, the raw stacks in
    ``.bench/profile-connect-<config>-<n>.txt``): the first lease's own cost."""
    prof: Profile | None = None
    if getattr(args, "profile_connect", False):
        out = Path(args.out).parent / f"profile-connect-{config}-{n}.txt"
        log(f"{config}: connect phase profiled (py-spy) -> {out}")
        prof = Profile(server.proc.pid, out)
        prof.start()
    s0 = cpu_s(server.ps)
    g0 = [cpu_s(g.ps) for g in gens]  # the generators started a moment ago
    try:
        ready = wait_ready(gens, n, args)
    finally:
        if prof is not None:
            summary = prof.stop()
    ready["server_cpu_s"] = cpu_s(server.ps) - s0
    ready["loadgen_cpu_s"] = [cpu_s(g.ps) - c for g, c in zip(gens, g0, strict=True)]
    if prof is not None:
        summary["raw"] = str(prof.out)
        ready["profile"] = summary
    return ready


def wait_take_office_requests(rs: Child, n: int) -> dict[str, Any]:
    """After taking office the RS asks every server that is not alive for a heartbeat
    (docs/design/leases.md). Here no agent serves ObserverService, so all N requests fail
    (connection refused) and the RS logs a warning: one summary line ("request heartbeat
    failed for X of N servers"), or one line per server in older versions. That burst is
    not steady state: wait for the summary, or N per-server lines, or 5 s without a new
    one; bounded by TAKE_OFFICE_WAIT_S (or QUIET_LOG_WAIT_S when the RS logs nothing)."""
    t0 = time.monotonic()
    per_server = 0
    summary = ""
    offset = 0
    last_line = 0.0
    for _ in range(int(TAKE_OFFICE_WAIT_S / 0.2) + 10):
        with contextlib.suppress(OSError), open(rs.stderr_path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
            # Whole lines only, so that a line is never split between two reads.
            cut = chunk.rfind(b"\n") + 1
            offset += cut
            for line in chunk[:cut].decode(errors="replace").splitlines():
                if "request heartbeat failed for" in line:
                    summary = line.split("rootservice.servers.heartbeat_requester: ", 1)[-1][:120]
                elif "request heartbeat from" in line:
                    per_server += 1
                    last_line = time.monotonic()
        now = time.monotonic()
        if summary or per_server >= n or (last_line and now - last_line >= 5.0):
            break
        if now - t0 >= (TAKE_OFFICE_WAIT_S if last_line else QUIET_LOG_WAIT_S):
            break
        time.sleep(0.2)
    secs = time.monotonic() - t0
    what = summary or f"{per_server} per-server warnings"
    log(f"the RS's take-office heartbeat requests are over after {secs:.1f}s more: {what}")
    return {"summary": summary, "per_server_warnings": per_server, "waited_s": secs}


def measure(
    server: Child,
    gens: list[Child],
    n: int,
    args: argparse.Namespace,
    snap: Callable[[], dict[str, Any]] | None = None,
    scraper: Scraper | Profile | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Warm up, then measure one window. ``snap`` (the RS's GetMetrics) is called as the
    window starts and ends; ``scraper`` runs during the window only (its first scrape at
    the window's start); returns (figures, first snapshot, last snapshot)."""
    log(f"warm-up {args.warmup:.0f}s, then {args.duration:.0f}s measured")
    time.sleep(args.warmup)
    cpus = usable_cpus()
    cpu0 = cpu_s(server.ps), [cpu_s(g.ps) for g in gens], machine_busy_s(cpus)
    all0 = machine_busy_s()
    for g in gens:
        g.send("start")
    before = snap() if snap else {}
    if scraper is not None:
        scraper.start()
    time.sleep(args.duration)
    if scraper is not None:
        scraper.stop()
    for g in gens:
        g.send("stop")
    cpu1 = cpu_s(server.ps), [cpu_s(g.ps) for g in gens], machine_busy_s(cpus)
    all1 = machine_busy_s()
    after = snap() if snap else {}
    wall = cpu1[2][1] - cpu0[2][1]
    windows = [g.expect("window", 60) for g in gens]
    lat = sorted(x for w in windows for x in w["latency_us"])
    slow = sorted((t, us) for w in windows for t, us in w.get("slow", []))
    lag = sorted(x for w in windows for x in w["send_lag_us"])
    errors: Counter[str] = Counter()
    for w in windows:
        errors.update(w["errors"])
    try:
        rss = server.ps.memory_info().rss
    except psutil.Error:
        rss = 0
    gen_cpu = [(b - a) / wall for a, b in zip(cpu0[1], cpu1[1], strict=True)]
    gen_rss = []
    for g in gens:
        try:
            gen_rss.append(g.ps.memory_info().rss / (1 << 20))
        except psutil.Error:
            gen_rss.append(0.0)
    server_cpu = (cpu1[0] - cpu0[0]) / wall
    hb_per_s = sum(w["responses"] / w["seconds"] for w in windows)
    busy = (cpu1[2][0] - cpu0[2][0]) / wall
    lat_ms = {
        "p50": pct(lat, 0.50) / 1000,
        "p99": pct(lat, 0.99) / 1000,
        "max": (lat[-1] if lat else 0) / 1000,
    }
    sat = verdict(
        busy_cores=busy,
        usable_cores=len(cpus),
        server_cpu_cores=server_cpu,
        loadgen_cpu_cores=gen_cpu,
        hb_per_s=hb_per_s,
        offered_hb_per_s=n / args.period,
        p99_ms=lat_ms["p99"],
        period_s=args.period,
    )
    out = {
        "agents": n,
        "expected_hb_per_s": n / args.period,
        "hb_per_s": hb_per_s,
        # Microseconds of server CPU per answered heartbeat.
        "server_cpu_us_per_hb": server_cpu / hb_per_s * 1e6 if hb_per_s > 0 else None,
        "responses": sum(w["responses"] for w in windows),
        "window_s": wall,
        "latency_ms": lat_ms,
        "loadgen_send_lag_ms": {"p50": pct(lag, 0.50) / 1000, "p99": pct(lag, 0.99) / 1000},
        "errors": dict(errors),
        "timeouts": sum(w["timeouts"] for w in windows),
        "stream_failures": sum(w["stream_failures"] for w in windows),
        "late_sends": sum(w["late_sends"] for w in windows),
        "stalls": stalls(slow),
        "flow_blocked": sum(w.get("flow_blocked", 0) for w in windows),
        "server_cpu_cores": server_cpu,
        "server_rss_mib": rss / (1 << 20),
        "loadgen_cpu_cores": gen_cpu,
        "loadgen_rss_mib": gen_rss,
        # Every core of the machine, and the usable ones (this process's affinity, which
        # the server and the load generators inherit): only these can slow the run.
        "machine_busy_cores": (all1[0] - all0[0]) / (all1[1] - all0[1]),
        "machine_cores": psutil.cpu_count() or 0,
        "usable_busy_cores": busy,
        "usable_cpus": cpus,
        # Whatever else ran on the usable cores meanwhile (the parent, other users).
        "other_cpu_cores": max(0.0, busy - server_cpu - sum(gen_cpu)),
        # Did the window measure the server or the machine (tests/bench/saturation.py).
        "saturation": sat.as_json(),
    }
    return out, before, after


def profile_window(
    server: Child, gens: list[Child], n: int, args: argparse.Namespace, config: str
) -> dict[str, Any]:
    """One more window (after the measured ones, so py-spy's sampling is in none of their
    figures) with ``server`` profiled by py-spy (``--profile``): the raw
    stacks go to ``.bench/profile-<config>-<n>.txt`` beside ``--out``; returns the summary
    (tests/bench/pyspy_profile.py) with the window's CPU per heartbeat."""
    out = Path(args.out).parent / f"profile-{config}-{n}.txt"
    log(f"{config}: profiled window (py-spy) -> {out}")
    prof = Profile(server.proc.pid, out)
    res, _, _ = measure(server, gens, n, args, None, prof)
    summary = prof.stop()
    summary["server_cpu_us_per_hb"] = res["server_cpu_us_per_hb"]
    summary["raw"] = str(out)
    return summary


def scrape_comparison(
    plains: list[dict[str, Any]], scrapeds: list[dict[str, Any]], scraper: Scraper
) -> dict[str, Any]:
    """The windows with scraping beside those without: CPU per heartbeat (microseconds) and
    p99 (milliseconds), each the mean over its windows (every window's own figure is kept
    too), their ratios (with / without), the scrape times and body size."""

    def mean(xs: list[float | None]) -> float | None:
        vals = [x for x in xs if x is not None]
        return sum(vals) / len(vals) if vals else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    cpu0 = mean([w["server_cpu_us_per_hb"] for w in plains])
    cpu1 = mean([w["server_cpu_us_per_hb"] for w in scrapeds])
    p99_0 = mean([w["latency_ms"]["p99"] for w in plains])
    p99_1 = mean([w["latency_ms"]["p99"] for w in scrapeds])
    last = scrapeds[-1]
    return {
        **scraper.summary(),
        "interval_s": scraper.interval_s,
        "windows": {"plain": len(plains), "scraped": len(scrapeds)},
        "hb_per_s": mean([w["hb_per_s"] for w in scrapeds]),
        "plain_server_cpu_us_per_hb": cpu0,
        "plain_p99_ms": p99_0,
        "server_cpu_us_per_hb": cpu1,
        "p99_ms": p99_1,
        "per_window": {
            "plain": [
                (w["server_cpu_us_per_hb"], w["latency_ms"]["p99"], w["hb_per_s"]) for w in plains
            ],
            "scraped": [
                (w["server_cpu_us_per_hb"], w["latency_ms"]["p99"], w["hb_per_s"]) for w in scrapeds
            ],
        },
        # Each window's saturation codes (tests/bench/saturation.py), in order.
        "saturation_codes": {
            "plain": [w["saturation"]["codes"] for w in plains],
            "scraped": [w["saturation"]["codes"] for w in scrapeds],
        },
        "latency_ms": last["latency_ms"],
        "errors": last["errors"],
        "timeouts": last["timeouts"],
        "server_cpu_cores": mean([w["server_cpu_cores"] for w in scrapeds]),
        "other_cpu_cores": mean([w["other_cpu_cores"] for w in scrapeds]),
        "cpu_ratio": ratio(cpu1, cpu0),
        "p99_ratio": ratio(p99_1, p99_0),
    }


def rs_argv(
    url: str,
    addr: str,
    data_dir: Path,
    lease_time: str,
    http_addr: str,
    certs_dir: Path | None,
) -> list[str]:
    """Command line of the RS under test: database ``url``, gRPC on ``addr``, HTTP on
    ``http_addr``, WARNING logs, mutual TLS with ``certs_dir`` (bench_pki's server dir) or
    ``--insecure`` without; a MySQL endpoint on a free port (several RS may run at once)."""
    argv = [
        sys.executable,
        "-m",
        "rootservice.cli",
        "serve",
        "--db",
        url,
        "--rpc-addr",
        addr,
        "--data-dir",
        str(data_dir),
        "--lease-time",
        lease_time,
        "--log-level",
        "WARNING",
        "--http-addr",
        http_addr,
        "--mysql-addr",
        f"127.0.0.1:{free_port()}",
    ]
    argv += ["--certs-dir", str(certs_dir)] if certs_dir is not None else ["--insecure"]
    return argv


def run_rs(n: int, args: argparse.Namespace, pki: BenchPki | None = None) -> dict[str, Any]:
    """One RS run with ``n`` agents: over mutual TLS with ``pki`` (its node certificates
    must cover the n agents' ports), else plaintext (``--insecure``)."""
    tls = pki is not None
    tmp = Path(tempfile.mkdtemp(prefix=f"hbbench-rs{'-tls' if tls else ''}-{n}-"))
    children = Children()
    client: RsClient | None = None
    try:
        url = f"sqlite:///{tmp / 'rootservice.db'}"
        t0 = time.monotonic()
        seed_database(url, n)
        log(f"RS, N={n}: seeded {n} servers in {time.monotonic() - t0:.1f}s")
        port = free_port()
        addr = f"127.0.0.1:{port}"
        http_addr = f"127.0.0.1:{free_port()}"
        certs_dir = pki.server_dir(tmp / "certs", addr) if pki is not None else None
        argv = rs_argv(url, addr, tmp / "data", args.lease_time, http_addr, certs_dir)
        t0 = time.monotonic()
        rs = children.start("rs", argv, tmp / "rs.log", False)
        client = RsClient(addr, certs_dir)
        client.wait_serving(rs, 30)
        client.wait_state(rs, "FULL_SERVICE", 120)
        startup_s = time.monotonic() - t0
        in_service_wall = time.time()
        log(
            f"RS ({'mutual TLS' if tls else 'plaintext'}) in FULL_SERVICE after "
            f"{startup_s:.1f}s; starting {args.procs} load generators"
        )
        nodes = pki.nodes_dir if pki is not None else None
        gens = start_loadgens(children, addr, n, args, tmp, "rs", nodes)
        ready = connect_phase(rs, gens, n, args, "rs-tls" if tls else "rs")
        take_office = wait_take_office_requests(rs, n)
        rs_client = client
        calls: list[float] = []

        def snap() -> dict[str, Any]:
            t = time.perf_counter()
            m = rs_client.metrics()
            calls.append((time.perf_counter() - t) * 1000)
            return m

        res, before, after = measure(rs, gens, n, args, snap)
        res["getmetrics_ms"] = max(calls)
        if args.scrape_interval > 0:
            # The same load, RS and load generators again, with /metrics scraped. Scraped and plain
            # windows alternate (S P S P ... after the first
            # plain one), so that a drift of the RS over time (its periodic tasks, memory)
            # falls on both sides instead of on the scraped side alone.
            scraper = Scraper(http_addr, certs_dir, args.scrape_interval)
            plains, scrapeds = [res], []
            for i in range(args.scrape_rounds):
                log(f"round {i + 1}: /metrics scraped every {args.scrape_interval:g}s")
                scraped, _, after = measure(rs, gens, n, args, snap, scraper)
                scrapeds.append(scraped)
                if i + 1 < args.scrape_rounds:
                    log(f"round {i + 1}: plain")
                    plain, _, after = measure(rs, gens, n, args, snap)
                    plains.append(plain)
            res["scraped"] = scrape_comparison(plains, scrapeds, scraper)
        if args.profile:
            res["profile"] = profile_window(rs, gens, n, args, "rs-tls" if tls else "rs")
        res["server"] = "rs"
        res["tls"] = tls
        res["config"] = "rs-tls" if tls else "rs"
        res["rs_startup_s"] = startup_s
        for e in res["stalls"]:
            # The RS's periodic tasks start with FULL_SERVICE: this dates a stall by them.
            e["after_full_service_s"] = round(e["start"] - in_service_wall, 2)
        res["connect"] = ready
        res["rs_take_office_requests"] = take_office
        res["rs_heartbeats_per_s"] = (
            after.get("heartbeats_total", 0) - before.get("heartbeats_total", 0)
        ) / res["window_s"]
        res["rs_refused"] = after.get("heartbeats_refused_total", 0) - before.get(
            "heartbeats_refused_total", 0
        )
        res["rs_alive"] = after.get("alive", 0)
        res["rs_servers"] = after.get("servers", 0)
        res["rs_hb_handle_us"] = after.get("hb_handle_us", {})
        res["rs_checker_tick_us"] = after.get("checker_tick_us", {})
        res["rs_persist_queue_depth"] = after.get("persist_queue_depth", 0)
        res["rs_metrics"] = after
        if res["rs_alive"] != n:
            log(f"warning: the RS counts {res['rs_alive']} alive servers, not {n}")
        res["expiry"] = expiry(client, gens, n, args)
        res["rs_checker_tick_us_after_expiry"] = res["expiry"].pop("checker_tick_us")
        with contextlib.suppress(Exception):
            text = (tmp / "rs.log").read_text(errors="replace")
            res["rs_log_lines"] = len(text.splitlines())
            res["rs_loop_stalls"] = loop_stall_reports(text)
        with contextlib.suppress(Exception):
            res["rs_intake_events"] = intake_events(url)
        return res
    finally:
        if client is not None:
            client.close()
        for g in children.items:
            if g.name.startswith("loadgen"):
                with contextlib.suppress(Exception):
                    g.send("quit")
        children.close()
        shutil.rmtree(tmp, ignore_errors=True)


def expiry(
    client: RsClient,
    gens: list[Child],
    n: int,
    args: argparse.Namespace,
    k: int | None = None,
    silent: bool = False,
    slack_s: float = 5.0,
) -> dict[str, Any]:
    """Stop a batch of ``k`` agents (default min(100, N/10)) and time the RS's detection of
    their expired leases, polling GetMetrics until ``slack_s`` seconds after their lease end.
    ``silent``: the agents stop sending but keep their streams open (a power loss) instead of
    cancelling them. The result has the batch's wall-clock ``lease_end`` (latest accepted
    send + lease_time, seconds) and the global ``indexes`` of the stopped agents."""
    k = min(100, max(1, n // 10)) if k is None else k
    lease_s = parse_duration(args.lease_time) / 1e6
    base = client.metrics()
    base_expired = base.get("lease_expired", 0)
    base_lag_count = base.get("expire_detect_lag_us", {}).get("count", 0)
    per = [k // len(gens) + (1 if i < k % len(gens) else 0) for i in range(len(gens))]
    log(f"expiry: stopping {k} agents' heartbeats (lease_time {args.lease_time})")
    for g, kk in zip(gens, per, strict=True):
        g.send(f"pause {kk}{' silent' if silent else ''}")
    paused = [g.expect("paused", args.period * 2 + 10) for g in gens]
    last_ok = max(p["last_ok_send"] for p in paused)
    never = sum(p["never_ok"] for p in paused)
    expected_at = last_ok + lease_s
    deadline = time.time() + max(0.0, expected_at - time.time()) + slack_s
    detected_at = 0.0
    first_at = 0.0
    polls = 0
    poll_ms: list[float] = []
    m = base
    failed_polls = 0
    max_polls = int((lease_s + slack_s + 2 * args.period) / POLL_S) + 100
    for _ in range(max_polls):
        polls += 1
        t = time.perf_counter()
        try:
            m = client.metrics(timeout=2.0)
        except grpc.RpcError as e:
            # Keep the last answer: an empty one would count as -(everything) detected.
            log(f"GetMetrics failed: {e.code()}")
            failed_polls += 1
        poll_ms.append((time.perf_counter() - t) * 1000)
        now = time.time()
        got = m.get("lease_expired", 0) - base_expired
        if got > 0 and not first_at:
            first_at = now
        if got >= k:
            detected_at = now
            break
        if now >= deadline:
            break
        time.sleep(POLL_S)
    lag = m.get("expire_detect_lag_us", {})
    poll_ms.sort()
    out = {
        "batch": k,
        "silent": silent,
        "lease_end": expected_at,
        "indexes": sorted(i for p in paused for i in p.get("indexes", [])),
        "detected_at": detected_at or None,
        "never_accepted": never,
        # Every agent was live until this batch was stopped: any lease expired before is a
        # false expiry (the RS counted a live server not alive).
        "false_expiries": base.get("leases_expired_total", 0),
        "detected": m.get("lease_expired", 0) - base_expired,
        "all_detected_after_expiry_ms": (detected_at - expected_at) * 1000 if detected_at else None,
        "first_detected_after_expiry_ms": (first_at - expected_at) * 1000 if first_at else None,
        "rs_expire_detect_lag_us": lag,
        "rs_expire_detect_lag_count": lag.get("count", 0) - base_lag_count,
        "polls": polls,
        "failed_polls": failed_polls,
        "getmetrics_poll_ms": {
            "p50": poll_ms[len(poll_ms) // 2] if poll_ms else 0,
            "max": poll_ms[-1] if poll_ms else 0,
        },
        "alive_after": m.get("alive", 0),
        "checker_tick_us": m.get("checker_tick_us", {}),
    }
    if not detected_at:
        log(f"warning: only {out['detected']} of {k} expired leases detected in time")
    return out


def intake_events(url: str) -> list[dict[str, Any]]:
    """The RS's ``lease_intake`` events (``behind`` with the lag then, ``caught_up`` with the
    episode's worst) from its database at ``url``, oldest first, dated in seconds after the
    first."""
    engine = dbengine.make_engine(url)
    try:
        with engine.connect() as conn:
            rows = event_repo.latest_events(conn, 1_000_000)
    finally:
        engine.dispose()
    mine = sorted(
        (e["event_time_us"], e["event"], e["values"].get("lag", ""))
        for e in rows
        if e["module"] == "lease_intake"
    )
    t0 = mine[0][0] if mine else 0
    return [{"after_s": (t - t0) / 1e6, "event": ev, "lag": lag} for t, ev, lag in mine]


def loop_stall_reports(log_text: str) -> list[str]:
    """The RS's own reports of event-loop stalls (``rootservice.api.loop_stall_watch``) in
    ``log_text``: each report's first line and the stack lines under it, in log order."""
    out: list[str] = []
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if "the gRPC event loop has not run for" not in line:
            continue
        block = [line]
        for nxt in lines[i + 1 :]:
            # The next log record starts with its timestamp; the report's stack lines do not.
            if nxt[:4].isdigit():
                break
            block.append(nxt)
        out.append("\n".join(block))
    return out


def run_echo(n: int, args: argparse.Namespace, pki: BenchPki | None = None) -> dict[str, Any]:
    """One echo-server run with ``n`` agents: mutual TLS with ``pki``, else plaintext."""
    tls = pki is not None
    tmp = Path(tempfile.mkdtemp(prefix=f"hbbench-echo{'-tls' if tls else ''}-{n}-"))
    children = Children()
    try:
        lease_us = parse_duration(args.lease_time)
        # A fixed port: the server certificate names its address.
        addr = f"127.0.0.1:{free_port()}"
        argv = [sys.executable, str(ECHO), "--lease-time-us", str(lease_us), "--addr", addr]
        if pki is not None:
            argv += ["--certs-dir", str(pki.server_dir(tmp / "certs", addr))]
        echo = children.start("echo", argv, tmp / "echo.log", True)
        port = 0
        deadline = time.monotonic() + 30
        for _ in range(1000):
            try:
                line = echo.next_line(deadline)
            except RuntimeError:
                break
            if line is None:
                break
            if line.startswith("READY "):
                port = int(line.split()[1])
                break
        if not port:
            raise RuntimeError(f"the echo server did not start:\n{echo.tail()}")
        log(
            f"echo server ({'mutual TLS' if tls else 'plaintext'}), N={n}, on port {port}; "
            f"starting {args.procs} load generators"
        )
        nodes = pki.nodes_dir if pki is not None else None
        gens = start_loadgens(children, f"127.0.0.1:{port}", n, args, tmp, "echo", nodes)
        ready = connect_phase(echo, gens, n, args, "echo-tls" if tls else "echo")
        res, _, _ = measure(echo, gens, n, args)
        if args.profile:
            res["profile"] = profile_window(echo, gens, n, args, "echo-tls" if tls else "echo")
        res["server"] = "echo"
        res["tls"] = tls
        res["config"] = "echo-tls" if tls else "echo"
        res["connect"] = ready
        return res
    finally:
        for g in children.items:
            if g.name.startswith("loadgen"):
                with contextlib.suppress(Exception):
                    g.send("quit")
        children.close()
        shutil.rmtree(tmp, ignore_errors=True)


# --- report --------------------------------------------------------------------------------------


def fmt(v: Any, nd: int = 1) -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per N: the ratios of CPU per heartbeat, of p50 / p99 latency and of RSS between the
    configurations that ran - TLS / plaintext for the RS and the echo server, RS / echo in
    plaintext and over TLS. A ratio is None when one side is missing or zero. Every ratio
    of a pair is None, and ``withheld`` gives the reason, where
    :func:`tests.bench.saturation.withheld` says so (either window saturated, or the
    denominator's server did not keep up); ``withheld`` is None where they are shown.
    ``codes``: each side's saturation codes.

    With several rounds (``--repeat``) there is a row per N and round (``round`` 1, 2, ...),
    then per N a row with ``round`` ``"median"``: of each ratio, the median over the rounds
    where it was shown, with ``min``, ``max`` and ``rounds`` (how many; ``withheld`` only
    when it was shown in none)."""
    out = []
    for n, rnd in sorted({(r["agents"], r.get("round", 1)) for r in results}):
        by = {r["config"]: r for r in results if r["agents"] == n and r.get("round", 1) == rnd}
        row: dict[str, Any] = {"agents": n, "round": rnd}
        for label, a, b in (
            ("rs_tls/rs", "rs-tls", "rs"),
            ("echo_tls/echo", "echo-tls", "echo"),
            ("rs/echo", "rs", "echo"),
            ("rs_tls/echo_tls", "rs-tls", "echo-tls"),
        ):
            ra, rb = by.get(a), by.get(b)
            if ra is None or rb is None:
                continue

            def div(x: float | None, y: float | None) -> float | None:
                return x / y if x is not None and y else None

            why = withheld(a, ra["saturation"], b, rb["saturation"])
            codes = {a: ra["saturation"]["codes"], b: rb["saturation"]["codes"]}
            if why is not None:
                row[label] = dict.fromkeys(("cpu_per_hb", "p50", "p99", "rss"))
                row[label] |= {"withheld": why, "codes": codes}
                continue
            row[label] = {
                "cpu_per_hb": div(ra["server_cpu_us_per_hb"], rb["server_cpu_us_per_hb"]),
                "p50": div(ra["latency_ms"]["p50"], rb["latency_ms"]["p50"]),
                "p99": div(ra["latency_ms"]["p99"], rb["latency_ms"]["p99"]),
                "rss": div(ra["server_rss_mib"], rb["server_rss_mib"]),
                "withheld": None,
                "codes": codes,
            }
        if len(row) > 2:  # a ratio beside "agents" and "round"
            out.append(row)
    return out + _medians(out)


_RATIO_LABELS = ("rs_tls/rs", "echo_tls/echo", "rs/echo", "rs_tls/echo_tls")


def _medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``"median"`` rows of :func:`ratios` for each N measured in more than one round."""
    out = []
    for n in sorted({r["agents"] for r in rows}):
        mine = [r for r in rows if r["agents"] == n]
        if len(mine) < 2:
            continue
        row: dict[str, Any] = {"agents": n, "round": "median"}
        for label in _RATIO_LABELS:
            entries = [r[label] for r in mine if label in r]
            if not entries:
                continue
            shown = [e for e in entries if e["withheld"] is None]
            if not shown:
                row[label] = entries[0] | {"rounds": 0}
                continue
            values = {
                key: [e[key] for e in shown if e[key] is not None]
                for key in ("cpu_per_hb", "p50", "p99", "rss")
            }
            cpu = values["cpu_per_hb"]
            row[label] = {k: statistics.median(v) if v else None for k, v in values.items()} | {
                "withheld": None,
                "codes": shown[0]["codes"],
                "rounds": len(shown),
                "min": min(cpu, default=None),
                "max": max(cpu, default=None),
            }
        out.append(row)
    return out


#: Printed under the per-run table: what its verdict column says.
LEGEND = "\n".join(
    (
        "verdict (tests/bench/saturation.py): ok = none of",
        f"  M = the usable cores were >= {MACHINE_BUSY_SHARE:.0%} busy (machine saturated)",
        f"  G = a load generator used >= {LOADGEN_CORE:.2f} of a core (generator saturated)",
        f"  S = the server used >= {SERVER_CORE:.2f} of one core (at its one-core capacity)",
        f"  L = the server did not keep up (answered < {ANSWERED_SHARE:.0%} of the offered "
        "hb/s, or p99 >= the period)",
        "  M or G: the window's figures describe the machine as much as the server; no ratio "
        "is given with it",
    )
)


def busy_cell(r: dict[str, Any]) -> str:
    """The per-run table's busy cores of the usable ones, e.g. ``0.97/1 of 2`` when the run
    was pinned to one core of two."""
    usable = len(r["usable_cpus"])
    cell = f"{r['usable_busy_cores']:.2f}/{usable}"
    if usable != r["machine_cores"]:
        cell += f" of {r['machine_cores']}"
    return cell


def ratio_cell(entry: dict[str, Any] | None) -> str:
    """One cell of the ratio table: ``<CPU per hb> / <p99>``, ``-`` where the pair did not
    run, or ``n/a (saturated: <config> <codes>; ...)`` / ``n/a (<config> did not keep up)``
    where the ratio is withheld (the full reason is printed under the table)."""
    if entry is None:
        return "- / -"
    why = entry["withheld"]
    if why is None:

        def two(v: float | None) -> str:
            return f"{v:.2f}" if v is not None else "-"

        cell = f"{two(entry['cpu_per_hb'])} / {two(entry['p99'])}"
        if entry.get("rounds"):
            # A median row: the spread of the CPU ratio over the rounds it comes from.
            cell += f" (CPU {two(entry['min'])}-{two(entry['max'])}, {entry['rounds']} rounds)"
        return cell
    if why.startswith("saturated:"):
        full = [f"{c} {codes}" for c, codes in entry["codes"].items() if set(codes) & {"M", "G"}]
        return f"n/a (saturated: {'; '.join(full)})"
    return f"n/a ({why.split(':', 1)[0]})"


def report(results: list[dict[str, Any]]) -> str:
    """The printed tables (per run, the TLS loading of the load generators, the ratios)
    and the notes on disturbed runs. With several rounds each run's configuration is shown
    with its round (``rs-tls #2``)."""
    several = len({r.get("round", 1) for r in results}) > 1

    def name(r: dict[str, Any]) -> str:
        return f"{r['config']} #{r.get('round', 1)}" if several else str(r["config"])

    rows = []
    for r in results:
        lat = r["latency_ms"]
        errs = sum(r["errors"].values()) + r["timeouts"] + r["stream_failures"]
        is_rs = r["server"] == "rs"
        # The checker records nothing during the take-office grace (one lease_time after
        # the load): a short run's window may end before it; then the ticks of the expiry
        # phase are shown, starred.
        tick = r.get("rs_checker_tick_us") or {}
        star = ""
        if not tick.get("count"):
            tick, star = r.get("rs_checker_tick_us_after_expiry") or {}, "*"
        handle = r.get("rs_hb_handle_us", {})
        ex = r.get("expiry", {})
        lag = ex.get("rs_expire_detect_lag_us", {})
        conn = r.get("connect", {})
        rows.append(
            [
                name(r),
                fmt(r["agents"]),
                r["saturation"]["codes"],
                fmt(r["hb_per_s"], 0) + f" / {r['expected_hb_per_s']:,.0f}",
                fmt(r["server_cpu_us_per_hb"], 0),
                fmt(lat["p50"], 2),
                fmt(lat["p99"], 2),
                fmt(lat["max"], 1),
                fmt(errs),
                fmt(r["server_cpu_cores"], 2),
                fmt(r["server_rss_mib"], 0),
                f"{conn.get('server_cpu_s', 0):.1f}/{sum(conn.get('loadgen_cpu_s', [])):.1f}",
                "+".join(f"{c:.2f}" for c in r["loadgen_cpu_cores"]),
                "+".join(f"{m:.0f}" for m in r.get("loadgen_rss_mib", [])),
                busy_cell(r),
                fmt(r["other_cpu_cores"], 2),
                fmt(r.get("rs_alive")) if is_rs else "-",
                f"{handle.get('p50', 0)}/{handle.get('p99', 0)}" if is_rs else "-",
                f"{tick.get('p50', 0)}/{tick.get('p99', 0)}/{tick.get('max', 0)}{star}"
                if is_rs
                else "-",
                fmt(ex.get("all_detected_after_expiry_ms"), 0) if is_rs else "-",
                f"{lag.get('p50', 0) / 1000:.0f}/{lag.get('p99', 0) / 1000:.0f}/{lag.get('max', 0) / 1000:.0f}"
                if is_rs
                else "-",
            ]
        )
    headers = [
        "config",
        "N",
        "verdict",
        "hb/s (got/expected)",
        "CPU us/hb",
        "p50 ms",
        "p99 ms",
        "max ms",
        "errors",
        "server CPU",
        "RSS MiB",
        "connect CPU s srv/gen",
        "loadgen CPU",
        "loadgen RSS MiB",
        "busy/usable cores",
        "other CPU",
        "alive",
        "hb handle us p50/p99",
        "checker tick us p50/p99/max",
        "expiry detect ms",
        "RS expire lag ms p50/p99/max",
    ]
    out = [tabulate(rows, headers=headers, disable_numparse=True), LEGEND]
    scraped = [r for r in results if r.get("scraped")]
    if scraped:
        srows = []
        for r in scraped:
            s = r["scraped"]
            srows.append(
                [
                    name(r),
                    fmt(r["agents"]),
                    " ".join(s["saturation_codes"]["plain"])
                    + " / "
                    + " ".join(s["saturation_codes"]["scraped"]),
                    f"{fmt(s['plain_server_cpu_us_per_hb'], 1)} / {fmt(s['server_cpu_us_per_hb'], 1)}",
                    f"{fmt(s['cpu_ratio'], 3)}",
                    f"{fmt(s['plain_p99_ms'], 2)} / {fmt(s['p99_ms'], 2)}",
                    f"{fmt(s['p99_ratio'], 3)}",
                    f"{s['scrapes']} ({s['failures']} failed)",
                    f"{fmt(s['scrape_ms']['p50'], 1)} / {fmt(s['scrape_ms']['max'], 1)}",
                    fmt(s["metrics_bytes"]),
                ]
            )
        out.append("")
        out.append(
            f"With /metrics scraped every {scraped[0]['scraped']['interval_s']:g}s "
            "(windows alternating with plain ones, same RS and load):"
        )
        out.append(
            tabulate(
                srows,
                headers=[
                    "config",
                    "N",
                    "verdicts plain / scraped",
                    "CPU us/hb plain / scraped",
                    "ratio",
                    "p99 ms plain / scraped",
                    "ratio",
                    "scrapes",
                    "scrape ms p50 / max",
                    "/metrics bytes",
                ],
                disable_numparse=True,
            )
        )
    tls_rows = []
    for r in results:
        loads = [x for x in r.get("connect", {}).get("loadgen_tls_load", []) if x]
        if loads:
            tls_rows.append(
                [
                    name(r),
                    fmt(r["agents"]),
                    fmt(sum(x.get("contexts", 0) for x in loads)),
                    "+".join(f"{x['seconds']:.2f}" for x in loads),
                    "+".join(f"{x['cpu_s']:.2f}" for x in loads),
                    "+".join(f"{x['rss_mib_added']:.0f}" for x in loads),
                    fmt(r["connect"].get("all_answered_s"), 1),
                    fmt(r["connect"].get("connect_failures", 0)),
                ]
            )
    if tls_rows:
        out.append("")
        out.append(
            tabulate(
                tls_rows,
                headers=[
                    "TLS config",
                    "N",
                    "contexts",
                    "load s per gen",
                    "load CPU s per gen",
                    "load MiB per gen",
                    "all answered s",
                    "connect failures",
                ],
                disable_numparse=True,
            )
        )

    ratio_rows = []
    withheld_lines = []
    for row in ratios(results):
        cells = [fmt(row["agents"])] + ([str(row["round"])] if several else [])
        for label in _RATIO_LABELS:
            entry = row.get(label)
            cells.append(ratio_cell(entry))
            if entry and entry["withheld"]:
                at = f" round {row['round']}" if several else ""
                withheld_lines.append(
                    f"  {label.replace('_', '-')} N={row['agents']:,}{at}: {entry['withheld']}"
                )
        ratio_rows.append(cells)
    if ratio_rows:
        out.append("")
        out.append(
            "ratios of CPU per heartbeat / of p99 latency (shown only where neither window "
            "was saturated and the denominator kept up):"
        )
        out.append(
            tabulate(
                ratio_rows,
                headers=["N"]
                + (["round"] if several else [])
                + ["rs-tls/rs", "echo-tls/echo", "rs/echo", "rs-tls/echo-tls"],
                disable_numparse=True,
            )
        )
        if withheld_lines:
            out.append("ratios withheld:")
            out.extend(withheld_lines)
    notes = []
    for r in results:
        sat = r["saturation"]
        if sat["reasons"]:
            notes.append(
                f"note: {name(r)} N={r['agents']:,} [{sat['codes']}]: " + "; ".join(sat["reasons"])
            )
        if sat["saturated"]:
            notes.append(
                f"note: {name(r)} N={r['agents']:,}: saturated: client-side latency "
                "includes the scheduler's and the generators' own queueing (their send lag "
                f"p99 {r['loadgen_send_lag_ms']['p99']:.1f} ms)"
            )
        if r["other_cpu_cores"] >= 0.2:
            notes.append(
                f"note: {name(r)} N={r['agents']:,}: other processes used "
                f"{r['other_cpu_cores']:.2f} cores during the window (figures disturbed)"
            )
        if r["server"] == "rs" and not (r.get("rs_checker_tick_us") or {}).get("count"):
            notes.append(
                f"note: rs N={r['agents']:,}: the window ended inside the RS's take-office "
                "grace (no checker ticks recorded); * = ticks of the expiry phase"
            )
        worst = sorted(r.get("stalls", []), key=lambda e: -e["worst_ms"])[:5]
        if worst:
            shown = ", ".join(
                f"{e['worst_ms']:.0f} ms ({e['requests']} slow"
                + (
                    f", {e['after_full_service_s']:.1f}s after FULL_SERVICE)"
                    if "after_full_service_s" in e
                    else ")"
                )
                for e in sorted(worst, key=lambda e: e["start"])
            )
            notes.append(
                f"{name(r)} N={r['agents']:,}: {len(r['stalls'])} episodes of responses "
                f"over 50 ms; worst: {shown}"
            )
        if r.get("server") == "rs" and "false_expiries" in (r.get("expiry") or {}):
            notes.append(
                f"{name(r)} N={r['agents']:,}: {r['expiry']['false_expiries']} leases "
                "expired before the deliberate stop (false expiries: every agent was live)"
            )
        intake = r.get("rs_intake_events") or []
        if intake:
            shown = ", ".join(
                f"{e['event']} {e['lag']} at +{e['after_s']:.0f}s" for e in intake[:6]
            )
            notes.append(
                f"{name(r)} N={r['agents']:,}: lease intake events (lag; seconds after the "
                f"first): {shown}"
            )
        for report in (r.get("rs_loop_stalls") or [])[:3]:
            notes.append(f"{name(r)} N={r['agents']:,}: the RS reported: {report}")
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="heartbeat benchmark of the RootService")
    p.add_argument("--agents", default="1000,10000", help="comma-separated N (default 1000,10000)")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--period", type=float, default=2.0, help="heartbeat period (s)")
    p.add_argument("--procs", type=int, default=2, help="load generator processes")
    p.add_argument("--lease-time", default="10s", help="the RS's lease_time")
    p.add_argument(
        "--streams-per-channel",
        type=int,
        default=1,
        help="plaintext lease streams per connection (1, as real agents; TLS is always 1)",
    )
    p.add_argument(
        "--connect-spread",
        type=float,
        default=None,
        help="seconds over which the agents connect (default max(period, N/250))",
    )
    p.add_argument(
        "--client",
        choices=["raw", "grpc"],
        default="raw",
        help="load generators' client: raw HTTP/2 (cheap, default) or grpc.aio",
    )
    p.add_argument(
        "--servers",
        default=",".join(CONFIGS),
        help=f"comma-separated configurations of {','.join(CONFIGS)} (default: all)",
    )
    p.add_argument(
        "--scrape-interval",
        type=float,
        default=5.0,
        help="after the plain window, measure a second one with the RS's /metrics scraped "
        "every this many seconds (0: no second window)",
    )
    p.add_argument(
        "--scrape-rounds",
        type=int,
        default=2,
        help="scraped windows, alternating with plain ones after the first (default 2: P S P S)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every configuration, alternating (rs-tls, echo-tls, rs-tls, ...): "
        "the ratios per round and their median (a ratio of two windows measured a minute "
        "apart moves with the machine; on a shared 2-core VM ten pairs spread 1.14x-1.42x)",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: N=200, 3 s, 1 s warm-up")
    p.add_argument(
        "--profile",
        action="store_true",
        help="one more window per configuration with the server under py-spy; prints its "
        "top functions",
    )
    p.add_argument(
        "--profile-connect",
        action="store_true",
        help="the server under py-spy during the connect phase (the first leases); prints "
        "its top functions",
    )
    p.add_argument("--out", default=str(ROOT / ".bench" / "heartbeat.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.agents, args.duration, args.warmup = "200", 3.0, 1.0
    try:
        ns = [int(x) for x in args.agents.split(",") if x.strip()]
    except ValueError:
        p.error("--agents takes comma-separated integers")
    if not ns or any(n < 1 or PORT_BASE + n > 65535 for n in ns):
        p.error(f"N must be 1..{65535 - PORT_BASE}")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.procs < 1 or args.duration <= 0 or args.period <= 0 or args.warmup < 0:
        p.error("--procs, --duration and --period must be positive")
    parse_duration(args.lease_time)
    servers = {x.strip() for x in args.servers.split(",") if x.strip()}
    if not servers or servers - set(CONFIGS):
        p.error(f"--servers takes a comma-separated subset of {','.join(CONFIGS)}")
    if args.streams_per_channel < 1:
        p.error("--streams-per-channel must be at least 1")

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Restored on return, so that a caller (a test) keeps its own handler.
    previous = signal.signal(signal.SIGTERM, on_term)
    results: list[dict[str, Any]] = []
    status = 0
    pki_info: dict[str, Any] = {}
    failures: list[dict[str, Any]] = []
    pki_tmp = Path(tempfile.mkdtemp(prefix="hbbench-pki-"))
    try:
        pki: BenchPki | None = None
        if servers & {"rs-tls", "echo-tls"}:
            # Once per run, for the largest N; the smaller runs use a prefix of them.
            t0 = time.perf_counter()
            pki = BenchPki.create(pki_tmp)
            top = max(ns)
            secs = pki.add_nodes(range(PORT_BASE, PORT_BASE + top))
            pki_info = {"node_certificates": top, "seconds": time.perf_counter() - t0}
            log(f"wrote a CA and {top:,} node certificates in {secs:.1f}s")
        for rnd in range(1, args.repeat + 1):
            for n in ns:
                for config in CONFIGS:
                    if config not in servers:
                        continue
                    if args.repeat > 1:
                        log(f"round {rnd} of {args.repeat}: {config} N={n:,}")
                    tls_pki = pki if config.endswith("-tls") else None
                    try:
                        if config.startswith("rs"):
                            res = run_rs(n, args, tls_pki)
                        else:
                            res = run_echo(n, args, tls_pki)
                        results.append(res | {"round": rnd})
                    except (RuntimeError, OSError, grpc.RpcError) as e:
                        # One configuration failing must not lose the others of a long run.
                        detail = e.details() if isinstance(e, grpc.RpcError) else e  # type: ignore[attr-defined]
                        log(f"{config} N={n} failed: {type(e).__name__}: {detail}")
                        failures.append(
                            {"config": config, "agents": n, "error": str(detail)[:2000]}
                        )
                        status = 1
    except KeyboardInterrupt:
        log("interrupted: processes stopped, temp dirs removed")
        status = 130
    except (RuntimeError, OSError, grpc.RpcError, CertError, SecurityConfigError) as e:
        # A Ctrl-C from a terminal reaches the children too: the RS may be gone first.
        detail = e.details() if isinstance(e, grpc.RpcError) and hasattr(e, "details") else e
        log(f"failed: {type(e).__name__}: {detail}; processes stopped, temp dirs removed")
        status = 1
    finally:
        shutil.rmtree(pki_tmp, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    if results or failures:
        print(report(results))
        for r in results:
            if "profile" in r:
                print(render(r["config"], r["agents"], r["profile"]))
            if "profile" in r.get("connect", {}):
                print(render(f"{r['config']} connect", r["agents"], r["connect"]["profile"]))
        for f in failures:
            print(f"FAILED: {f['config']} N={f['agents']:,}: {f['error'][:300]}")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": psutil.cpu_count(), "python": sys.version.split()[0]},
            "args": {k: v for k, v in vars(args).items() if k != "out"},
            "pid": os.getpid(),
            "load_average": os.getloadavg(),
            "certificates": pki_info,
            "results": results,
            "ratios": ratios(results),
            # The thresholds of every result's "saturation" (tests/bench/saturation.py).
            "saturation_rule": {
                "machine_busy_share": MACHINE_BUSY_SHARE,
                "loadgen_core": LOADGEN_CORE,
                "server_core": SERVER_CORE,
                "answered_share": ANSWERED_SHARE,
                "p99_below_period": True,
            },
            "failures": failures,
        }
        out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        log(f"results written to {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
