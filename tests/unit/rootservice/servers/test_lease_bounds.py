"""Lease request bounds (rootservice/servers/lease_bounds.py): both sides of
every bound (the extreme accepted, one past it refused with OB_INVALID_ARGUMENT naming the
field), then on an RS on SQLite and PostgreSQL: a refused lease changes nothing (record,
row, events), ``cluster_id`` is required once a server joined, and a refusal carries no
cluster id."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from obcommon.bounds import MAX_TERM
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.api.lease_servicer import LeaseServicer
from rootservice.app import RootService
from rootservice.servers.lease_bounds import (
    EACH_FIELDS,
    MAX_ADDR_CHARS,
    MAX_BUILD_VERSION_CHARS,
    MAX_CLOCK_SKEW_US,
    MAX_CLUSTER_ID_CHARS,
    MAX_CPU,
    MAX_FUTURE_US,
    MAX_ID,
    MAX_LEASE_VERSION,
    MAX_MEMBERS,
    MAX_REPLICAS,
    MAX_SIZE_BYTES,
    MAX_ZONE_CHARS,
    MIN_LEASE_VERSION,
    MIN_TIME_US,
    STABLE_FIELDS,
    StreamChecks,
    check_lease_request,
    each_values,
)
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import FAKE_START_US, ZA, A, events, flush, hb, server_row

NOW = FAKE_START_US
DAY_US = 86_400_000_000
HOUR_US = 3_600_000_000
Edit = Callable[[obrpc_pb2.LeaseRequest], Any]


def replica(**fields: Any) -> obrpc_pb2.ReplicaInfo:
    """A valid report of one replica of LS (1001, 1) led by A (fields override)."""
    r = obrpc_pb2.ReplicaInfo(
        tenant_id=1001,
        ls_id=1,
        unit_id=1,
        role=obrpc_pb2.LEADER,
        member_list=[A],
        replica_type="FULL",
        paxos_replica_number=1,
        term=3,
        leader=A,
        log_end_index=10,
        log_end_ts=NOW,
        data_size=1 << 20,
        required_size=2 << 20,
        in_service=True,
        data_checksum=0xFFFFFFFF,
    )
    for k, v in fields.items():
        if k == "member_list":
            del r.member_list[:]
            r.member_list.extend(v)
        else:
            setattr(r, k, v)
    return r


def request(edit: Edit | None = None) -> obrpc_pb2.LeaseRequest:
    req = hb(A, ZA, current_server_time=NOW)
    req.replicas.append(replica())
    if edit is not None:
        edit(req)
    return req


def setter(field: str, value: Any) -> Edit:
    def edit(req: obrpc_pb2.LeaseRequest) -> None:
        target: Any = req
        *path, last = field.split(".")
        for p in path:
            target = req.replicas[0] if p == "replica" else getattr(target, p)
        setattr(target, last, value)

    return edit


def members(n: int) -> Edit:
    def edit(req: obrpc_pb2.LeaseRequest) -> None:
        del req.replicas[0].member_list[:]
        req.replicas[0].member_list.extend(f"10.0.0.{i}:2882" for i in range(n))

    return edit


def replicas(n: int) -> Edit:
    def edit(req: obrpc_pb2.LeaseRequest) -> None:
        del req.replicas[:]
        req.replicas.extend(replica(ls_id=i + 1) for i in range(n))

    return edit


# (label, accepted edit at the bound, refused edit one past it, field named in the refusal)
BOUNDS: list[tuple[str, Edit, Edit, str]] = [
    ("zone", setter("zone", "z" * MAX_ZONE_CHARS), setter("zone", "z" * (MAX_ZONE_CHARS + 1)), "zone"),
    ("zone empty", setter("zone", "z"), setter("zone", ""), "zone"),
    ("zone NUL", setter("zone", "z1"), setter("zone", "z\x001"), "zone"),
    ("server", setter("server", A), setter("server", "1" * (MAX_ADDR_CHARS + 1)), "server"),
    ("server NUL", setter("server", A), setter("server", A + "\x00"), "server"),
    (
        "cluster_id",
        setter("cluster_id", "c" * MAX_CLUSTER_ID_CHARS),
        setter("cluster_id", "c" * (MAX_CLUSTER_ID_CHARS + 1)),
        "cluster_id",
    ),
    ("cluster_id NUL", setter("cluster_id", ""), setter("cluster_id", "c0\x00ffee"), "cluster_id"),
    ("sql_port low", setter("sql_port", 1), setter("sql_port", 0), "sql_port"),
    ("sql_port high", setter("sql_port", 65535), setter("sql_port", 65536), "sql_port"),
    (
        "build_version",
        setter("build_version", "v" * MAX_BUILD_VERSION_CHARS),
        setter("build_version", "v" * (MAX_BUILD_VERSION_CHARS + 1)),
        "build_version",
    ),
    ("build_version ASCII", setter("build_version", "4.2 ~"), setter("build_version", "4.2é"), "build_version"),
    ("build_version control", setter("build_version", "4.2"), setter("build_version", "4.2\n"), "build_version"),
    # A server cannot have started in the future (beyond the clock skew).
    (
        "start_service_time future",
        setter("start_service_time", NOW + MAX_CLOCK_SKEW_US),
        setter("start_service_time", NOW + MAX_CLOCK_SKEW_US + 1),
        "start_service_time",
    ),
    ("start_service_time a day ahead", setter("start_service_time", NOW), setter("start_service_time", NOW + DAY_US), "start_service_time"),
    (
        "start_service_time past",
        setter("start_service_time", MIN_TIME_US),
        setter("start_service_time", MIN_TIME_US - 1),
        "start_service_time",
    ),
    ("start_service_time zero", setter("start_service_time", 0), setter("start_service_time", -1), "start_service_time"),
    # The agent's clock within MAX_CLOCK_SKEW_US of the RS's, either way.
    (
        "current_server_time ahead",
        setter("current_server_time", NOW + MAX_CLOCK_SKEW_US),
        setter("current_server_time", NOW + MAX_CLOCK_SKEW_US + 1),
        "current_server_time",
    ),
    (
        "current_server_time behind",
        setter("current_server_time", NOW - MAX_CLOCK_SKEW_US),
        setter("current_server_time", NOW - MAX_CLOCK_SKEW_US - 1),
        "current_server_time",
    ),
    ("current_server_time a day ahead", setter("current_server_time", NOW), setter("current_server_time", NOW + DAY_US), "current_server_time"),
    ("current_server_time a day behind", setter("current_server_time", NOW), setter("current_server_time", NOW - DAY_US), "current_server_time"),
    ("current_server_time zero", setter("current_server_time", NOW), setter("current_server_time", 0), "current_server_time"),
    # The protocol's versions: only 1.
    ("version low", setter("version", MIN_LEASE_VERSION), setter("version", MIN_LEASE_VERSION - 1), "version"),
    ("version negative", setter("version", 1), setter("version", -1), "version"),
    ("version high", setter("version", MAX_LEASE_VERSION), setter("version", MAX_LEASE_VERSION + 1), "version"),
    ("version int64", setter("version", 1), setter("version", 2**63 - 1), "version"),
    ("server_status", setter("server_status", 3), setter("server_status", 4), "server_status"),
    ("server_status negative", setter("server_status", 0), setter("server_status", -1), "server_status"),
    ("rs_epoch", setter("rs_epoch", MAX_TERM), setter("rs_epoch", MAX_TERM + 1), "rs_epoch"),
    ("seq", setter("seq", 0), setter("seq", -1), "seq"),
    ("replicas_version", setter("replicas_version", 0), setter("replicas_version", -1), "replicas_version"),
    (
        "cpu_total",
        setter("resource_info.cpu_total", MAX_CPU),
        setter("resource_info.cpu_total", math.nextafter(MAX_CPU, math.inf)),
        "cpu_total",
    ),
    ("cpu_total inf", setter("resource_info.cpu_total", 0.0), setter("resource_info.cpu_total", math.inf), "cpu_total"),
    ("cpu_assigned NaN", setter("resource_info.cpu_assigned", 0.5), setter("resource_info.cpu_assigned", math.nan), "cpu_assigned"),
    ("cpu negative", setter("resource_info.cpu_assigned", 0.0), setter("resource_info.cpu_assigned", -0.5), "cpu_assigned"),
    (
        "mem_total",
        setter("resource_info.mem_total", MAX_SIZE_BYTES),
        setter("resource_info.mem_total", MAX_SIZE_BYTES + 1),
        "mem_total",
    ),
    (
        "data_disk_in_use",
        setter("resource_info.data_disk_in_use", 0),
        setter("resource_info.data_disk_in_use", 2**63 - 1),
        "data_disk_in_use",
    ),
    ("log_disk_total negative", setter("resource_info.log_disk_total", 0), setter("resource_info.log_disk_total", -1), "log_disk_total"),
    ("replica count", replicas(MAX_REPLICAS), replicas(MAX_REPLICAS + 1), "replicas"),
    ("replica term", setter("replica.term", MAX_TERM), setter("replica.term", MAX_TERM + 1), "term"),
    ("replica term int64", setter("replica.term", 0), setter("replica.term", 2**63 - 1), "term"),
    ("replica tenant_id", setter("replica.tenant_id", MAX_ID), setter("replica.tenant_id", 0), "tenant_id"),
    ("replica ls_id", setter("replica.ls_id", MAX_ID), setter("replica.ls_id", MAX_ID + 1), "ls_id"),
    ("replica role", setter("replica.role", 2), setter("replica.role", 3), "role"),
    ("replica members", members(MAX_MEMBERS), members(MAX_MEMBERS + 1), "member_list"),
    ("replica member NUL", members(1), setter("replica.leader", "1.2.3.4:5\x00"), "leader"),
    (
        "replica data_size",
        setter("replica.data_size", MAX_SIZE_BYTES),
        setter("replica.data_size", MAX_SIZE_BYTES + 1),
        "data_size",
    ),
    (
        "replica log_end_index",
        setter("replica.log_end_index", MAX_ID),
        setter("replica.log_end_index", -1),
        "log_end_index",
    ),
    (
        "replica log_end_ts",
        setter("replica.log_end_ts", NOW + MAX_FUTURE_US),
        setter("replica.log_end_ts", NOW + MAX_FUTURE_US + 1),
        "log_end_ts",
    ),
    ("replica checksum", setter("replica.data_checksum", 0), setter("replica.data_checksum", 2**32), "data_checksum"),
    (
        "replica paxos number",
        setter("replica.paxos_replica_number", MAX_MEMBERS),
        setter("replica.paxos_replica_number", MAX_MEMBERS + 1),
        "paxos_replica_number",
    ),
    ("replica build_error", setter("replica.build_error", "x" * 4096), setter("replica.build_error", "x\x00"), "build_error"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("ok", "bad", "field"), [b[1:] for b in BOUNDS], ids=[b[0] for b in BOUNDS]
)
def test_each_bound_accepts_its_extreme_and_refuses_one_past_it(
    ok: Edit, bad: Edit, field: str
) -> None:
    check_lease_request(request(ok), NOW)
    with pytest.raises(ObError) as e:
        check_lease_request(request(bad), NOW)
    assert e.value.name == "OB_INVALID_ARGUMENT"
    assert field in e.value.message and "lease request field" in e.value.message
    # The same with the values the caller read already (the unary heartbeat path).
    check_lease_request(request(ok), NOW, NOW, each_values(request(ok)))
    with pytest.raises(ObError) as again:
        check_lease_request(request(bad), NOW, NOW, each_values(request(bad)))
    assert again.value.message == e.value.message


def test_a_step_of_the_rs_clock_refuses_no_agent() -> None:
    """The RS's wall clock stepped an hour either way: an agent whose time
    agrees with the RS's steady clock (its wall clock before the step) is accepted, one that
    agrees with neither is refused."""
    hour = 3_600_000_000
    for step in (hour, -hour):
        check_lease_request(request(), NOW + step, NOW)
        for off in (MAX_CLOCK_SKEW_US + 1, -MAX_CLOCK_SKEW_US - 1):
            bad = request(setter("current_server_time", NOW + off))
            with pytest.raises(ObError) as e:
                check_lease_request(bad, NOW + step, NOW)
            assert "current_server_time" in e.value.message


def test_the_agents_version_is_the_one_this_rs_speaks() -> None:
    from observer_agent.lease import LEASE_REQUEST_VERSION

    assert MIN_LEASE_VERSION <= LEASE_REQUEST_VERSION <= MAX_LEASE_VERSION


def test_the_refusal_quotes_a_long_value_truncated() -> None:
    with pytest.raises(ObError) as e:
        check_lease_request(request(setter("build_version", "v" * 100_000)), NOW)
    assert "at most 256 characters, got 100000" in e.value.message
    assert len(e.value.message) < 300


def test_a_refused_lease_changes_nothing(rs: RootService) -> None:
    """Every refused field leaves the record, the row and the events as they were (SQLite
    and PostgreSQL: the `rs` fixture runs on both)."""
    rs.heartbeats.receive_hb(hb(A, ZA))
    flush(rs)
    # A refused renewal must not extend the lease either (an accepted one sets it to now).
    rs.whitelist.records[A].last_hb_time -= 1
    rs.whitelist.records[A].last_hb_mono_us -= 1
    record, row, n_events = rs.whitelist.get(A), server_row(rs, A), len(events(rs))
    for _, _, bad, _ in BOUNDS:
        with pytest.raises(ObError):
            rs.heartbeats.receive_hb(request(bad))
    flush(rs)
    assert rs.whitelist.get(A) == record and server_row(rs, A) == row
    assert len(events(rs)) == n_events


def test_cluster_id_is_required_once_the_server_joined(rs: RootService) -> None:
    """A server reporting a start_service_time has an identity: an empty or another cluster
    id is refused and the refusal does not tell this cluster's."""
    for cid in ("", "another"):
        with pytest.raises(ObError) as e:
            rs.heartbeats.receive_hb(hb(A, ZA, cluster_id=cid))
        assert e.value.name == "OB_INVALID_ARGUMENT" and "c0ffee" not in e.value.message
    s = rs.whitelist.get(A)
    assert s is not None and s.hb_status is HeartbeatStatus.LEASE_EXPIRED
    # Through the servicer: the refused response hands out no cluster id.
    resp = LeaseServicer(rs)._handle(hb(A, ZA, cluster_id=""))
    assert resp.error.name == "OB_INVALID_ARGUMENT" and resp.cluster_id == ""
    assert resp.lease_expire_time == 0 and list(resp.rs_list) == []
    assert rs.heartbeats.receive_hb(hb(A, ZA)).cluster_id == "c0ffee"


