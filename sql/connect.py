"""Reaching a RootService over a connection that provably works, retrying a failed connect or
TLS handshake with backoff until the caller's deadline.

Why: a fresh clone's ``make test`` failed on ``Handshake read failed (Endpoint closing)``
while the RS was alive: one TLS handshake failed on a loaded machine and the client, whose
deadline was 60 s, gave up at once. Every client of the RS in the project (``obadmin``, its
shell and ``--wait-job``, the test helpers, the demos and benches) goes through
:func:`sql.client.execute` or :func:`connect`, which now retry.

**The retry rule.** A request is re-sent only when it provably did not reach the RS, or when
re-running it cannot change anything:

1. Each attempt opens a new channel (a subchannel of its own: a failed handshake must not
   leave gRPC's hidden reconnect timer armed for the next attempt, see
   :mod:`obcommon.backoff`) and first sends the standard health ``Check`` (a read: it may
   be repeated). Only its answer - any answer, ``UNIMPLEMENTED`` included - proves that TCP,
   the TLS handshake and the RS's verdict on our certificate (given after the handshake
   in TLS 1.3) all succeeded. ``UNAVAILABLE`` or ``DEADLINE_EXCEEDED`` on it means nothing
   of the statement was sent: the attempt failed before sending and is retried.
2. The statement then goes over that proven connection, once, with ``wait_for_ready``
   off (gRPC does not queue it for a later connection). If that call still fails with
   ``UNAVAILABLE`` the connection broke after the statement may have been sent: a
   statement that only reads (:func:`is_read_only`) is retried like a failed connect, any
   other is answered with an error saying it may have run, and is never re-sent.

Between rounds over every address, the client waits a full-jitter backoff
(:class:`obcommon.backoff.BackoffPolicy`: :data:`RETRY_POLICY`, 50 ms growing to 1 s), as
the agents do, so a restarted RS is not hit by every client at once. When the deadline
passes, :class:`RsUnreachableError` names every address tried and what each said last.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from obcommon.backoff import Backoff, BackoffPolicy
from obcommon.clock import Clock, SystemClock
from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity

#: The wait between rounds of attempts: 50 ms growing to 1 s, full jitter. A handshake that
#: failed on a loaded machine is retried within a fraction of a second; an RS that is down
#: for its restart (seconds) is asked about once a second.
RETRY_POLICY = BackoffPolicy(base_us=50_000, cap_us=1_000_000)

#: The longest one attempt to connect may take, in seconds (less when the deadline is
#: nearer): a hung RS (SIGSTOPped, its TCP accepted by the kernel) must not consume the
#: whole deadline when another address of the list answers.
CONNECT_TIMEOUT_S = 10.0

#: The health service the probe asks: the RS's ``liveness`` (SERVING while the process
#: lives). Any answer proves the connection.
PROBE_SERVICE = "liveness"

_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    # Our own backoff decides when to try again, not a subchannel shared with an earlier
    # channel to the same address (obcommon/backoff.py explains the trap).
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.enable_retries", 0),
]

_READ_ONLY = re.compile(
    r"\s*(?:(?:/\*.*?\*/|--[^\n]*\n|#[^\n]*\n)\s*)*(SELECT|SHOW|DESC|DESCRIBE|EXPLAIN|HELP)\b",
    re.IGNORECASE | re.DOTALL,
)


def is_read_only(statement: str) -> bool:
    """True when ``statement`` only reads (its first keyword, after comments, is SELECT,
    SHOW, DESC, DESCRIBE, EXPLAIN or HELP), so running it twice changes nothing and it may be
    re-sent after a connection broke under it. Every other statement counts as a write."""
    return _READ_ONLY.match(statement) is not None


class RsUnreachableError(Exception):
    """No RootService of the list could be reached before the deadline.

    ``addrs``: every address tried, in the order first tried; ``failures``: address -> the
    last explanation (gRPC's) of its failure; ``attempts``: how many connections were tried.
    ``addr`` and ``detail`` are the last address tried and its explanation."""

    def __init__(self, addrs: Sequence[str], failures: dict[str, str], attempts: int = 1) -> None:
        """Record the addresses tried and why each failed; the message names them all."""
        self.addrs = list(addrs) or ["(none)"]
        self.failures = dict(failures)
        self.attempts = attempts
        self.addr = next(reversed(self.failures), self.addrs[-1])
        self.detail = self.failures.get(self.addr, "no address given")
        super().__init__(f"can't connect to RootService on {self.addr!r}: {self._explained()}")

    def _explained(self) -> str:
        others = [f"{a!r}: {self.failures[a]}" for a in self.addrs if a != self.addr]
        also = f"; also tried {'; '.join(others)}" if others else ""
        return f"{self.detail}{also}; {self.attempts} attempt(s)"

    def to_sql_text(self) -> str:
        """The line obadmin prints, shaped like the mysql client's ``ERROR 2003 (HY000):
        Can't connect to MySQL server on 'host:port' (111)``, naming every address tried."""
        return f"ERROR 2003 (HY000): Can't connect to RootService on '{self.addr}' ({self._explained()})"


class Unreached(Exception):
    """One attempt that provably sent nothing the RS could act on (or only a read):
    ``detail`` says why."""

    def __init__(self, detail: str) -> None:
        """``detail``: gRPC's explanation, one line."""
        super().__init__(detail)
        self.detail = " ".join(detail.split()) or "unavailable"


def _detail(e: grpc.RpcError) -> str:
    if isinstance(e, grpc.Call):
        return f"{e.code().name}: {e.details() or ''}".strip()
    return str(e)


def open_proven(addr: str, security: TransportSecurity | None, timeout_s: float) -> grpc.Channel:
    """A new channel to ``addr`` (plaintext when ``security`` is None) over which the health
    probe was answered within ``timeout_s`` seconds, so the connection and the TLS handshake
    work. The caller closes it. Raises :class:`Unreached` otherwise (the channel closed)."""
    sec = security or TransportSecurity.insecure_mode(Role.CLIENT)
    channel = sec.channel(addr, options=_CHANNEL_OPTIONS)
    try:
        health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=PROBE_SERVICE), timeout=timeout_s
        )
    except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else None
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, None):
            channel.close()
            raise Unreached(_detail(e)) from e
        # Any other status (UNIMPLEMENTED, NOT_FOUND, PERMISSION_DENIED): the server answered.
    return channel


