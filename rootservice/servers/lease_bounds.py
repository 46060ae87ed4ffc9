"""Range checks of every field of a ``LeaseRequest`` before the RS uses it.

A lease request comes from outside the RS: before this check 26 of 43 extreme values were
accepted (infinite CPU, 2^63-1 sizes, year-292277 times, NUL bytes, 10,000 fake replicas)
and on PostgreSQL some then made every write of the persistence queue fail.
:func:`check_lease_request` refuses the first field out of its bounds with
``OB_INVALID_ARGUMENT`` naming the field, the value (truncated) and the bound, before
:meth:`rootservice.servers.heartbeat.HeartbeatIntake.receive_hb` changes anything.

The checks come in two groups (the heartbeat path runs 5,000 times a
second in ``make bench``):

- :func:`_check_stable`: the fields of :data:`STABLE_FIELDS`, which an agent resends unchanged
  from one heartbeat to the next (its zone, address, versions, identity, resources). On a
  lease stream :class:`StreamChecks` runs them on the stream's first request and again only
  when one of these fields differs from the last request that passed them: the cheap test
  is one tuple comparison.
- :func:`_check_each`: the fields that change with every heartbeat or are judged against the
  RS's clock (:data:`EACH_FIELDS`): run for every request.

A new check is one line in the group of its field; a new field of ``LeaseRequest`` goes in
one of the two tuples (a unit test fails while a field is in neither). Times are microseconds
since the epoch; sizes bytes; CPU cores.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any

from obcommon.bounds import MAX_TERM, quote
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.servers.status import DATA_DISK_ERROR_BIT, STOPPING_BIT

__all__ = [
    "EACH_FIELDS",
    "KNOWN_STATUS_BITS",
    "MAX_ADDR_CHARS",
    "MAX_BUILD_ERROR_CHARS",
    "MAX_BUILD_VERSION_CHARS",
    "MAX_CLOCK_SKEW_US",
    "MAX_CLUSTER_ID_CHARS",
    "MAX_CPU",
    "MAX_FUTURE_US",
    "MAX_ID",
    "MAX_LEASE_VERSION",
    "MAX_MEMBERS",
    "MAX_REPLICAS",
    "MAX_SIZE_BYTES",
    "MAX_ZONE_CHARS",
    "MIN_LEASE_VERSION",
    "MIN_TIME_US",
    "STABLE_FIELDS",
    "StreamChecks",
    "check_lease_request",
]

MIN_TIME_US = 946_684_800_000_000
"""2000-01-01T00:00:00Z: no agent's clock, start or log entry is older."""
MAX_FUTURE_US = 86_400_000_000
"""A replica's ``log_end_ts`` may be at most one day ahead of the RS's clock."""
MAX_CLOCK_SKEW_US = 30_000_000
"""How far (either way) an agent's ``current_server_time`` may be from the RS's clock, and
``start_service_time`` ahead of it: 30 s. OceanBase's RS compares the
same field with its own clock, ``server_behind_time = now - (current_server_time +
round_trip_time / 2)``, and logs "clock between rs and server not sync" when it exceeds
``rpc_timeout`` (2 s by default; ``ObServerManager::receive_hb`` in oceanbase/oceanbase
src/rootserver/ob_server_manager.cpp); its deployment guide asks for clocks within 2 s
(100 ms before 4.1). A synchronised cluster is therefore never near 30 s. The bound must
also cover how long a heartbeat may wait before the RS reads it, which the field cannot
tell from skew (the agent sends no round-trip time): an agent waits up to
``MAX_LATE_ANSWER_TIMEOUTS`` x ``rpc_timeout`` = 8 s by default for a late answer
(observer_agent/lease.py), and a refused heartbeat makes it back off (up
to 60 s), so refusing a merely late one would cost an overloaded RS its live servers. 30 s
is 15 OceanBase tolerances and over three times the longest wait; a clock a day off, or
an hour (a time zone mistake), is refused."""
MIN_LEASE_VERSION = 1
MAX_LEASE_VERSION = 1
"""The lease protocol versions this RS speaks: 1, what every agent sends
(``observer_agent.lease.LEASE_REQUEST_VERSION``). OceanBase's ``ObLeaseRequest::is_valid``
requires ``version_ > 0`` and its agents send ``LEASE_VERSION`` = 1; a version this RS does
not know is refused rather than read as if it were 1."""
MAX_SIZE_BYTES = 1 << 50
"""1 PiB: the largest memory, disk or replica size one server reports."""
MAX_CPU = 100_000.0
"""The most CPU cores one server reports."""
MAX_ZONE_CHARS = 128
"""As ``ALTER SYSTEM ADD ZONE`` accepts (docs/design/statements.md)."""
MAX_ADDR_CHARS = 128
"""An ``ip:port`` (an IPv6 address with its port is under 64)."""
MAX_CLUSTER_ID_CHARS = 128
"""BOOTSTRAP makes 32 hex digits; room for an operator's own."""
MAX_BUILD_VERSION_CHARS = 256
MAX_BUILD_ERROR_CHARS = 4096
"""A copy failure's one-line reason (observer_agent.replicas.copy)."""
MAX_REPLICA_TYPE_CHARS = 32
MAX_REPLICAS = 4096
"""Replicas one server may report: CREATE TENANT allows 1,024 log streams per tenant
(``rootservice.tenants.vocabulary.MAX_LS_COUNT``) and a server holds one unit per tenant, so
this is four tenants at their largest on one server, far above any deployment of this
project. The report is handled under the whitelist lock on every heartbeat, so its length
bounds the heartbeat path's time."""
MAX_MEMBERS = 16
"""Paxos members of one LS (OceanBase allows at most 7 full replicas)."""
MAX_ID = 1 << 53
"""tenant, LS and unit ids, log indexes: exact as JSON numbers and doubles."""
MAX_CHECKSUM = 0xFFFFFFFF
"""``data_checksum`` is a crc32."""
KNOWN_STATUS_BITS = DATA_DISK_ERROR_BIT | STOPPING_BIT
"""The ``server_status`` bits an agent may set (the stopping bit whatever the cluster version:
a receiver never refuses for its own gate)."""