def test_a_server_not_in_service_learns_the_cluster_id(rs: RootService) -> None:
    """An agent without identity sends no cluster id and start_service_time 0 (it starts
    service only once it has an identity): accepted, and the response teaches it the
    cluster id. An empty cluster id with a start_service_time, or for a server whose record
    is in service, is refused."""
    resp = rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="", start_service_time=0))
    assert resp.cluster_id == "c0ffee" and resp.server_id == 1
    with pytest.raises(ObError):
        rs.heartbeats.receive_hb(hb(A, ZA, cluster_id=""))
    rs.heartbeats.receive_hb(hb(A, ZA))  # in service now
    with pytest.raises(ObError):
        rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="", start_service_time=0))
    # Before BOOTSTRAP nothing is required.
    rs.identity.bootstrapped = False
    assert rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="")).cluster_id == "c0ffee"


def test_every_request_field_is_checked_per_stream_or_per_heartbeat() -> None:
    """Each LeaseRequest field is in exactly one group of lease_bounds, so a
    field added to obrpc.proto cannot escape the stream's change test."""
    names = [f.name for f in obrpc_pb2.LeaseRequest.DESCRIPTOR.fields]
    assert sorted(STABLE_FIELDS + EACH_FIELDS) == sorted(names)
    assert not set(STABLE_FIELDS) & set(EACH_FIELDS)