class Attempts:
    """The retry state of one call across the address list: the deadline (``timeout_s``
    from now on ``clock``'s monotonic time), the backoff between rounds (``policy``,
    ``rng``; ``sleep`` waits, injected for tests), the addresses tried and their failures."""

    def __init__(
        self,
        timeout_s: float,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        policy: BackoffPolicy = RETRY_POLICY,
        rng: random.Random | None = None,
    ) -> None:
        """Start the deadline now."""
        self.clock = clock or SystemClock()
        self.deadline_us = self.clock.monotonic_us() + int(timeout_s * 1_000_000)
        self.sleep = sleep
        self.backoff = Backoff(policy, rng or random.Random())
        self.tried: list[str] = []
        self.failures: dict[str, str] = {}
        self.count = 0

    def remaining_s(self) -> float:
        """Seconds left before the deadline (<= 0 when it passed)."""
        return (self.deadline_us - self.clock.monotonic_us()) / 1_000_000

    def connect(self, addr: str, security: TransportSecurity | None) -> grpc.Channel | None:
        """One attempt on ``addr`` (:func:`open_proven`, at most :data:`CONNECT_TIMEOUT_S`);
        None when it failed (recorded) or no time is left."""
        left = self.remaining_s()
        if left <= 0:
            return None
        self.count += 1
        if addr not in self.tried:
            self.tried.append(addr)
        try:
            return open_proven(addr, security, min(left, CONNECT_TIMEOUT_S))
        except Unreached as e:
            self.failed(addr, e.detail)
            return None

    def failed(self, addr: str, detail: str) -> None:
        """Record that ``addr`` could not be used this round, and why."""
        self.failures.pop(addr, None)  # keep the last failure last
        self.failures[addr] = detail

    def pause(self) -> bool:
        """After a round where nothing answered: wait the next backoff (never past the
        deadline); False when the deadline has passed (give up)."""
        left = self.remaining_s()
        if left <= 0:
            return False
        self.sleep(min(self.backoff.next_delay_us() / 1_000_000, left))
        return self.remaining_s() > 0

    def unreachable(self, addrs: Sequence[str]) -> RsUnreachableError:
        """The error to raise when giving up: every address tried (or given)."""
        tried = self.tried or list(addrs)
        failures = self.failures or {a: "no time left to try" for a in tried}
        return RsUnreachableError(tried, failures, self.count)


def connect(
    rs_addrs: Sequence[str],
    timeout_s: float,
    security: TransportSecurity | None,
    **retry: Any,
) -> tuple[str, grpc.Channel]:
    """The first of ``rs_addrs`` (``"host:port"``) whose connection is proven
    (:func:`open_proven`), trying them in order, round after round with backoff, until
    ``timeout_s`` seconds pass. Returns ``(addr, channel)``; the caller closes the channel.
    ``retry`` goes to :class:`Attempts` (``clock``, ``sleep``, ``policy``, ``rng``).

    For calls that only read (metrics, health): anything sent over the channel may be sent
    again. Raises :class:`RsUnreachableError` naming every address tried."""
    addrs = [a.strip() for a in rs_addrs if a.strip()]
    attempts = Attempts(timeout_s, **retry)
    while addrs:
        for addr in addrs:
            channel = attempts.connect(addr, security)
            if channel is not None:
                return addr, channel
        if not attempts.pause():
            break
    raise attempts.unreachable(addrs)