_SIZE_FIELDS = (
    "mem_total",
    "mem_assigned",
    "mem_in_use",
    "log_disk_total",
    "log_disk_assigned",
    "log_disk_in_use",
    "data_disk_total",
    "data_disk_assigned",
    "data_disk_in_use",
)


def _refuse(field: str, value: object, bound: str) -> ObError:
    """OB_INVALID_ARGUMENT: "Incorrect arguments to lease request field F = V (B)"."""
    return ObError("OB_INVALID_ARGUMENT", f"lease request field {field} = {quote(value)} ({bound})")


def _check_text(field: str, value: str, max_chars: int, *, empty: bool, ascii_only: bool) -> None:
    """Printable (no NUL, no control character), at most ``max_chars``, non-empty unless
    ``empty``; ASCII only when ``ascii_only``."""
    if not value:
        if not empty:
            raise _refuse(field, value, "must not be empty")
        return
    if len(value) > max_chars:
        raise _refuse(field, value, f"at most {max_chars} characters, got {len(value)}")
    if not value.isprintable() or (ascii_only and not value.isascii()):
        kind = "printable ASCII" if ascii_only else "printable characters"
        raise _refuse(field, value, f"{kind} only")


def _check_int(field: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise _refuse(field, value, f"must be in [{lo}, {hi}]")


def _check_time(field: str, value: int, now_us: int, *, zero: bool) -> None:
    """0 (when ``zero``) or in [2000-01-01, now + 1 day]."""
    if value == 0 and zero:
        return
    hi = now_us + MAX_FUTURE_US
    if not MIN_TIME_US <= value <= hi:
        what = "0 or " if zero else ""
        raise _refuse(
            field, value, f"must be {what}in [{MIN_TIME_US}, {hi}] (2000-01-01 .. now + 1 day)"
        )


def _check_clock(field: str, value: int, now_us: int, steady_us: int, *, ahead_only: bool) -> None:
    """Within :data:`MAX_CLOCK_SKEW_US` of the RS's wall clock ``now_us`` or of its steady
    clock ``steady_us`` (only ahead of them when ``ahead_only``)."""
    for ref in (now_us, steady_us):
        if value <= ref + MAX_CLOCK_SKEW_US and (ahead_only or value >= ref - MAX_CLOCK_SKEW_US):
            return
    side = "at most" if ahead_only else "within"
    raise _refuse(
        field,
        value,
        f"{side} {MAX_CLOCK_SKEW_US // 1_000_000} s {'ahead of' if ahead_only else 'of'} the "
        f"RS's clock {now_us}",
    )


#: Fields an agent resends unchanged from one heartbeat to the next: checked by
#: :func:`_check_stable`, on a stream only when one of them changed (:class:`StreamChecks`).
#: ``resource_info`` is compared as its serialized bytes.
STABLE_FIELDS = (
    "version",
    "zone",
    "server",
    "sql_port",
    "build_version",
    "cluster_id",
    "server_id",
    "resource_info",
)
#: Fields that change with each heartbeat or are judged against the RS's clock: checked by
#: :func:`_check_each` on every request.
EACH_FIELDS = (
    "start_service_time",
    "current_server_time",
    "server_status",
    "rs_epoch",
    "rs_incarnation",
    "seq",
    "revocation_version",
    "applied_command_seq",
    "disk_probe_latency_us",
    "replicas_version",
    "replicas",
)

#: ``stable_scalars(req) -> (version, zone, server, sql_port, build_version, cluster_id,
#: server_id)``: the scalar fields of :data:`STABLE_FIELDS` in that order, read once (each
#: read of a string field of a message makes a new ``str``).
stable_scalars = attrgetter(*(f for f in STABLE_FIELDS if f != "resource_info"))
_stable_scalars = stable_scalars

#: ``each_values(req) -> (start_service_time, current_server_time, server_status, rs_epoch,
#: rs_incarnation, seq, revocation_version, applied_command_seq, disk_probe_latency_us,
#: replicas_version, replicas)``: the fields of :data:`EACH_FIELDS` in that order, read by one call once per
#: request (the checks and ``receive_hb`` both use them; each read of a field of a message
#: is a lookup by its name).
each_values = attrgetter(*EACH_FIELDS)


def check_lease_request(
    req: obrpc_pb2.LeaseRequest,
    now_us: int,
    steady_us: int | None = None,
    each: tuple[Any, ...] | None = None,
) -> None:
    """Check every field of ``req`` against its bound; ``now_us`` is the RS's wall clock,
    ``steady_us`` (default ``now_us``) the same clock carried by the monotonic clock since
    the RS started, without the steps the wall clock took since (an RS whose own clock was
    stepped an hour, must not refuse every server: a time agreeing with
    either is accepted). ``each``: :data:`each_values` of ``req`` when the caller has read
    them already (read here otherwise).

    Bounds: ``version`` in [:data:`MIN_LEASE_VERSION`,
    :data:`MAX_LEASE_VERSION`]; ``zone`` 1..128 printable characters; ``server`` 1..128 and
    ``cluster_id`` 0..128 printable ASCII; ``sql_port`` 1..65535; ``build_version`` 0..256
    printable ASCII; ``start_service_time`` 0 (not in service) or from 2000-01-01 to
    :data:`MAX_CLOCK_SKEW_US` ahead of the RS's clock (a server cannot have started in the
    future); ``current_server_time`` within :data:`MAX_CLOCK_SKEW_US` of the RS's clock
    either way; ``server_status`` only the data-disk and stopping bits; ``rs_epoch`` and
    ``seq`` 0..2^53 / >= 0; ``rs_incarnation`` >= 0; ``revocation_version`` >= 0; ``applied_command_seq`` >= 0;
    ``replicas_version`` >= 0; ``disk_probe_latency_us`` 0..1 day; ``resource_info``: CPU finite in [0, 100,000] cores, sizes in
    [0, 1 PiB]; at most :data:`MAX_REPLICAS` replicas, each checked by
    :func:`_check_replica` (terms at most 2^53, ids, sizes, addresses, times).

    Raises ``ObError("OB_INVALID_ARGUMENT", ...)`` naming the first bad field (the stable
    fields first, in the order above), its value (quoted, truncated to 64 characters) and
    the bound. Changes nothing.
    """
    _check_stable(req)
    _check_each(
        req,
        each_values(req) if each is None else each,
        now_us,
        now_us if steady_us is None else steady_us,
    )


class StreamChecks:
    """:func:`check_lease_request` for the requests of one lease stream, with the checks of
    :data:`STABLE_FIELDS` run only when one of those fields differs from the last request
    of the stream that passed them (an agent resends them unchanged, so
    on the heartbeat path they are checked once per stream and once per change). The
    same requests are refused, with the same error, as by :func:`check_lease_request`."""

    __slots__ = ("_passed",)

    def __init__(self) -> None:
        """Nothing checked yet: the first request gets every check."""
        self._passed: tuple[object, ...] | None = None

    def check(
        self,
        req: obrpc_pb2.LeaseRequest,
        each: tuple[Any, ...],
        now_us: int,
        resource_raw: bytes,
        steady_us: int,
    ) -> tuple[Any, ...]:
        """:func:`check_lease_request` of ``req`` at ``now_us`` / ``steady_us``; ``each`` is
        :data:`each_values` of ``req`` and ``resource_raw`` its
        ``resource_info.SerializeToString()`` (the heartbeat path reads both anyway).
        Returns :data:`stable_scalars` of ``req`` (the caller need not read those fields
        again). Raises as it does."""
        # Values, not the message: a caller may reuse and change its request object.
        scalars = _stable_scalars(req)
        stable = (scalars, resource_raw)
        if stable != self._passed:
            _check_stable(req)
            self._passed = stable
        _check_each(req, each, now_us, steady_us)
        return scalars


def _check_stable(req: obrpc_pb2.LeaseRequest) -> None:
    """The checks of :data:`STABLE_FIELDS` (see :func:`check_lease_request`)."""
    if not MIN_LEASE_VERSION <= req.version <= MAX_LEASE_VERSION:
        raise _refuse(
            "version", req.version, f"this RS speaks [{MIN_LEASE_VERSION}, {MAX_LEASE_VERSION}]"
        )
    _check_text("zone", req.zone, MAX_ZONE_CHARS, empty=False, ascii_only=False)
    _check_text("server", req.server, MAX_ADDR_CHARS, empty=False, ascii_only=True)
    _check_text("cluster_id", req.cluster_id, MAX_CLUSTER_ID_CHARS, empty=True, ascii_only=True)
    _check_int("sql_port", req.sql_port, 1, 65535)
    _check_text(
        "build_version", req.build_version, MAX_BUILD_VERSION_CHARS, empty=True, ascii_only=True
    )
    ri = req.resource_info
    for name in ("cpu_total", "cpu_assigned"):
        cpu = getattr(ri, name)
        # `not (0 <= x <= max)` is also true for NaN.
        if not math.isfinite(cpu) or not 0.0 <= cpu <= MAX_CPU:
            raise _refuse(f"resource_info.{name}", cpu, f"must be finite in [0, {MAX_CPU:g}]")
    for name in _SIZE_FIELDS:
        _check_int(f"resource_info.{name}", getattr(ri, name), 0, MAX_SIZE_BYTES)


def _check_each(
    req: obrpc_pb2.LeaseRequest, each: tuple[Any, ...], now_us: int, steady_us: int
) -> None:
    """The checks of :data:`EACH_FIELDS` (see :func:`check_lease_request`); ``each`` is
    :data:`each_values` of ``req``."""
    # The heartbeat path: one expression over the values first (about 3 us against
    # 10 us for the checks that name the refused field, which then decide).
    if not _values_ok(each, now_us, steady_us):
        _check_each_field(req, now_us, steady_us)
    replicas = each[-1]
    if not replicas:
        return
    n = len(replicas)
    if n > MAX_REPLICAS:
        raise _refuse("replicas", f"{n} replicas", f"at most {MAX_REPLICAS}")
    hi_time = now_us + MAX_FUTURE_US
    for i, r in enumerate(replicas):
        # A quick test of the whole replica first (about 2 µs against about 10 µs for the
        # field-by-field check that names the refused field).
        if not _replica_ok(r, hi_time):
            _check_replica(f"replicas[{i}]", r, now_us)


def _values_ok(each: tuple[Any, ...], now_us: int, steady_us: int) -> bool:
    """True only when :func:`_check_each_field` accepts the scalar fields of the request
    whose :data:`each_values` are ``each`` (the same bounds, without naming a field). When
    False, :func:`_check_each_field` decides."""
    start, cur, status, epoch, incarnation, seq, revocation, applied, disk, version, _ = each
    hi = now_us + MAX_FUTURE_US
    skew = MAX_CLOCK_SKEW_US
    return (
        (
            start == 0
            or (
                MIN_TIME_US <= start <= hi and (start <= now_us + skew or start <= steady_us + skew)
            )
        )
        and MIN_TIME_US <= cur <= hi
        and (now_us - skew <= cur <= now_us + skew or steady_us - skew <= cur <= steady_us + skew)
        and not status & ~KNOWN_STATUS_BITS
        and 0 <= epoch <= MAX_TERM
        and incarnation >= 0
        and seq >= 0
        and revocation >= 0
        and applied >= 0
        and 0 <= disk <= MAX_FUTURE_US
        and version >= 0
    )


def _check_each_field(req: obrpc_pb2.LeaseRequest, now_us: int, steady_us: int) -> None:
    """The scalar checks of :data:`EACH_FIELDS`, each naming its field when it refuses."""
    _check_time("start_service_time", req.start_service_time, now_us, zero=True)
    if req.start_service_time:
        _check_clock(
            "start_service_time", req.start_service_time, now_us, steady_us, ahead_only=True
        )
    _check_time("current_server_time", req.current_server_time, now_us, zero=False)
    _check_clock(
        "current_server_time", req.current_server_time, now_us, steady_us, ahead_only=False
    )
    if req.server_status & ~KNOWN_STATUS_BITS:
        raise _refuse(
            "server_status", req.server_status, f"only the bits {KNOWN_STATUS_BITS:#x} are known"
        )
    _check_int("rs_epoch", req.rs_epoch, 0, MAX_TERM)
    if req.rs_incarnation < 0:
        raise _refuse("rs_incarnation", req.rs_incarnation, "must be >= 0")
    if req.seq < 0:
        raise _refuse("seq", req.seq, "must be >= 0")
    if req.revocation_version < 0:
        raise _refuse("revocation_version", req.revocation_version, "must be >= 0")
    if req.applied_command_seq < 0:
        raise _refuse("applied_command_seq", req.applied_command_seq, "must be >= 0")
    _check_int("disk_probe_latency_us", req.disk_probe_latency_us, 0, MAX_FUTURE_US)
    if req.replicas_version < 0:
        raise _refuse("replicas_version", req.replicas_version, "must be >= 0")


_ROLES = frozenset({obrpc_pb2.ROLE_INVALID, obrpc_pb2.LEADER, obrpc_pb2.FOLLOWER})


def _short_ascii(value: str, max_chars: int) -> bool:
    # "" is printable and ASCII: the optional fields pass empty.
    return len(value) <= max_chars and value.isascii() and value.isprintable()


def _replica_ok(r: obrpc_pb2.ReplicaInfo, hi_time: int) -> bool:
    """True only when :func:`_check_replica` accepts ``r`` (the same bounds, without naming
    a field); ``hi_time`` is ``now + MAX_FUTURE_US``. When False, :func:`_check_replica`
    decides and names the field."""
    members = r.member_list
    build_error = r.build_error
    log_end_ts = r.log_end_ts
    return (
        0 < r.tenant_id <= MAX_ID
        and 0 < r.ls_id <= MAX_ID
        and 0 <= r.unit_id <= MAX_ID
        and r.role in _ROLES
        and len(members) <= MAX_MEMBERS
        and all(m and _short_ascii(m, MAX_ADDR_CHARS) for m in members)
        and _short_ascii(r.leader, MAX_ADDR_CHARS)
        and _short_ascii(r.copy_from, MAX_ADDR_CHARS)
        and _short_ascii(r.replica_type, MAX_REPLICA_TYPE_CHARS)
        and len(build_error) <= MAX_BUILD_ERROR_CHARS
        and build_error.isprintable()
        and len(r.catch_up_error) <= MAX_BUILD_ERROR_CHARS
        and r.catch_up_error.isprintable()
        and 0 <= r.paxos_replica_number <= MAX_MEMBERS
        and 0 <= r.term <= MAX_TERM
        and 0 <= r.log_end_index <= MAX_ID
        and (log_end_ts == 0 or MIN_TIME_US <= log_end_ts <= hi_time)
        and 0 <= r.data_size <= MAX_SIZE_BYTES
        and 0 <= r.required_size <= MAX_SIZE_BYTES
        and 0 <= r.bytes_copied <= MAX_SIZE_BYTES
        and 0 <= r.data_checksum <= MAX_CHECKSUM
    )


def _check_replica(at: str, r: obrpc_pb2.ReplicaInfo, now_us: int) -> None:
    """One reported replica: ids 1..2^53 (unit 0..2^53), a known role, at most 16 members
    and valid addresses, ``term`` and log index 0..2^53, ``log_end_ts`` 0 or a sane time,
    sizes 0..1 PiB, a crc32 checksum, a bounded ``replica_type``, ``build_error`` and
    ``catch_up_error``."""
    _check_int(f"{at}.tenant_id", r.tenant_id, 1, MAX_ID)
    _check_int(f"{at}.ls_id", r.ls_id, 1, MAX_ID)
    _check_int(f"{at}.unit_id", r.unit_id, 0, MAX_ID)
    if r.role not in (obrpc_pb2.ROLE_INVALID, obrpc_pb2.LEADER, obrpc_pb2.FOLLOWER):
        raise _refuse(f"{at}.role", r.role, "must be 0, 1 (LEADER) or 2 (FOLLOWER)")
    if len(r.member_list) > MAX_MEMBERS:
        raise _refuse(
            f"{at}.member_list", f"{len(r.member_list)} members", f"at most {MAX_MEMBERS}"
        )
    for m in r.member_list:
        _check_text(f"{at}.member_list", m, MAX_ADDR_CHARS, empty=False, ascii_only=True)
    for name in ("leader", "copy_from"):
        _check_text(f"{at}.{name}", getattr(r, name), MAX_ADDR_CHARS, empty=True, ascii_only=True)
    _check_text(
        f"{at}.replica_type", r.replica_type, MAX_REPLICA_TYPE_CHARS, empty=True, ascii_only=True
    )
    for name in ("build_error", "catch_up_error"):
        _check_text(
            f"{at}.{name}", getattr(r, name), MAX_BUILD_ERROR_CHARS, empty=True, ascii_only=False
        )
    _check_int(f"{at}.paxos_replica_number", r.paxos_replica_number, 0, MAX_MEMBERS)
    _check_int(f"{at}.term", r.term, 0, MAX_TERM)
    _check_int(f"{at}.log_end_index", r.log_end_index, 0, MAX_ID)
    _check_time(f"{at}.log_end_ts", r.log_end_ts, now_us, zero=True)
    for name in ("data_size", "required_size", "bytes_copied"):
        _check_int(f"{at}.{name}", getattr(r, name), 0, MAX_SIZE_BYTES)
    _check_int(f"{at}.data_checksum", r.data_checksum, 0, MAX_CHECKSUM)