def test_each_values_keep_the_order_their_readers_unpack() -> None:
    """``receive_hb`` and the one-expression check unpack ``each_values(req)`` by position:
    a field moved in EACH_FIELDS would hand every reader another field's value (the
    values below are numbered in the readers' order)."""
    assert EACH_FIELDS[-1] == "replicas"
    req = obrpc_pb2.LeaseRequest(
        start_service_time=1,
        current_server_time=2,
        server_status=3,
        rs_epoch=4,
        rs_incarnation=5,
        seq=6,
        revocation_version=7,
        applied_command_seq=8,
        disk_probe_latency_us=9,
        replicas_version=10,
    )
    assert each_values(req)[:-1] == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)


def stream_check(checks: StreamChecks, req: obrpc_pb2.LeaseRequest) -> None:
    checks.check(req, each_values(req), NOW, req.resource_info.SerializeToString(), NOW)


@pytest.mark.parametrize(
    ("ok", "bad", "field"), [b[1:] for b in BOUNDS], ids=[b[0] for b in BOUNDS]
)
def test_a_stream_refuses_what_the_full_check_refuses(ok: Edit, bad: Edit, field: str) -> None:
    """On a stream the fields an agent resends unchanged are checked only when
    they change, yet each bound refuses the same requests, naming the same field: as the
    stream's first request, after an accepted one, and after a refused one."""
    checks = StreamChecks()
    stream_check(checks, request(ok))
    stream_check(checks, request())
    for _ in range(2):
        with pytest.raises(ObError) as e:
            stream_check(checks, request(bad))
        assert e.value.name == "OB_INVALID_ARGUMENT"
        assert field in e.value.message and "lease request field" in e.value.message
    with pytest.raises(ObError):
        stream_check(StreamChecks(), request(bad))
    stream_check(checks, request(ok))


