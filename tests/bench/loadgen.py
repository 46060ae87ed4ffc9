"""Load generator of ``make bench``: one process simulating many observer agents.

Each simulated agent keeps one ``RootService.LeaseStream`` open (many streams share one
TCP connection), starts at a random offset within the period and then sends one
``LeaseRequest`` per period, waiting for the response with the same ``seq`` before the next
(as observer_agent does; a response later than the period makes the next request go out at
once). Agent ``i`` (global index) is server ``127.0.0.1:<port-base + i>`` in zone
``z<i % 3 + 1>``, as heartbeat_bench.py seeds them.

Two clients speak the same bytes on the wire:

- ``--client raw`` (default): a minimal HTTP/2 gRPC client on asyncio sockets - the
  request headers are pre-encoded (HPACK literals, no dynamic table), each heartbeat is one
  DATA frame carrying the serialized request, responses are parsed from DATA frames, and
  SETTINGS / PING / WINDOW_UPDATE / GOAWAY / RST_STREAM are honoured (send windows are
  tracked; our receive windows are opened to 2^31-1 and replenished). It costs a few tens of
  microseconds per heartbeat, so the generators leave the CPU to the server under test.
- ``--client grpc``: ``grpc.aio`` stream calls, like observer_agent. About 0.4 ms of CPU per
  heartbeat, so on a small machine the generators saturate before the server does.

Mutual TLS ("Benchmark"): with ``--node-certs DIR`` every simulated agent has its
own connection (``--streams-per-channel`` is forced to 1) presenting its own node
certificate ``DIR/<port>/node.crt`` / ``node.key`` (CN ``127.0.0.1:<port>``, written by
tests/bench/bench_pki.py), with ``DIR/ca.crt`` as the only root, as a real agent does:
the RS accepts a lease for server X only from node certificate X. The raw client wraps its
sockets with the stdlib ``ssl`` module (one ``SSLContext`` per agent, ALPN ``h2``, server
name 127.0.0.1); the grpc client opens one ``grpc.aio.secure_channel`` per agent with
``grpc.ssl_channel_credentials(ca, key, cert)``. No crypto of our own. A reconnect offers the
agent's last TLS session (as a real agent's ``grpc.ssl_session_cache``):
the raw client keeps each agent's ``ssl.SSLSession`` and counts the handshakes resumed and
full; the grpc client gives each agent a session cache of its own. The time and memory
spent loading the contexts are reported in the ``ready`` event. ``--connect-spread S``
opens the connections at random offsets over S seconds, so that the handshakes (and, in
plaintext, the connects) do not all arrive at once.

Usage (heartbeat_bench.py starts it; commands on stdin, one JSON line per answer on stdout)::

    .venv/bin/python tests/bench/loadgen.py --target 127.0.0.1:PORT --first 0 --count 5000

stdin commands:

- ``start``: begin a measurement window (counters and latency samples are reset).
- ``stop``: end it; answers ``{"event": "window", ...}`` with the window's seconds, responses,
  errors (by name), timeouts, stream failures, latency and send-lag samples (microseconds)
  and ``slow``: [wall-clock send time, latency] of the responses slower than 50 ms.
- ``pause K``: stop heartbeating on this process's first K agents (their streams are
  cancelled, as when an agent dies); answers ``{"event": "paused", "count", "last_ok_send":
  <wall-clock seconds of the latest accepted request among them>}`` once none has a request
  in flight.
  The answer also has ``recovered``: how many of them had an accepted lease since ``mark``.
- ``pause K silent``: the same without closing the streams (raw client): the agents just
  stop sending, as after a power loss - the RS sees no end of stream, only silence.
- ``mark``: note the time; each agent's first accepted lease after it is recorded.
- ``recovery``: answers ``{"event": "recovery", "marked", "recovered_at": [wall-clock
  seconds of each unpaused agent's first accepted lease since ``mark``, 0 when none],
  "last_ok_send": [...], "moves", "connect_failures", "tls_resumed", "tls_full"}`` (TLS
  handshakes of the raw client since start, resumed and full).
- ``progress``: answers ``{"event": "progress", "recovered", "live"}``: how many unpaused
  agents had an accepted lease since ``mark``, of how many.
- ``period S``: heartbeat every S seconds from the next request on.
- ``quit`` (or EOF): exit.

Reconnects (storm benchmark, tests/bench/storm_bench.py): an agent that lost its connection or
stream retries after :func:`backoff_delay` (exponential, full jitter, base 100 ms, cap 2 s,
reset by an accepted lease - the policy of obcommon/backoff.py). With ``--targets A,B`` (raw
client) the agents know several RS addresses, as observer_agent/rs_list.py: a refusal with a
``leader_hint`` moves the agent's connection to the hinted RS at once; a refusal without one,
or a failed connect, moves it to the next address after the backoff.

Spontaneously prints ``{"event": "loaded", ...}`` once the agents (and their TLS contexts)
are built, then ``{"event": "ready", ...}`` once every agent has had one answer (or after
period + ``--connect-spread`` + ``--ready-timeout`` seconds, with how many had none). Unanswered requests are
counted as timeouts after ``--timeout`` seconds by a sweeper (no ``asyncio.wait_for``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import ssl
import struct
import sys
import threading
import time
from collections import Counter, deque
from typing import Any

import grpc
import hpack
from grpc.experimental import session_cache

from obcommon.backoff import BackoffPolicy
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc

ZONES = ("z1", "z2", "z3")
CLUSTER_ID = "c0ffee"
BUILD_VERSION = "4.2.0.0-bench"
SQL_PORT = 2881
LEASE_PATH = "/oceanbase.rs.RootService/LeaseStream"
SLOW_US = 50_000  # responses at least this late are reported with their send time
MAX_SLOW = 20_000


def emit(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def warn(msg: str) -> None:
    print(f"loadgen: {msg}"[:400], file=sys.stderr, flush=True)


def rss_mib() -> float:
    """This process's current resident set (MiB), from /proc (Linux); 0.0 elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * resource.getpagesize() / (1 << 20)


