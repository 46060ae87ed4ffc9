"""The RS's Prometheus exposition: real components driven with the fake
clock, the output of ``generate_latest`` parsed back, and each value checked to move when
its event happens and only then."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from obcommon.errors import ObError
from obcommon.ratelimit_log import RateLimitedLog
from rootservice.api.dispatch import run_statement, statement_kind
from rootservice.api.lease_servicer import LeaseServicer
from rootservice.app import RootService
from rootservice.balancer.job_progress import JobProgress
from rootservice.ha.term import lease_timings
from rootservice.metrics import BUCKETS_US, LatencyWindow, Metrics
from rootservice.tasks import FAILURE_LOG_US, FnTask, guarded
from sql.parser import parse
from tests.support.harness import LEASE, ROOT, SEEDED, ZA, A, B, events, flush, hb, make_rs

Sample = tuple[str, frozenset[tuple[str, str]]]


def scrape(rs: RootService) -> dict[Sample, float]:
    """Every sample of ``rs``'s ``/metrics`` body: (name, labels) -> value."""
    text = generate_latest(rs.metrics.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def v(samples: dict[Sample, float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> RootService:
    return make_rs(db_url, tmp_path)


def test_heartbeats_counted_and_refusals_by_reason(rs: RootService) -> None:
    servicer = LeaseServicer(rs)
    before = scrape(rs)
    assert v(before, "ob_rs_heartbeats_received_total") == 0
    assert v(before, "ob_rs_heartbeat_handle_seconds_count") == 0
    for server, zone in SEEDED:
        servicer._handle(hb(server, zone))
    servicer._handle(hb("127.0.0.1:3999", ZA))  # not whitelisted
    servicer._handle(hb(A, "z-none"))  # no such zone
    after = scrape(rs)
    assert v(after, "ob_rs_heartbeats_received_total") == len(SEEDED) + 2
    assert v(after, "ob_rs_heartbeats_refused_total", reason="OB_SERVER_NOT_IN_WHITE_LIST") == 1
    assert v(after, "ob_rs_heartbeats_refused_total", reason="OB_ZONE_INFO_NOT_EXIST") == 1
    assert v(after, "ob_rs_heartbeat_handle_seconds_count") == len(SEEDED) + 2
    assert v(after, "ob_rs_heartbeat_handle_seconds_bucket", le="+Inf") == len(SEEDED) + 2
    assert v(after, "ob_rs_servers", status="ACTIVE") == len(SEEDED)
    assert v(after, "ob_rs_servers_by_heartbeat", heartbeat_status="alive") == len(SEEDED)
    # A scrape with nothing in between changes no counter (but the GC's: a scrape allocates,
    # so a collection may run during it).
    again = scrape(rs)
    checked = 0
    for key, value in after.items():
        name = key[0]
        counted = name.endswith(("_total", "_count", "_bucket"))
        if counted and name.startswith("ob_rs_") and not name.startswith("ob_rs_gc_pause"):
            assert again[key] == value, key
            checked += 1
    assert checked > 20


def test_lease_expiry_moves_servers_between_statuses(rs: RootService) -> None:
    servicer = LeaseServicer(rs)
    for server, zone in SEEDED:
        servicer._handle(hb(server, zone))
    flush(rs)
    rs.clock.advance(rs.take_office_grace.no_expire_until - rs.clock.now_us() + 1)
    for server, zone in SEEDED[1:]:
        servicer._handle(hb(server, zone))
    ticks = v(scrape(rs), "ob_rs_checker_tick_seconds_count")
    rs.clock.advance(LEASE - 1)
    for server, zone in SEEDED[1:]:
        servicer._handle(hb(server, zone))
    rs.clock.advance(2)
    assert rs.lease_checker.run_once() == 1  # A's lease expired
    m = scrape(rs)
    assert v(m, "ob_rs_servers", status="ACTIVE") == len(SEEDED) - 1
    assert v(m, "ob_rs_servers", status="INACTIVE") == 1
    assert v(m, "ob_rs_servers_by_heartbeat", heartbeat_status="lease_expired") == 1
    assert v(m, "ob_rs_checker_tick_seconds_count") == ticks + 1
    assert v(m, "ob_rs_lease_expire_detect_lag_seconds_count") == 1
    assert v(m, "ob_rs_persist_queue_depth") > 0
    flushes = v(m, "ob_rs_persist_flush_seconds_count")
    flush(rs)
    m = scrape(rs)
    assert v(m, "ob_rs_persist_queue_depth") == 0
    assert v(m, "ob_rs_persist_flush_seconds_count") == flushes + 1


def test_term_state_and_step_down(rs: RootService) -> None:
    m = scrape(rs)
    assert v(m, "ob_rs_leader") == 1
    assert v(m, "ob_rs_epoch") == rs.store.epoch > 0
    assert v(m, "ob_rs_state", state="FULL_SERVICE") == 1
    assert v(m, "ob_rs_state", state="NOT_MASTER") == 0
    assert v(m, "ob_rs_step_downs_total") == 0
    assert v(m, "ob_rs_take_office_total") == 1
    assert v(m, "ob_rs_take_office_seconds_count") == 1
    # The leader's own lease: trusted for lease - margin from its last good renewal, less
    # the time since.
    trusted = v(m, "ob_rs_lease_trusted_seconds")
    _, margin = lease_timings(rs.settings.lease_time)
    assert 0 < trusted <= (rs.settings.lease_time - margin) / 1e6
    rs.clock.advance(1_000_000)
    assert v(scrape(rs), "ob_rs_lease_trusted_seconds") == pytest.approx(trusted - 1.0)
    assert rs.term.request_step_down("test")
    m = scrape(rs)
    assert v(m, "ob_rs_lease_trusted_seconds") == 0
    assert v(m, "ob_rs_step_downs_total") == 1
    assert v(m, "ob_rs_leader") == 0
    assert v(m, "ob_rs_epoch") == 0
    assert v(m, "ob_rs_state", state="NOT_MASTER") == 1
    assert v(m, "ob_rs_state", state="FULL_SERVICE") == 0
    # The refused lease request is counted by its reason.
    LeaseServicer(rs)._handle(hb(A, ZA))
    m = scrape(rs)
    assert v(m, "ob_rs_heartbeats_refused_total", reason="OB_RS_NOT_MASTER") == 1


def test_task_run_time_and_failures_by_task(rs: RootService) -> None:
    def fail() -> None:
        raise RuntimeError("boom")

    failures = RateLimitedLog(logging.getLogger("test"), rs.clock, FAILURE_LOG_US)

    guarded(FnTask("ok_task", lambda: None), rs.metrics, failures)()
    guarded(FnTask("bad_task", fail), rs.metrics, failures)()
    m = scrape(rs)
    assert v(m, "ob_rs_task_failures_total", task="bad_task") == 1
    assert v(m, "ob_rs_task_failures_total", task="ok_task") == 0
    assert v(m, "ob_rs_task_run_seconds_count", task="bad_task") == 1
    assert v(m, "ob_rs_task_run_seconds_count", task="ok_task") == 1
    guarded(FnTask("ok_task", lambda: None), rs.metrics, failures)()
    m = scrape(rs)
    assert v(m, "ob_rs_task_failures_total", task="bad_task") == 1
    assert v(m, "ob_rs_task_run_seconds_count", task="ok_task") == 2


def test_statements_by_kind_and_outcome(rs: RootService) -> None:
    run_statement(rs, "SELECT zone FROM __all_zone", ROOT)
    run_statement(rs, "ALTER SYSTEM ADD ZONE 'z9'", ROOT)
    with pytest.raises(ObError):
        run_statement(rs, "ALTER SYSTEM ADD ZONE 'z9'", ROOT)
    with pytest.raises(ObError):
        run_statement(rs, "ALTER SYSTEM FROBNICATE", ROOT)
    m = scrape(rs)
    assert v(m, "ob_rs_statements_total", kind="SELECT", outcome="ok") == 1
    assert v(m, "ob_rs_statements_total", kind="ADD_ZONE", outcome="ok") == 1
    errors = {
        dict(labels)["outcome"]: n
        for (name, labels), n in m.items()
        if name == "ob_rs_statements_total" and dict(labels)["kind"] == "ADD_ZONE"
    }
    assert len(errors) == 2 and errors["ok"] == 1
    assert any(
        n == 1 and dict(labels)["kind"] == "UNPARSED"
        for (name, labels), n in m.items()
        if name == "ob_rs_statements_total"
    )
    # The JSON of GetMetrics keeps its names.
    assert rs.metrics_snapshot()["statements_total"] == 2


def test_statement_kind_names() -> None:
    assert statement_kind(parse("ALTER SYSTEM DELETE SERVER '1.2.3.4:5'")) == "DELETE_SERVER"
    assert statement_kind(parse("ALTER SYSTEM STOP ZONE 'z'")) == "STOP_ZONE"
    assert statement_kind(parse("SELECT 1 FROM __all_zone")) == "SELECT"
    assert statement_kind(parse("DROP TENANT t")) == "DROP_TENANT"
    assert statement_kind(None) == "UNPARSED"


def test_peer_refusals_one_counter_by_kind(rs: RootService) -> None:
    rs.metrics.inc("peer_refused_wrong_role_total")  # as PeerGate's count does
    m = scrape(rs)
    assert v(m, "ob_rs_peer_refused_total", kind="wrong_role") == 1
    assert rs.metrics_snapshot()["peer_refused_wrong_role_total"] == 1


def test_job_series_only_while_the_job_runs(rs: RootService) -> None:
    m = scrape(rs)
    assert not [k for k in m if k[0].startswith("ob_rs_job_")]
    p = JobProgress(2, 4, 1000, rs.clock.now_us(), rs.clock.now_us())
    p.job_id, p.percent, p.bytes_done = 7, 50, 400
    rs.delete_jobs.progress[B] = p
    m = scrape(rs)
    labels = {"job_id": "7", "job_type": "DELETE_SERVER", "server": B}
    assert v(m, "ob_rs_job_progress_ratio", **labels) == 0.5
    assert v(m, "ob_rs_job_copied_bytes", **labels) == 400
    assert v(m, "ob_rs_job_size_bytes", **labels) == 1000
    rs.delete_jobs.forget(B)
    assert not [k for k in scrape(rs) if k[0].startswith("ob_rs_job_")]


def test_process_collectors_registered(rs: RootService) -> None:
    m = scrape(rs)
    assert v(m, "process_cpu_seconds_total") >= 0
    assert any(k[0] == "python_info" for k in m)


def test_histogram_buckets_are_cumulative() -> None:
    w = LatencyWindow()
    for us in (10, 50, 51, 2_000, 20_000_000):
        w.record(us)
    buckets, total = w.buckets()
    counts = dict(buckets)
    assert counts["5e-05"] == 2  # 10 and 50 (le is inclusive)
    assert counts["0.0001"] == 3
    assert counts["0.0025"] == 4
    assert counts["10.0"] == 4
    assert counts["+Inf"] == 5
    assert len(buckets) == len(BUCKETS_US) + 1
    assert total == pytest.approx((10 + 50 + 51 + 2_000 + 20_000_000) / 1e6)
    assert w.summary()["count"] == 5


def test_labelled_counters_in_the_json_snapshot() -> None:
    m = Metrics()
    m.inc_labelled("statements", ("SELECT", "ok"))
    m.inc_labelled("statements", ("SELECT", "ok"), 2)
    assert m.snapshot()["statements.SELECT.ok"] == 3
    assert m.labelled("statements") == {("SELECT", "ok"): 3}


def test_a_wall_clock_jump_is_counted_recorded_and_harmless(rs: RootService) -> None:
    """The watchdog's step goes to ob_rs_wall_clock_jumps_total (there at
    0 before) and to a root_service / wall_clock_jump event with the step in us; the
    servers heartbeating across it stay ACTIVE."""
    servicer = LeaseServicer(rs)
    rs.clock.advance(LEASE)
    for server, zone in SEEDED:
        servicer._handle(hb(server, zone))
    assert v(scrape(rs), "ob_rs_wall_clock_jumps_total") == 0
    dog = rs.wall_clock_watchdog
    dog.check_once()
    rs.clock.jump(3600 * 1_000_000)
    assert dog.check_once() == 3600 * 1_000_000
    assert rs.lease_checker.run_once() == 0
    flush(rs)
    assert v(scrape(rs), "ob_rs_wall_clock_jumps_total") == 1
    (ev,) = events(rs, "wall_clock_jump")
    assert ev["module"] == "root_service"
    assert (ev["name1"], ev["value1"]) == ("jump_us", str(3600 * 1_000_000))
    assert v(scrape(rs), "ob_rs_servers", status="ACTIVE") == len(SEEDED)