def test_a_stream_rechecks_a_field_changed_in_a_reused_request() -> None:
    """The change test compares values, not the message: an agent (or a test) that reuses
    one request object and changes a field in place gets that field checked."""
    checks = StreamChecks()
    req = request()
    stream_check(checks, req)
    req.resource_info.mem_total = MAX_SIZE_BYTES + 1
    with pytest.raises(ObError, match="mem_total"):
        stream_check(checks, req)
    req.resource_info.mem_total = 1
    req.build_version = "4.2\n"
    with pytest.raises(ObError, match="build_version"):
        stream_check(checks, req)


def test_a_stream_refuses_a_changed_field_in_band_and_changes_nothing(rs: RootService) -> None:
    """Through the servicer with one stream's checks (as ``LeaseStream`` calls it): after an
    accepted request, a request whose resent field changed out of its bounds is refused
    in-band and leaves the record as it was; the next valid one is accepted."""
    servicer, checks = LeaseServicer(rs), StreamChecks()
    assert servicer._handle(request(), checks).error.code == 0
    flush(rs)
    record = rs.whitelist.get(A)
    for _, _, bad, field in BOUNDS:
        resp = servicer._handle(request(bad), checks)
        assert resp.error.name == "OB_INVALID_ARGUMENT" and field in resp.error.message
    assert rs.whitelist.get(A).resource_info == record.resource_info
    assert rs.whitelist.get(A).build_version == record.build_version
    assert servicer._handle(request(setter("seq", 9)), checks).seq == 9