def cpu_s() -> float:
    """User + system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def node_cert_paths(certs: str, port: int) -> tuple[str, str]:
    """(certificate, key) of the agent serving ``port`` under ``--node-certs``: the layout
    tests/bench/bench_pki.py writes."""
    d = f"{certs}/{port}"
    return f"{d}/node.crt", f"{d}/node.key"


class ResumingContext(ssl.SSLContext):
    """One agent's TLS client context that offers ``session`` (its last TLS session, None
    at first) at each new handshake: asyncio's ``create_connection`` has no session
    argument, so the context adds it where asyncio wraps the socket (``wrap_bio``)."""

    session: ssl.SSLSession | None = None

    def wrap_bio(  # type: ignore[override]
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return super().wrap_bio(
            incoming, outgoing, server_side, server_hostname, session or self.session
        )


def client_ssl_context(ca: str, cert: str, key: str) -> ResumingContext:
    """A TLS client context for one agent: ``ca`` (a file) as the only root, the agent's
    certificate chain and key, ALPN ``h2`` (gRPC's HTTP/2), host name checks on; it offers
    the agent's last session when it reconnects."""
    ctx = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the peer and its host name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cafile=ca)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    return ctx


def make_request(index: int, port_base: int, start_time_us: int) -> obrpc_pb2.LeaseRequest:
    req = obrpc_pb2.LeaseRequest(
        version=1,
        zone=ZONES[index % len(ZONES)],
        server=f"127.0.0.1:{port_base + index}",
        sql_port=SQL_PORT,
        build_version=BUILD_VERSION,
        start_service_time=start_time_us,
        current_server_time=start_time_us,
        server_status=0,
        cluster_id=CLUSTER_ID,
    )
    ri = req.resource_info
    ri.cpu_total = 16
    ri.cpu_assigned = 4
    ri.mem_total = 64 << 30
    ri.mem_assigned = 16 << 30
    ri.mem_in_use = 8 << 30
    ri.log_disk_total = 100 << 30
    ri.log_disk_assigned = 20 << 30
    ri.log_disk_in_use = 1 << 30
    ri.data_disk_total = 1 << 40
    ri.data_disk_assigned = 100 << 30
    ri.data_disk_in_use = 10 << 30
    return req


class Stats:
    """Counters of the current measurement window."""

    def __init__(self) -> None:
        self.measuring = False
        self.started = 0.0
        self.reset()

    def reset(self) -> None:
        self.responses = 0
        self.errors: Counter[str] = Counter()
        self.timeouts = 0
        self.stream_failures = 0
        self.late_sends = 0
        self.flow_blocked = 0
        self.latency_us: list[int] = []
        self.slow: list[tuple[float, int]] = []  # (wall-clock send time, latency us)
        self.send_lag_us: list[int] = []


class SimAgent:
    __slots__ = (
        "index",
        "req",
        "rng",
        "seq",
        "sent_at",
        "sent_wall",
        "timed_out",
        "last_ok_send",
        "answered",
        "paused",
        "idle",
        "conn",
        "sid",
        "next_t",
        "timer",
        "failures",
        "backoff_n",
        "target",
        "silent",
        "recovered_at",
    )

    def __init__(self, index: int, req: obrpc_pb2.LeaseRequest) -> None:
        self.index = index
        self.req = req
        self.rng = random.Random(index)
        self.seq = 0
        self.sent_at = 0.0  # perf_counter of the request in flight, 0.0 when none
        self.sent_wall = 0.0  # wall clock of the request in flight
        self.timed_out = False
        self.last_ok_send = 0.0  # wall clock of the latest accepted request
        self.answered = False
        self.paused = False
        self.idle = False  # paused and nothing in flight
        self.conn: H2Conn | None = None  # raw client only
        self.sid = 0
        self.next_t = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.failures = 0
        self.backoff_n = 0  # failed attempts since the last accepted lease (backoff exponent)
        self.target = ""  # raw client: the RS address of the group this agent leads
        self.silent = False  # paused without closing its stream (power loss)
        self.recovered_at = 0.0  # wall clock of the first accepted lease after ``mark``


#: The real agent's reconnect policy (obcommon/backoff.py: full jitter, 100 ms base, 2 s cap).
BACKOFF = BackoffPolicy()


