"""A copy whose log stream's leader moved and forgot it, with real processes (PostgreSQL): a
DELETE SERVER whose copy is handed out, then the leader moves and the new leader forgets the
copy before the copy's log catch-up (an agent keeps its learners in memory only, so a restart
forgets them, as a spec built before the announcement would).

What must happen, each read from the processes: the copy's catch-up is refused (the copy's
agent logs the refusal and reports it as ``catch_up_error``); the RS's ``learner_sync`` announces
the copy again to the current leader, citing that refusal (its log line and
``learner_reannounced_total``); the copy then fetches its log (its agent logs "fetching the log
again" after the refusal) and is in service; the job reaches SUCCESS. The lag detector's
resend, which would also end the job, plays no part: no ``copy_stalled`` event for the copy.
Before the re-announcement existed the job stalled for ever (a CI run of
``test_planner_failure``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.test_delete_server import job
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report
from tests.support.cluster import ProcSet, rs_cmd, wait_until
from tests.support.timescale import scaled

pytestmark = pytest.mark.integration

KEY = (1002, 1001)


@pytest.fixture
def tc(procs: ProcSet, tmp_path: Path, db_url: str) -> TenantCluster:
    return TenantCluster(procs, tmp_path, db_url)


# One database: the learner's announcement runs between the agents and the RS's memory
# (tests/unit/rootservice/tenants/test_learner_sync.py); the member changes it leads to are
# every DELETE SERVER's, run on both by test_delete_server (the suite's time).
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_copy_whose_leader_moved_and_forgot_it_still_completes_the_delete(
    tc: TenantCluster,
) -> None:
    c = tc
    flags = {
        **RS_FLAGS,
        # The new leader must be restarted within its lease, so that its log stream stays
        # with it: a python agent's start-up takes longer than the suite's 2 s lease on a loaded
        # machine (the lease expired and the leader moved on), hence a lease the wait factor
        # scales.
        "lease_time": f"{max(6000, round(scaled(3000)))}ms",
        "heartbeat_interval": "500ms",
        "allow_short_timings": True,
        "rpc_timeout": "1s",
        "balancer_interval": "1s",
        "empty_server_check_interval": "1s",
    }
    c.rs = c.procs.start(rs_cmd(c.db_url, c.rs_addr, c.tmp / "rs", **flags), "rs")
    c.rs.wait_healthy(c.rs_addr, timeout_s=30)
    z1, z2, z3 = c.bootstrap()
    # The pandas plans: this test is about the copy, not the planner (no JVM to start).
    c.ok("ALTER SYSTEM SET balancer_planner = 'local'")
    spare = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{spare}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(spare) == "ACTIVE", 15, message="spare ACTIVE")
    c.make_tenant(ls_count=1)
    wait_until(lambda: c.leaders_on(z1) == 1, 30, message="the LS led from z1")
    # The copy to the spare stops before its log catch-up (its data file is copied).
    stop = c.data_dir(spare) / "FAULT_REPLICATION_STOP"
    stop.touch()
    c.ok(f"ALTER SYSTEM DELETE SERVER '{z1}'")

    def data_copied() -> bool:
        r = replica_report(spare).get(KEY)
        return r is not None and r.copy_from != "" and 0 < r.data_size == r.bytes_copied

    wait_until(data_copied, 60, message="the copy's data file in place")
    # The leader moves off the deleted server between the hand-out and the catch-up ...
    c.ok(f"ALTER SYSTEM SWITCH REPLICA LEADER LS = 1001 SERVER = '{z2}' TENANT = t1")
    wait_until(lambda: c.leaders_on(z2) == 1, 30, message="the LS led from z2")
    # ... and the new leader forgets its learners (kill -9 and restart within the lease).
    restart_keeping_the_leadership(c, z2, [z3, spare])
    stop.unlink()
    # The ceiling is for slow machines: the cause is asserted below, not the time.
    wait_until(lambda: job(c, z1)["status"] == "SUCCESS", 300, message="DELETE SERVER done")
    assert z1 not in c.statuses()
    assert KEY in replica_report(spare) and replica_report(spare)[KEY].in_service
    events = [e for (e,) in c.ok("SELECT event FROM __all_rootservice_event_history")]
    assert "finish_delete_server" in events
    assert z3 in c.statuses()

    # The re-announcement to the current leader, citing a refusal of the catch-up.
    announced = re.findall(
        rf"the copy on {re.escape(spare)} was refused its log \((\S+) ([A-Z_]+)[^\n]*\): "
        rf"announced again to leader {re.escape(z2)} at term \d+",
        c.rs.log_text(),
    )
    assert announced, c.rs.log_tail(80)
    assert c.metrics().get("learner_reannounced_total", 0) >= 1
    # The refusal it cites, in the copy's agent's log, and the catch-up after it.
    spare_log = c.agents[spare].log_text()
    peer, code = announced[0]
    refused = spare_log.find(f"(building): log catch-up from {peer}: {code}")
    assert refused >= 0, (announced, spare_log[-4000:])
    assert spare_log.find("(building): fetching the log again", refused) > refused
    # Not the lag detector's resend.
    stalled = c.ok(
        "SELECT value3 FROM __all_rootservice_event_history WHERE event = 'copy_stalled'"
    )
    assert [spare] not in stalled, stalled


def _start_service_time(c: TenantCluster, server: str) -> int:
    port = server.rsplit(":", 1)[1]
    return int(c.ok(f"SELECT start_service_time FROM __all_server WHERE svr_port = {port}")[0][0])


def _reconciler_rounds(c: TenantCluster) -> int:
    return int(c.metrics().get("task_run_us.ls_reconciler", {}).get("count", 0))


def restart_keeping_the_leadership(
    c: TenantCluster, leader: str, others: list[str], attempts: int = 3
) -> None:
    """Kill -9 ``leader`` of LS ``KEY`` and start it again, until it leads at the same term
    across its restart: what it knew of the copy in memory is then forgotten, which is the
    scenario. A restarted agent reports ``start_service_time`` 0 until it serves, and a server
    that has not started cannot lead, so a reconciler round in that window moves the
    leadership away; the manual leader then takes it back at a new term, with a spec that
    names the copy (a CI run saw this, and the copy caught up without any refusal). Such a
    voided attempt is redone, at most ``attempts`` times in all. Fails the test when none
    held."""
    for attempt in range(1, attempts + 1):
        wait_until(
            lambda: (
                (r := replica_report(leader).get(KEY)) is not None
                and r.leader == leader
                and c.leaders_on(leader) == 1
            ),
            30,
            message=f"{leader} leading before restart {attempt}",
        )
        term = replica_report(leader)[KEY].term
        before = _start_service_time(c, leader)
        c.agents[leader].kill()
        c.restart_agent(leader)
        # The RS has seen the new process serve: from here on it has no reason to move the
        # leadership (the lease is long enough for the restart).
        wait_until(
            lambda before=before: _start_service_time(c, leader) not in (0, before),
            30,
            message=f"{leader} serving again after restart {attempt}",
        )
        # A round that read the not-yet-serving state may still be switching: two more
        # completed rounds include one that started after the RS saw the new process serve.
        rounds = _reconciler_rounds(c)
        wait_until(
            lambda rounds=rounds: _reconciler_rounds(c) >= rounds + 2,
            30,
            message="two reconciler rounds after the restart",
        )
        terms = [r.term for a in [leader, *others] if (r := replica_report(a).get(KEY))]
        mine = replica_report(leader).get(KEY)
        if mine is not None and mine.leader == leader and max(terms) == term == mine.term:
            return
    pytest.fail(f"{leader} lost the leadership of {KEY} in each of {attempts} restarts")