def _near(*edges: int) -> st.SearchStrategy[int]:
    """Integers at, just inside and just outside each of ``edges`` (mostly), or anywhere."""
    picks = [e + d for e in edges for d in (-1, 0, 1)]
    return st.sampled_from(picks) | st.sampled_from(picks) | st.integers(-(2**63), 2**63 - 1)


def _mostly(valid: st.SearchStrategy[int], edges: st.SearchStrategy[int]) -> st.SearchStrategy[int]:
    """``valid`` four times in five, else ``edges``."""
    return valid | valid | valid | valid | edges


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(
    # The edges of the skew around the wall clock and around a steady clock an hour or two
    # days off it, and of the one-day bound.
    start=_near(
        0,
        MIN_TIME_US,
        NOW + MAX_CLOCK_SKEW_US,
        NOW + HOUR_US + MAX_CLOCK_SKEW_US,
        NOW + DAY_US,
        NOW + 2 * DAY_US,
    ),
    cur=_near(
        MIN_TIME_US,
        NOW - MAX_CLOCK_SKEW_US,
        NOW + MAX_CLOCK_SKEW_US,
        NOW + DAY_US,
        NOW + 2 * DAY_US,
        NOW - HOUR_US,
    ),
    steady_off=st.sampled_from([0, HOUR_US, -HOUR_US, 2 * DAY_US, -2 * DAY_US]),
    # The other fields mostly valid, so that the clock edges above decide most examples.
    status=_mostly(st.sampled_from([0, 1, 2, 3]), st.sampled_from([4, 8, 1 << 31])),
    epoch=_mostly(st.sampled_from([0, 7, MAX_TERM]), _near(0, MAX_TERM)),
    small=st.lists(_mostly(st.sampled_from([0, 5]), _near(0)), min_size=5, max_size=5),
    probe=_mostly(st.sampled_from([0, 1000, MAX_FUTURE_US]), _near(0, MAX_FUTURE_US)),
)
def test_the_quick_test_of_each_heartbeat_accepts_only_what_the_named_checks_accept(
    start: int, cur: int, steady_off: int, status: int, epoch: int, small: list[int], probe: int
) -> None:
    """The heartbeat path tests the per-heartbeat fields in one expression and runs the
    checks that name a field only when it fails: it must never pass a request those checks
    refuse (and, for speed, should pass the ones they accept)."""
    from rootservice.servers.lease_bounds import _check_each_field, _values_ok

    req = obrpc_pb2.LeaseRequest()
    try:
        req.start_service_time, req.current_server_time = start, cur
        req.rs_epoch = epoch
        (
            req.rs_incarnation,
            req.seq,
            req.revocation_version,
            req.applied_command_seq,
            req.replicas_version,
        ) = small
        req.disk_probe_latency_us, req.server_status = probe, status
    except ValueError:
        return  # out of the field's protobuf type: no agent can send it
    steady = NOW + steady_off
    try:
        _check_each_field(req, NOW, steady)
        named_ok = True
    except ObError:
        named_ok = False
    assert _values_ok(each_values(req), NOW, steady) == named_ok
