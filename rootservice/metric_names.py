"""The exposition names of the RS's metrics: which :class:`rootservice.metrics.Metrics`
counter and latency window becomes which Prometheus family, with its labels and help text.

Kept apart from the collector (:class:`rootservice.metrics.RsCollector`) so that adding a
metric is one table entry here; the naming rules are in :mod:`rootservice.metrics`.
"""

from __future__ import annotations

import re

#: Plain counters of :class:`Metrics` exported under another name (or not at all: None, when
#: a labelled family already carries them): JSON name -> (exposition name without
#: ``_total``, help). A plain counter not listed is exported as ``ob_rs_<name>`` (without a
#: leading ``rs_``).
COUNTERS: dict[str, tuple[str, str] | None] = {
    "rs_step_down_total": ("ob_rs_step_downs", "Step-downs of this RS."),
    "rs_take_office_total": ("ob_rs_take_office", "Times this RS took office."),
    "rs_elected_total": ("ob_rs_elected", "Election rounds this RS won."),
    "rs_lease_renewals_total": ("ob_rs_lease_renewals", "RS lease renewals."),
    "leases_expired_total": (
        "ob_rs_leases_expired",
        "Leases this RS expired: alive servers made lease_expired, and take-office candidates "
        "written INACTIVE when the grace ended.",
    ),
    "event_loop_stalls_total": (
        "ob_rs_event_loop_stalls",
        "Times the gRPC event loop did not run for over 300 ms (each logged with its stack).",
    ),
    "rs_election_errors_total": ("ob_rs_election_errors", "Failed election rounds."),
    "rs_lease_renewal_failures_total": (
        "ob_rs_lease_renewal_failures",
        "Lease renewals of the leader that failed on a passing database error and were left "
        "to the next round while the lease was still trusted.",
    ),
    "persist_failures_total": ("ob_rs_persist_failures", "Failed persistence-queue flushes."),
    "persist_flushes_total": ("ob_rs_persist_flushes", "Persistence-queue flushes."),
    "persist_rows_total": ("ob_rs_persist_rows", "__all_server rows written by the queue."),
    "servers_permanent_offline_total": (
        "ob_rs_servers_permanent_offline",
        "Permanent-offline declarations: one per episode of a server being gone.",
    ),
    "events_dropped_total": ("ob_rs_events_dropped", "Queued events dropped (queue full)."),
    "lease_version_refused_total": (
        "ob_rs_lease_version_refused",
        "Lease requests refused by the version skew rule (OB_VERSION_NOT_MATCH).",
    ),
    "wall_clock_jumps_total": (
        "ob_rs_wall_clock_jumps",
        "Steps of this RS's wall clock (> 1 s against the monotonic clock) seen by its "
        "watchdog; lease ages are monotonic, the timers are rescheduled.",
    ),
    "lease_streams_resumed_total": (
        "ob_rs_lease_streams_resumed",
        "Lease streams whose TLS connection resumed an earlier session.",
    ),
    "lease_streams_full_tls_total": (
        "ob_rs_lease_streams_full_tls",
        "Lease streams whose TLS connection made a full handshake.",
    ),
    "replica_reports_stale_total": (
        "ob_rs_replica_reports_stale",
        "Replica reports ignored as built by the agent before an ApplyReplicas answer this RS "
        "had taken (their replicas_version lower).",
    ),
    "statements_total": None,
    "statements_refused_total": None,
    "statements_forwarded_total": None,
}
#: Counters that always appear in the exposition, at 0 before their first event, so that a
#: dashboard's rate() has a series from the start.
ALWAYS = (
    "rs_step_down_total",
    "rs_take_office_total",
    "persist_failures_total",
    "wall_clock_jumps_total",
    "servers_permanent_offline_total",
)
#: Plain counters whose JSON name carries a label value: regex -> (family, label, help).
PATTERNS: list[tuple[re.Pattern[str], str, str, str]] = [
    (
        re.compile(r"peer_refused_(\w+)_total"),
        "ob_rs_peer_refused",
        "kind",
        "Calls refused by the peer gate, by kind of refusal.",
    ),
    (
        re.compile(r"task_failures_total\.(.+)"),
        "ob_rs_task_failures",
        "task",
        "Failed cycles of a background task, by task.",
    ),
    (
        re.compile(r"history_pruned_rows_total\.(.+)"),
        "ob_rs_history_pruned_rows",
        "history",
        "Rows deleted by the history pruner past their retention, by history (event: "
        "__all_rootservice_event_history, job: ended __all_rootservice_job rows).",
    ),
]
#: Labelled counter families of :meth:`Metrics.inc_labelled`: name -> (exposition name
#: without ``_total``, label names, help).
LABELLED: dict[str, tuple[str, tuple[str, ...], str]] = {
    "statements": (
        "ob_rs_statements",
        ("kind", "outcome"),
        "Admin statements by kind (statement class, e.g. ADD_SERVER, SELECT) and outcome "
        "(ok, forwarded, or the OceanBase error name).",
    ),
    "planner_failures": (
        "ob_rs_planner_failures",
        ("task",),
        "Plans that failed (no Java, JVM crash, lost executor, database error...), by the "
        "task that asked (balancer, lost_replica_checker).",
    ),
}
#: Latency windows exported as histograms: window name (or prefix ending with '.') ->
#: (exposition name, label name or '', help).
HISTOGRAMS: dict[str, tuple[str, str, str]] = {
    "hb_handle_us": (
        "ob_rs_heartbeat_handle_seconds",
        "",
        "Time to handle one lease request (heartbeat), refusals included.",
    ),
    "checker_tick_us": (
        "ob_rs_checker_tick_seconds",
        "",
        "Duration of one lease-checker tick (heartbeat_checker, every 100 ms).",
    ),
    "expire_detect_lag_us": (
        "ob_rs_lease_expire_detect_lag_seconds",
        "",
        "Delay between a server's lease expiring and the checker noticing it.",
    ),
    "event_loop_stall_us": (
        "ob_rs_event_loop_stall_seconds",
        "",
        "Length of each stall of the gRPC event loop counted in ob_rs_event_loop_stalls.",
    ),
    "persist_flush_us": (
        "ob_rs_persist_flush_seconds",
        "",
        "Duration of one persistence-queue flush that wrote something.",
    ),
    "take_office_us": ("ob_rs_take_office_seconds", "", "Duration of taking office."),
    "task_run_us.": (
        "ob_rs_task_run_seconds",
        "task",
        "Duration of one cycle of a background task, by task.",
    ),
    "gc_pause_us.gen": (
        "ob_rs_gc_pause_seconds",
        "generation",
        "Python garbage-collector pauses (every thread stops), by generation.",
    ),
}
