"""The plan of RECOVER LS / FORCE DELETE SERVER, pure: the survivor
choice (both sides of each rule: term, log end, in service, primary zone), the plan digest
(what changes it and what does not), REMOVE_MEMBER against RECOVER, the refusals, and the
plan's round trip through the job row."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace

import pytest

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.tenants.recovery_plan import (
    Holder,
    PlanInputs,
    RecoveryPlan,
    choose_survivor,
    make_plan,
    plan_digest,
    plan_rows,
)
from rootservice.tenants.reports import LsView
from rootservice.tenants.topology import LsPlan
from tests.support.tenants import replica

A, B, C = "10.0.0.1:2882", "10.0.0.2:2882", "10.0.0.3:2882"
ZONES = {A: "z1", B: "z2", C: "z3"}
KEY = (1002, 1001)


def h(server: str, term: int = 5, end: int = 100, in_service: bool = True, zp: int = 0) -> Holder:
    return Holder(server, term, end, in_service, zp)


@pytest.mark.parametrize(
    ("better", "worse"),
    [
        # rule 1: the higher term wins, even with a shorter log
        (h(B, term=6, end=10), h(A, term=5, end=900)),
        # rule 2: at one term, the longer log wins, even out of service / in a worse zone
        (h(B, end=101, in_service=False, zp=2), h(A, end=100)),
        # rule 3: at one term and log end, in service wins, even in a worse zone
        (h(B, zp=2), h(A, in_service=False, zp=0)),
        # rule 4: all else equal, the better primary-zone priority wins
        (h(B, zp=0), h(A, zp=1)),
        # last: the address, so the choice never depends on the order of the reports
        (h(A), h(B)),
    ],
)
def test_survivor_rules_in_order(better: Holder, worse: Holder) -> None:
    assert choose_survivor([better, worse]) == better
    assert choose_survivor([worse, better]) == better


def test_no_holder_no_survivor() -> None:
    assert choose_survivor([]) is None


def _step_inputs(
    reports: dict[str, obrpc_pb2.ReplicaInfo],
    alive: Set[str],
    *,
    meta_term: int = 0,
    mark: int = 0,
    dead_reports: dict[str, obrpc_pb2.ReplicaInfo] | None = None,
) -> PlanInputs:
    """One LS of A, B, C (primary zone z1); ``reports`` of the alive servers shape the view
    (leader: an alive LEADER), ``dead_reports`` are the last reports of dead ones."""
    plan = LsPlan(KEY, {s: (z, 1) for s, z in ZONES.items()}, {"z1": 0, "z2": 1, "z3": 2}, "z1")
    view = LsView(KEY, dict(reports))
    for s, r in reports.items():
        view.term = max(view.term, r.term)
        if r.role == obrpc_pb2.LEADER and s in alive:
            view.leader = s
    every = {s: {KEY: r} for s, r in {**reports, **(dead_reports or {})}.items()}

    def healthy(s: str, r: obrpc_pb2.ReplicaInfo | None, exclude: Set[str]) -> bool:
        return s in alive and s not in exclude and r is not None and r.in_service

    return PlanInputs(
        plans={KEY: plan},
        views={KEY: view},
        reports=every,
        meta_terms={KEY: meta_term},
        marks={KEY: mark},
        is_alive=lambda s: s in alive,
        healthy=healthy,
        zone_priority=lambda p, s: p.zone_priority[ZONES[s]],
    )


def rep(me: str, *, leader: str = A, term: int = 5, end: int = 100) -> obrpc_pb2.ReplicaInfo:
    return replica(KEY, leader, [A, B, C], me=me, term=term, end=end)


def test_two_lost_of_three_recover_on_the_survivor_above_every_term() -> None:
    inputs = _step_inputs(
        {C: rep(C, end=90)},
        {C},
        meta_term=7,
        dead_reports={A: rep(A, end=120), B: rep(B, end=95)},
    )
    plan = make_plan([B, A], inputs)
    (step,) = plan.steps
    assert step.action == "RECOVER" and step.survivor == C
    assert step.members_before == (A, B, C) and step.members_after == (C,)
    assert step.removed == (A, B)
    # above the reports' term 5 and the meta table's 7
    assert step.new_term == 8
    assert (step.survivor_log_end, step.highest_log_end, step.lost_entries) == (90, 120, 30)
    assert plan.removed == (A, B)
    row = plan_rows(plan)[0]
    assert row[:5] == (1002, 1001, plan.plan_id, "RECOVER", C)
    assert row[6:9] == (90, 120, 30)


def test_the_longer_log_survives_between_two_holders() -> None:
    # five members would be needed for two survivors of a lost majority: here B and C
    # survive A alone but B is stopped (not healthy), so the LS has no majority in service.
    reports = {B: rep(B, end=130), C: rep(C, end=100)}
    inputs = _step_inputs(reports, {B, C})
    healthy_c_only = replace(inputs, healthy=lambda s, r, ex: s == C)
    (step,) = make_plan([A], healthy_c_only).steps
    assert step.action == "RECOVER" and step.survivor == B
    assert step.members_after == (B, C)
    reports = {B: rep(B, end=100), C: rep(C, end=130)}
    inputs = _step_inputs(reports, {B, C})
    healthy_c_only = replace(inputs, healthy=lambda s, r, ex: s == C)
    assert make_plan([A], healthy_c_only).steps[0].survivor == C


def test_a_majority_left_is_a_member_removal_not_a_recovery() -> None:
    inputs = _step_inputs({B: rep(B, leader=B), C: rep(C, leader=B)}, {B, C})
    (step,) = make_plan([A], inputs).steps
    assert step.action == "REMOVE_MEMBER"
    assert step.members_after == (B, C) and step.survivor == B and step.new_term == 0
    assert step.lost_entries == 0


def test_refusals_name_the_log_stream() -> None:
    # B is neither alive nor named: it may come back with the longest log
    inputs = _step_inputs({C: rep(C)}, {C}, dead_reports={B: rep(B)})
    with pytest.raises(ObError) as e:
        make_plan([A], inputs)
    assert e.value.name == "OB_OP_NOT_ALLOW"
    assert "log stream 1001 of tenant 1002" in str(e.value) and B in str(e.value)
    # C is alive but reports no replica: nothing survives
    with pytest.raises(ObError) as e:
        make_plan([A, B], _step_inputs({}, {C}))
    assert "no replica of it survives" in str(e.value)


def test_untouched_log_streams_are_not_in_the_plan() -> None:
    inputs = _step_inputs({C: rep(C)}, {C})
    assert make_plan(["10.0.0.9:2882"], inputs).steps == ()
    assert make_plan([A, B], inputs, only=lambda k: k != KEY).steps == ()


def test_digest_moves_with_the_reports_it_rests_on() -> None:
    base = make_plan([A, B], _step_inputs({C: rep(C, end=90)}, {C}))
    same = make_plan([B, A], _step_inputs({C: rep(C, end=90)}, {C}))
    assert (same.digest, same.plan_id) == (base.digest, base.plan_id)
    for changed in (
        _step_inputs({C: rep(C, end=91)}, {C}),  # the survivor's log end
        _step_inputs({C: rep(C, term=6, end=90)}, {C}),  # its term
    ):
        assert make_plan([A, B], changed).digest != base.digest
    off = replica(KEY, A, [A, B, C], me=C, term=5, end=90, in_service=False)
    assert make_plan([A, B], _step_inputs({C: off}, {C})).digest != base.digest
    # the removed servers are part of it
    assert plan_digest([A], base.steps) != base.digest
    # a dead server's last report (what would be lost) does not move the plan's premises
    later = make_plan([A, B], _step_inputs({C: rep(C, end=90)}, {C}, dead_reports={A: rep(A)}))
    assert later.digest == base.digest


def test_a_holder_still_leading_counts_without_its_log_end() -> None:
    # An agent keeps appending while it leads without a majority: its growing log must not
    # make every plan stale, and it survives by term anyway.
    one = make_plan([A, B], _step_inputs({C: rep(C, leader=C, end=90)}, {C}))
    two = make_plan([A, B], _step_inputs({C: rep(C, leader=C, end=95)}, {C}))
    assert one.digest == two.digest and two.steps[0].survivor_log_end == 95


def test_plan_round_trips_through_the_job_row() -> None:
    inputs = _step_inputs({C: rep(C, end=90)}, {C}, dead_reports={A: rep(A, end=120)})
    plan = make_plan([A, B], inputs)
    back = RecoveryPlan.from_json(plan.to_json())
    assert back == plan and back.plan_id == plan.plan_id


def test_the_highest_log_end_kept_in_the_table_counts() -> None:
    # The replica that reached 150 died before this RS saw it: only the table remembers.
    plan = make_plan([A, B], _step_inputs({C: rep(C, end=90)}, {C}, mark=150))
    step = plan.steps[0]
    assert (step.highest_log_end, step.lost_entries) == (150, 60)
    low = make_plan([A, B], _step_inputs({C: rep(C, end=90)}, {C}, mark=50))
    assert low.steps[0].lost_entries == 0