def backoff_delay(attempt: int, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt`` (0 = the first retry after a success):
    uniform in [0, :meth:`BackoffPolicy.window_us`], as the real agent's lease loop waits
    (:class:`obcommon.backoff.Backoff`)."""
    return rng.uniform(0.0, BACKOFF.window_us(attempt) / 1e6)


class LoadGen:
    """What both clients share: agents, statistics, commands."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.loop = asyncio.get_running_loop()
        self.stats = Stats()
        self.stopping = False
        self.answered = 0
        now_us = int(time.time() * 1e6)
        self.agents = [
            SimAgent(i, make_request(i, args.port_base, now_us))
            for i in range(args.first, args.first + args.count)
        ]
        self.tls = bool(args.node_certs)
        per = 1 if self.tls else args.streams_per_channel  # TLS: one identity per connection
        self.n_conns = max(1, -(-args.count // per))
        # Filled by subclasses that load per-agent TLS material (seconds, CPU s, MiB).
        self.tls_load: dict[str, float] = {}
        self.connect_failures = 0
        # Every RS address (``--targets``, else ``--target``): tried in turn like
        # observer_agent/rs_list.py, a leader hint first.
        self.targets = [t for t in (args.targets or args.target).split(",") if t]
        self.marked = 0.0  # wall clock of the last ``mark`` command
        self.moves = 0  # connections moved to another RS (leader hint or next address)
        self.tls_resumed = 0  # raw client: TLS handshakes that resumed the agent's session
        self.tls_full = 0  # ... and full ones

    # --- shared per-response bookkeeping ----------------------------------------------------

    def on_response(self, a: SimAgent, resp: obrpc_pb2.LeaseResponse, t1: float) -> None:
        t0 = a.sent_at
        a.sent_at = 0.0
        a.failures = 0
        if not a.answered:
            a.answered = True
            self.answered += 1
        st = self.stats
        if resp.seq != a.seq:
            if st.measuring:
                st.errors["SEQ_MISMATCH"] += 1
        elif resp.error.code:
            if st.measuring:
                st.errors[resp.error.name or str(resp.error.code)] += 1
        else:
            a.last_ok_send = a.sent_wall
            a.backoff_n = 0
            if self.marked and not a.recovered_at:
                a.recovered_at = time.time()
            if resp.rs_epoch != a.req.rs_epoch:
                # The whole fencing token, as a real agent reports it.
                a.req.rs_epoch = resp.rs_epoch
                a.req.rs_incarnation = resp.rs_incarnation
        if st.measuring:
            st.responses += 1
            us = int((t1 - t0) * 1e6)
            st.latency_us.append(us)
            if us >= SLOW_US and len(st.slow) < MAX_SLOW:
                st.slow.append((a.sent_wall, us))

    def stamp(self, a: SimAgent) -> obrpc_pb2.LeaseRequest:
        """Next seq and current_server_time on the agent's one request object."""
        a.seq += 1
        req = a.req
        req.seq = a.seq
        w = time.time()
        req.current_server_time = int(w * 1e6)
        a.sent_wall = w
        a.timed_out = False
        return req

    def stream_failed(self, a: SimAgent, why: object) -> None:
        a.sent_at = 0.0
        a.failures += 1
        if self.stats.measuring:
            self.stats.stream_failures += 1
        if a.failures <= 2 or a.failures % 100 == 0:
            warn(f"agent {a.index}: stream failed ({a.failures}): {why!r}")

    # --- background ----------------------------------------------------------------------------

    async def sweeper(self) -> None:
        """Count requests unanswered after ``--timeout`` seconds (once each)."""
        perf = time.perf_counter
        timeout = self.args.timeout
        while not self.stopping:
            await asyncio.sleep(0.25)
            now = perf()
            for a in self.agents:
                t = a.sent_at
                if t and not a.timed_out and now - t > timeout:
                    a.timed_out = True
                    if self.stats.measuring:
                        self.stats.timeouts += 1

    async def wait_ready(self) -> None:
        deadline = (
            self.loop.time() + self.args.period + self.args.connect_spread + self.args.ready_timeout
        )
        while self.answered < len(self.agents) and self.loop.time() < deadline:
            await asyncio.sleep(0.1)
        emit(
            {
                "event": "ready",
                "agents": len(self.agents),
                "answered": self.answered,
                "channels": self.n_conns,
                "client": self.args.client,
                "tls": self.tls,
                "tls_load": self.tls_load,
                "connect_failures": self.connect_failures,
                "rss_mib": rss_mib(),
                "cpu_s": cpu_s(),
            }
        )

    def pause_agent(self, a: SimAgent) -> None:
        raise NotImplementedError

    async def pause(self, k: int, silent: bool = False) -> None:
        # The process's first k agents not paused yet: the parent knows their global indexes.
        batch = [a for a in self.agents if not a.paused][:k]
        for a in batch:
            a.paused = True
            a.silent = silent
            self.pause_agent(a)
        deadline = self.loop.time() + self.args.period + self.args.timeout + 3
        while not all(a.idle for a in batch) and self.loop.time() < deadline:
            await asyncio.sleep(0.01)
        emit(
            {
                "event": "paused",
                "count": len(batch),
                "idle": sum(1 for a in batch if a.idle),
                "first_index": batch[0].index if batch else -1,
                "indexes": [a.index for a in batch],
                "last_ok_send": max((a.last_ok_send for a in batch), default=0.0),
                "never_ok": sum(1 for a in batch if a.last_ok_send == 0.0),
                "recovered": sum(1 for a in batch if a.recovered_at),
            }
        )

    def command(self, line: str, quit_event: asyncio.Event) -> None:
        words = line.split()
        if not words or words[0] == "quit":
            quit_event.set()
        elif words[0] == "start":
            self.stats.reset()
            self.stats.started = time.perf_counter()
            self.stats.measuring = True
        elif words[0] == "stop":
            st = self.stats
            st.measuring = False
            emit(
                {
                    "event": "window",
                    "seconds": time.perf_counter() - st.started,
                    "responses": st.responses,
                    "errors": dict(st.errors),
                    "timeouts": st.timeouts,
                    "stream_failures": st.stream_failures,
                    "late_sends": st.late_sends,
                    "flow_blocked": st.flow_blocked,
                    "latency_us": st.latency_us,
                    "slow": st.slow,
                    "send_lag_us": st.send_lag_us,
                }
            )
        elif words[0] == "pause" and len(words) in (2, 3):
            asyncio.ensure_future(self.pause(int(words[1]), words[-1] == "silent"))
        elif words[0] == "mark":
            self.marked = time.time()
            for a in self.agents:
                a.recovered_at = 0.0
        elif words[0] == "recovery":
            live = [a for a in self.agents if not a.paused]
            emit(
                {
                    "event": "recovery",
                    "marked": self.marked,
                    "recovered_at": [a.recovered_at for a in live],
                    "last_ok_send": [a.last_ok_send for a in live],
                    "moves": self.moves,
                    "connect_failures": self.connect_failures,
                    "tls_resumed": self.tls_resumed,
                    "tls_full": self.tls_full,
                }
            )
        elif words[0] == "progress":
            live = [a for a in self.agents if not a.paused]
            emit(
                {
                    "event": "progress",
                    "recovered": sum(1 for a in live if a.recovered_at),
                    "live": len(live),
                }
            )
        elif words[0] == "period" and len(words) == 2:
            self.args.period = float(words[1])
            self.args.timeout = max(self.args.timeout, float(words[1]))
        else:
            warn(f"unknown command {line!r}")

    async def start_agents(self) -> list[asyncio.Future[None]]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def main(self) -> None:
        quit_event = asyncio.Event()
        loop = self.loop

        def read_stdin() -> None:
            with contextlib.suppress(Exception):
                for line in sys.stdin:
                    loop.call_soon_threadsafe(self.command, line, quit_event)
            loop.call_soon_threadsafe(quit_event.set)

        threading.Thread(target=read_stdin, daemon=True).start()
        # The TLS material is loaded (in __init__): the parent times "ready" from here.
        emit({"event": "loaded", "tls_load": self.tls_load, "rss_mib": rss_mib()})
        tasks = await self.start_agents()
        tasks.append(asyncio.ensure_future(self.sweeper()))
        tasks.append(asyncio.ensure_future(self.wait_ready()))
        await quit_event.wait()
        self.stopping = True
        for t in tasks:
            t.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 3.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.close(), 3.0)


# --- grpc.aio client ---------------------------------------------------------------------------


class GrpcLoadGen(LoadGen):
    """One ``grpc.aio`` stream call and one coroutine per agent."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        # A local subchannel pool gives every channel its own TCP connection.
        options = [
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.enable_http_proxy", 0),
            ("grpc.keepalive_time_ms", 60_000),
        ]
        if self.tls:
            self.channels = self.secure_channels(options)
        else:
            self.channels = [
                grpc.aio.insecure_channel(args.target, options=options) for _ in range(self.n_conns)
            ]
        self.stubs = [obrpc_pb2_grpc.RootServiceStub(ch) for ch in self.channels]

    def secure_channels(self, options: list[tuple[str, Any]]) -> list[grpc.aio.Channel]:
        """One ``grpc.aio.secure_channel`` per agent with its own node certificate."""
        t0, c0, m0 = time.perf_counter(), cpu_s(), rss_mib()
        with open(f"{self.args.node_certs}/ca.crt", "rb") as f:
            ca = f.read()
        channels = []
        for a in self.agents:
            cert, key = node_cert_paths(self.args.node_certs, self.args.port_base + a.index)
            with open(cert, "rb") as fc, open(key, "rb") as fk:
                creds = grpc.ssl_channel_credentials(ca, fk.read(), fc.read())
            # Each agent's own cache, as each real agent process has (TransportSecurity).
            cache = ("grpc.ssl_session_cache", session_cache.ssl_session_cache_lru(4))
            channels.append(
                grpc.aio.secure_channel(self.args.target, creds, options=[*options, cache])
            )
        self.tls_load = {
            "seconds": time.perf_counter() - t0,
            "cpu_s": cpu_s() - c0,
            "rss_mib_added": rss_mib() - m0,
            "contexts": len(channels),
        }
        return channels

    def pause_agent(self, a: SimAgent) -> None:
        pass  # run_agent sees the flag after its current exchange

    async def run_agent(self, a: SimAgent, stub: obrpc_pb2_grpc.RootServiceStub) -> None:
        loop = self.loop
        period = self.args.period
        await asyncio.sleep(a.rng.uniform(0.0, max(period, self.args.connect_spread)))
        stats = self.stats
        perf = time.perf_counter
        eof = grpc.aio.EOF
        while not self.stopping:
            call = stub.LeaseStream()
            next_t = loop.time()
            try:
                while not self.stopping and not a.paused:
                    req = self.stamp(a)
                    a.sent_at = perf()
                    await call.write(req)
                    resp = await call.read()
                    if resp is eof:
                        raise EOFError("the server closed the lease stream")
                    self.on_response(a, resp, perf())
                    next_t += period
                    now = loop.time()
                    delay = next_t - now
                    if delay < 0:
                        if stats.measuring:
                            stats.late_sends += 1
                        next_t = now
                        delay = 0.0
                    await asyncio.sleep(delay)
                    if stats.measuring:
                        stats.send_lag_us.append(int((loop.time() - next_t) * 1e6))
            except (grpc.aio.AioRpcError, EOFError, asyncio.InvalidStateError) as e:
                self.stream_failed(a, e)
            finally:
                call.cancel()
            if a.paused:
                a.idle = True
                return
            if not self.stopping:
                # Reconnect like an agent: after the backoff (bounded by stopping).
                await asyncio.sleep(backoff_delay(a.backoff_n, a.rng))
                a.backoff_n += 1

    async def start_agents(self) -> list[asyncio.Future[None]]:
        n = len(self.stubs)
        return [
            asyncio.ensure_future(self.run_agent(a, self.stubs[j % n]))
            for j, a in enumerate(self.agents)
        ]

    async def close(self) -> None:
        for ch in self.channels:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ch.close(grace=None), 1.0)


# --- raw HTTP/2 client -------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
MAX_WINDOW = 2**31 - 1
FRAME_HEADER = struct.Struct(">BHBBI")  # 24-bit length as (high byte, low 16 bits)
DATA_HEADER = struct.Struct(">BHBBIBI")  # frame header + gRPC message prefix


def frame(ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
    n = len(payload)
    return FRAME_HEADER.pack(n >> 16, n & 0xFFFF, ftype, flags, sid) + payload


def hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([first | value])
    out = [first | top]
    value -= top
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_str(s: str) -> bytes:
    b = s.encode()
    return hpack_int(len(b), 7, 0) + b


def request_headers(authority: str, tls: bool = False) -> bytes:
    """HPACK block of a LeaseStream call: static-table entries and literals without
    indexing, so no dynamic table is ever involved. ``tls``: ``:scheme https``."""
    return b"".join(
        [
            b"\x83",  # :method POST
            b"\x87" if tls else b"\x86",  # :scheme https / http
            hpack_int(4, 4, 0) + hpack_str(LEASE_PATH),  # :path
            hpack_int(1, 4, 0) + hpack_str(authority),  # :authority
            hpack_int(31, 4, 0) + hpack_str("application/grpc"),  # content-type
            b"\x00" + hpack_str("te") + hpack_str("trailers"),
            hpack_int(58, 4, 0) + hpack_str("hbbench-raw/1"),  # user-agent
        ]
    )


class H2Conn(asyncio.Protocol):
    """One HTTP/2 connection carrying the lease streams of a group of agents."""

    def __init__(self, gen: RawLoadGen, agents: list[SimAgent]) -> None:
        self.gen = gen
        self.agents = agents
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.partial: dict[int, bytearray] = {}
        self.ready = False
        self.closed = False
        self.waiting: list[SimAgent] = []
        self.streams: dict[int, SimAgent] = {}
        self.next_sid = 1
        self.out = bytearray()
        self.flush_scheduled = False
        self.send_window = 65535
        self.initial_window = 65535
        self.stream_windows: dict[int, int] = {}
        self.blocked: deque[tuple[int, bytes, int]] = deque()
        self.recv_unacked = 0
        self.max_streams = 2**31
        # Every header block the server sends goes through one HPACK decoder (its dynamic
        # table is the connection's), so that a stream the server ends is reported with
        # its grpc-status and message.
        self.hpack = hpack.Decoder()
        # Set when we close the connection on purpose to move to another RS: the delay
        # before connecting there (None: the connection was lost).
        self.reconnect_delay: float | None = None
        # TLS: the agent's session is taken once the server's first bytes arrived (a TLS 1.3
        # server sends its session tickets after the handshake).
        self.session_noted = not gen.tls

    # writing
    def write(self, data: bytes) -> None:
        self.out += data
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.gen.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        if self.out and self.transport is not None and not self.closed:
            self.transport.write(bytes(self.out))
        self.out.clear()

    def open_stream(self, a: SimAgent) -> None:
        sid = self.next_sid
        self.next_sid += 2
        a.sid = sid
        self.streams[sid] = a
        self.stream_windows[sid] = self.initial_window
        if len(self.streams) > self.max_streams:
            warn(f"more streams than the server's MAX_CONCURRENT_STREAMS {self.max_streams}")
        self.write(frame(HEADERS, END_HEADERS, sid, self.gen.header_block))

    def close_stream(self, a: SimAgent) -> None:
        sid = a.sid
        if sid and self.streams.pop(sid, None) is not None:
            self.stream_windows.pop(sid, None)
            self.partial.pop(sid, None)
            self.write(frame(RST_STREAM, 0, sid, b"\x00\x00\x00\x08"))  # CANCEL
        a.sid = 0

    def send_data(self, sid: int, data: bytes, n: int) -> None:
        if not self.blocked and self.send_window >= n and self.stream_windows.get(sid, 0) >= n:
            self.send_window -= n
            self.stream_windows[sid] -= n
            self.write(data)
        else:
            if self.gen.stats.measuring:
                self.gen.stats.flow_blocked += 1
            self.blocked.append((sid, data, n))

    def drain_blocked(self) -> None:
        while self.blocked:
            sid, data, n = self.blocked[0]
            if sid not in self.streams:
                self.blocked.popleft()
                continue
            if self.send_window < n or self.stream_windows[sid] < n:
                return
            self.blocked.popleft()
            self.send_window -= n
            self.stream_windows[sid] -= n
            self.write(data)

    # protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        settings = struct.pack(">HIHI", 0x2, 0, 0x4, MAX_WINDOW)  # no push, big windows
        self.write(
            PREFACE
            + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.gen.connection_lost(self, exc)

    def data_received(self, data: bytes) -> None:
        if not self.session_noted:
            self.session_noted = True
            self.gen.note_session(self)
        buf = self.buf
        buf += data
        t1 = time.perf_counter()
        off = 0
        size = len(buf)
        while size - off >= 9:
            n = (buf[off] << 16) | (buf[off + 1] << 8) | buf[off + 2]
            if size - off < 9 + n:
                break
            ftype = buf[off + 3]
            flags = buf[off + 4]
            sid = int.from_bytes(buf[off + 5 : off + 9], "big") & 0x7FFFFFFF
            start = off + 9
            off = start + n
            if ftype == DATA:
                self.recv_unacked += n
                a = self.streams.get(sid)
                if a is not None:
                    if flags & PADDED:
                        payload = bytes(buf[start + 1 : off - buf[start]])
                    else:
                        payload = bytes(buf[start:off])
                    self.on_data(sid, a, payload, t1)
                    if flags & END_STREAM:
                        self.end_stream(sid, "END_STREAM on DATA")
            elif ftype == HEADERS:
                headers = self.decode_headers(flags, bytes(buf[start:off]))
                if flags & END_STREAM:  # trailers: the call ended
                    status = headers.get("grpc-status", "?")
                    message = headers.get("grpc-message", "")
                    self.end_stream(sid, f"trailers grpc-status {status} {message}".strip())
            elif ftype == RST_STREAM:
                code = int.from_bytes(buf[start:off], "big")
                self.end_stream(sid, f"RST_STREAM {code}")
            elif ftype == SETTINGS:
                if not flags & ACK:
                    self.on_settings(bytes(buf[start:off]))
            elif ftype == PING:
                if not flags & ACK:
                    self.write(frame(PING, ACK, 0, bytes(buf[start:off])))
            elif ftype == WINDOW_UPDATE:
                inc = int.from_bytes(buf[start : start + 4], "big") & 0x7FFFFFFF
                if sid == 0:
                    self.send_window += inc
                elif sid in self.stream_windows:
                    self.stream_windows[sid] += inc
                if self.blocked:
                    self.drain_blocked()
            elif ftype == GOAWAY:
                warn(f"GOAWAY from the server: {bytes(buf[start:off])[:100]!r}")
                if self.transport is not None:
                    self.transport.close()
        del buf[:off]
        if self.recv_unacked >= 1 << 30:
            self.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.recv_unacked)))
            self.recv_unacked = 0

    def on_settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - 5, 6):
            ident, value = struct.unpack_from(">HI", payload, i)
            if ident == 0x3:
                self.max_streams = value
            elif ident == 0x4:
                delta = value - self.initial_window
                self.initial_window = value
                for sid in self.stream_windows:
                    self.stream_windows[sid] += delta
        self.write(frame(SETTINGS, ACK, 0, b""))
        if not self.ready:
            self.ready = True
            waiting, self.waiting = self.waiting, []
            for a in waiting:
                self.gen.begin(a)
        elif self.blocked:
            self.drain_blocked()

    def on_data(self, sid: int, a: SimAgent, payload: bytes, t1: float) -> None:
        part = self.partial.get(sid)
        if part is not None:
            part += payload
            data: bytes | bytearray = part
        else:
            data = payload
        off = 0
        size = len(data)
        parse = obrpc_pb2.LeaseResponse.FromString
        while size - off >= 5:
            mlen = int.from_bytes(data[off + 1 : off + 5], "big")
            if size - off < 5 + mlen:
                break
            resp = parse(bytes(data[off + 5 : off + 5 + mlen]))
            off += 5 + mlen
            self.gen.on_raw_response(a, resp, t1)
        if off < size:
            self.partial[sid] = bytearray(data[off:])
        elif part is not None:
            del self.partial[sid]

    def decode_headers(self, flags: int, block: bytes) -> dict[str, str]:
        """The fields of one HEADERS frame's block (padding and priority stripped); {} when
        it cannot be decoded (a CONTINUATION would be needed: gRPC's blocks fit one frame)."""
        if flags & PADDED:
            block = block[1 : len(block) - block[0]]
        if flags & PRIORITY:
            block = block[5:]
        if not flags & END_HEADERS:
            return {}
        try:
            return {str(k): str(v) for k, v in self.hpack.decode(block)}
        except hpack.HPACKError:
            return {}

    def end_stream(self, sid: int, why: str) -> None:
        a = self.streams.pop(sid, None)
        self.stream_windows.pop(sid, None)
        self.partial.pop(sid, None)
        if a is not None:
            a.sid = 0
            self.gen.stream_ended(a, why)


class RawLoadGen(LoadGen):
    """Agents driven by timers over a few raw HTTP/2 connections."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.host, _, port = args.target.rpartition(":")
        self.port = int(port)
        self.header_block = request_headers(args.target, self.tls)
        self.conns: list[H2Conn] = []
        self.lost = 0  # connections lost (not moved on purpose)
        self.contexts: dict[int, ResumingContext] = {}  # agent index -> its TLS context
        if self.tls:
            self.load_contexts()

    def load_contexts(self) -> None:
        """One ``SSLContext`` per agent (its own node certificate), timed and sized."""
        t0, c0, m0 = time.perf_counter(), cpu_s(), rss_mib()
        ca = f"{self.args.node_certs}/ca.crt"
        for a in self.agents:
            cert, key = node_cert_paths(self.args.node_certs, self.args.port_base + a.index)
            self.contexts[a.index] = client_ssl_context(ca, cert, key)
        self.tls_load = {
            "seconds": time.perf_counter() - t0,
            "cpu_s": cpu_s() - c0,
            "rss_mib_added": rss_mib() - m0,
            "contexts": len(self.contexts),
        }

    async def connect(self, agents: list[SimAgent], delay: float) -> None:
        """Open the connection of ``agents`` (one in TLS) to their lead's target RS after
        ``delay`` seconds, retrying with :func:`backoff_delay` and moving to the next RS
        address after each failure."""
        if delay:
            await asyncio.sleep(delay)
        lead = agents[0]
        if not lead.target:
            lead.target = self.targets[lead.index % len(self.targets)]
        for attempt in range(1, 100_000):
            if self.stopping:
                return
            host, _, port = lead.target.rpartition(":")
            conn = H2Conn(self, agents)
            try:
                if self.tls:
                    # TLS: one agent per connection, presenting its own certificate.
                    await self.loop.create_connection(
                        lambda c=conn: c,  # type: ignore[misc]
                        host,
                        int(port),
                        ssl=self.contexts[lead.index],
                        server_hostname=host,
                        ssl_handshake_timeout=30.0,
                    )
                else:
                    await self.loop.create_connection(lambda c=conn: c, host, int(port))  # type: ignore[misc]
            except (OSError, ssl.SSLError, TimeoutError) as e:
                self.connect_failures += 1
                if attempt <= 2 or attempt % 50 == 0:
                    warn(f"connect to {lead.target} failed ({attempt}): {e!r}")
                self.next_target(lead)
                await asyncio.sleep(backoff_delay(lead.backoff_n, lead.rng))
                lead.backoff_n += 1
                continue
            self.conns.append(conn)
            for a in agents:
                a.conn = conn
                if a.timer is None and not a.paused:
                    # The first time at a random offset within the period; after a
                    # reconnect at once (the backoff already spread the agents).
                    first = not a.answered
                    a.timer = self.loop.call_later(
                        a.rng.uniform(0.0, self.args.period) if first else 0.0, self.begin, a
                    )
            return

    def note_session(self, conn: H2Conn) -> None:
        """Count the connection's handshake as resumed or full and keep its session for the
        lead agent's next connect."""
        ssl_obj = conn.transport.get_extra_info("ssl_object") if conn.transport else None
        if ssl_obj is None:
            return
        if ssl_obj.session_reused:
            self.tls_resumed += 1
        else:
            self.tls_full += 1
        self.contexts[conn.agents[0].index].session = ssl_obj.session

    def next_target(self, lead: SimAgent, hint: str = "") -> None:
        """Point ``lead``'s group at ``hint`` (a leader hint), else at the next RS address."""
        if len(self.targets) < 2 and not hint:
            return
        if hint:
            lead.target = hint
        else:
            i = self.targets.index(lead.target) if lead.target in self.targets else -1
            lead.target = self.targets[(i + 1) % len(self.targets)]
        self.moves += 1

    def begin(self, a: SimAgent) -> None:
        """Open the agent's stream and send its first request."""
        a.timer = None
        conn = a.conn
        if self.stopping or a.paused or conn is None or conn.closed:
            return
        if not conn.ready:
            conn.waiting.append(a)
            return
        conn.open_stream(a)
        a.next_t = self.loop.time()
        self.send(a)

    def tick(self, a: SimAgent) -> None:
        a.timer = None
        if self.stats.measuring:
            self.stats.send_lag_us.append(int((self.loop.time() - a.next_t) * 1e6))
        self.send(a)

    def send(self, a: SimAgent) -> None:
        conn = a.conn
        if self.stopping or a.paused or conn is None or conn.closed or not a.sid:
            return
        msg = self.stamp(a).SerializeToString()
        mlen = len(msg)
        n = mlen + 5
        data = DATA_HEADER.pack(n >> 16, n & 0xFFFF, DATA, 0, a.sid, 0, mlen) + msg
        a.sent_at = time.perf_counter()
        conn.send_data(a.sid, data, n)

    def on_raw_response(self, a: SimAgent, resp: obrpc_pb2.LeaseResponse, t1: float) -> None:
        if not a.sent_at:
            return  # an answer after the stream was given up
        self.on_response(a, resp, t1)
        if a.paused:
            self.finish_pause(a)
            return
        conn = a.conn
        if resp.error.code and len(self.targets) > 1 and conn is not None:
            # A refusal from an RS that is not the leader: follow its hint at once, else
            # try the next address after the backoff (observer_agent/lease.py).
            lead = conn.agents[0]
            hint = resp.leader_hint.strip()
            hint = hint if hint and hint != lead.target else ""
            self.next_target(lead, hint)
            # A first hint is followed at once; hints in a row (two RS pointing at each
            # other during an election) back off like any other refusal.
            now = hint and lead.backoff_n == 0
            conn.reconnect_delay = 0.0 if now else backoff_delay(lead.backoff_n, lead.rng)
            lead.backoff_n += 1
            if conn.transport is not None:
                # abort, not close: a TLS close waits for the peer's close_notify (up to
                # 30 s) before connection_lost, which would hold the agent that long.
                conn.transport.abort()
            return
        loop = self.loop
        a.next_t += self.args.period
        delay = a.next_t - loop.time()
        if delay <= 0:
            if self.stats.measuring:
                self.stats.late_sends += 1
            a.next_t = loop.time()
            self.send(a)
        else:
            a.timer = loop.call_at(a.next_t, self.tick, a)

    def stream_ended(self, a: SimAgent, why: str) -> None:
        self.stream_failed(a, why)
        if a.timer is not None:
            a.timer.cancel()
            a.timer = None
        if a.paused:
            a.idle = True
        elif not self.stopping:
            a.timer = self.loop.call_later(backoff_delay(a.backoff_n, a.rng), self.begin, a)
            a.backoff_n += 1

    def connection_lost(self, conn: H2Conn, exc: Exception | None) -> None:
        if conn in self.conns:
            self.conns.remove(conn)
        if self.stopping:
            return
        for a in conn.agents:
            if a.timer is not None:
                a.timer.cancel()
                a.timer = None
            if a.conn is conn:
                if a.sid or a.sent_at:
                    self.stream_failed(a, exc or "connection closed")
                a.sid = 0
                a.conn = None
                if a.paused:
                    a.idle = True
        lead = conn.agents[0]
        delay = conn.reconnect_delay
        if delay is None:
            delay = backoff_delay(lead.backoff_n, lead.rng)
            lead.backoff_n += 1
            self.lost += 1
            if self.lost <= 3 or self.lost % 1000 == 0:
                warn(f"connection lost ({exc!r}, {self.lost} so far); reconnecting")
        if not all(a.paused for a in conn.agents):
            asyncio.ensure_future(self.connect(conn.agents, delay))

    def finish_pause(self, a: SimAgent) -> None:
        if a.conn is not None and not a.silent:
            a.conn.close_stream(a)
        a.idle = True

    def pause_agent(self, a: SimAgent) -> None:
        if a.timer is not None:
            a.timer.cancel()
            a.timer = None
        if not a.sent_at:
            self.finish_pause(a)
        # else: on_raw_response finishes it

    async def start_agents(self) -> list[asyncio.Future[None]]:
        n = self.n_conns
        groups = [self.agents[i::n] for i in range(n)]
        spread = self.args.connect_spread
        rng = random.Random(self.args.first)
        return [asyncio.ensure_future(self.connect(g, rng.uniform(0.0, spread))) for g in groups]

    async def close(self) -> None:
        for conn in list(self.conns):
            if conn.transport is not None:
                conn.flush()
                conn.transport.close()


def main() -> int:
    p = argparse.ArgumentParser(description="simulate many observer agents' lease streams")
    p.add_argument("--target", required=True, help="host:port of the RS (or the echo server)")
    p.add_argument(
        "--targets",
        default="",
        help="raw client: comma-separated RS addresses, tried in turn, leader hints followed",
    )
    p.add_argument("--first", type=int, default=0, help="global index of the first agent")
    p.add_argument("--count", type=int, required=True, help="agents in this process")
    p.add_argument("--port-base", type=int, default=20000)
    p.add_argument("--period", type=float, default=2.0, help="heartbeat period (s)")
    p.add_argument("--timeout", type=float, default=2.0, help="response timeout (s)")
    p.add_argument("--streams-per-channel", type=int, default=100)
    p.add_argument("--ready-timeout", type=float, default=30.0)
    p.add_argument("--client", choices=["raw", "grpc"], default="raw")
    p.add_argument(
        "--node-certs",
        default="",
        help="mutual TLS: DIR/ca.crt and DIR/<port>/node.crt|key per agent (one connection each)",
    )
    p.add_argument(
        "--connect-spread",
        type=float,
        default=0.0,
        help="open the connections at random offsets over this many seconds",
    )
    args = p.parse_args()

    async def run() -> None:
        # Built inside the loop: grpc.aio channels bind to the running loop.
        gen = RawLoadGen(args) if args.client == "raw" else GrpcLoadGen(args)
        await gen.main()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
