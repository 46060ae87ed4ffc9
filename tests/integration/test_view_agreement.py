"""Statements that answer "done" answer only once the views a DBA reads agree, on real
processes and both databases: ``rootservice`` and three ``observer-agent`` processes hosting
a tenant's two log streams.

Each step reads the view in the very next statement after the OK, never waiting:

- SWITCH REPLICA LEADER: ``DBA_OB_LS_LOCATIONS`` shows the new leader and only it;
- DRAIN SERVER: no ``LEADER`` row on the drained server, one per log stream elsewhere;
- ISOLATE SERVER and STOP ZONE: no ``LEADER`` row on the server / in the zone;
- START SERVER during a drain: ``DBA_OB_SERVER_DRAINS`` shows the drain CANCELED, not
  DRAINING.

The replica meta table is synced by its task every ``ls_check_interval``; the cluster runs
with 3 s there so an answer that runs ahead of the view is seen by the next read every time
(with the tests' usual 300 ms it is seen only now and then).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from sql.client import execute
from tests.integration.test_tenants import RS_FLAGS, TenantCluster
from tests.support import pki
from tests.support.cluster import ProcSet, wait_until

pytestmark = pytest.mark.integration


def _leaders(c: TenantCluster) -> dict[int, list[str]]:
    """LS id -> the servers ``DBA_OB_LS_LOCATIONS`` shows as its LEADER."""
    out: dict[int, list[str]] = {}
    for ls, server, _, role in c.locations():
        out.setdefault(int(ls), [])
        if role == "LEADER":
            out[int(ls)].append(server)
    return out


def test_answers_wait_for_the_views(procs: ProcSet, tmp_path: Path, db_url: str) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    # Every disagreement, so one run shows each statement that answered ahead of its view.
    ahead: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            ahead.append(what)

    c.start_rs(**{**RS_FLAGS, "ls_check_interval": "3s"})
    a1, a2, a3 = c.bootstrap(3)
    c.make_tenant(ls_count=2, primary="z1;z3;z2")
    wait_until(lambda: c.leaders_on(a1) == 2, 60, message="both leaders on a1")

    # SWITCH REPLICA LEADER: the view names the new leader, and only it, at once.
    c.ok(f"ALTER SYSTEM SWITCH REPLICA LEADER LS = 1001 SERVER = '{a2}' TENANT = t1")
    got = _leaders(c)
    check(got[1001] == [a2], f"SWITCH REPLICA LEADER to {a2}: LS 1001 led by {got[1001]}")
    # The manual leader is sticky: DEFAULT gives LS 1001 back to the primary zone's balancing.
    c.ok(f"ALTER SYSTEM SWITCH REPLICA DEFAULT LS = 1001 SERVER = '{a2}' TENANT = t1")

    # DRAIN SERVER: no LEADER row left on a1, each log stream it moved led from elsewhere.
    # Only those: the primary-zone balancing may be moving another one (LS 1001, given back
    # by DEFAULT, from a2 to z3 once a1 is isolated) when the drain answers, and that one
    # can show no LEADER row for a moment (a clean-clone run read it between a2's
    # resignation and a3's row).
    moved = {ls for ls, v in _leaders(c).items() if a1 in v}
    c.ok(f"ALTER SYSTEM DRAIN SERVER '{a1}' TIMEOUT 60s")
    got = _leaders(c)
    check(all(v != [a1] and a1 not in v for v in got.values()), f"DRAIN {a1}: leaders {got}")
    check(moved != set(), f"DRAIN {a1}: it led nothing before ({got})")
    check(all(len(got[ls]) == 1 for ls in moved), f"DRAIN {a1}: leaders {got} of {moved}")

    # ISOLATE after START: again no LEADER row on a1 in the next read.
    c.ok(f"ALTER SYSTEM START SERVER '{a1}'")
    wait_until(lambda: c.leaders_on(a1) == 2, 60, message="leaders back on a1")
    c.ok(f"ALTER SYSTEM ISOLATE SERVER '{a1}'")
    got = _leaders(c)
    check(all(a1 not in v for v in got.values()), f"ISOLATE {a1}: leaders {got}")
    c.ok(f"ALTER SYSTEM START SERVER '{a1}'")
    wait_until(lambda: c.leaders_on(a1) == 2, 60, message="leaders back on a1")

    # STOP ZONE: no LEADER row in the zone in the next read.
    c.ok("ALTER SYSTEM STOP ZONE 'z1'")
    got = _leaders(c)
    check(all(a1 not in v for v in got.values()), f"STOP ZONE z1: leaders {got}")
    c.ok("ALTER SYSTEM START ZONE 'z1'")
    wait_until(lambda: c.leaders_on(a1) == 2, 60, message="leaders back on a1")

    # START SERVER during a drain that cannot finish (a3, the preferred new leader, is
    # down): the drain's row says CANCELED in the next read.
    ip, port = a1.rsplit(":", 1)

    def drain_status() -> str:
        rows = c.ok(
            f"SELECT STATUS FROM DBA_OB_SERVER_DRAINS WHERE SVR_IP = '{ip}' AND SVR_PORT = {port}"
        )
        return str(rows[0][0]) if rows else ""

    c.agents[a3].kill()
    answers: list[Any] = []
    stmt = threading.Thread(
        target=lambda: answers.append(
            execute(
                [c.rs_addr], f"ALTER SYSTEM DRAIN SERVER '{a1}' TIMEOUT 60s", 70, pki.credentials()
            )
        )
    )
    stmt.start()
    try:
        wait_until(lambda: drain_status() == "DRAINING", 20, message="the drain waiting")
        c.ok(f"ALTER SYSTEM START SERVER '{a1}'")
        got_status = drain_status()
        check(got_status == "CANCELED", f"START during a drain: drain row {got_status}")
    finally:
        stmt.join(75)
    assert answers and answers[0].error.name == "OB_CANCELED", answers
    assert not ahead, ahead


def test_lost_server_statements_wait_for_the_views(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    """FORCE DELETE SERVER of the dead leader, then RECOVER LS from the next dead leader:
    right after each OK, every log stream shows one LEADER row, on a live member."""
    c = TenantCluster(procs, tmp_path, db_url)
    ahead: list[str] = []
    c.start_rs(**{**RS_FLAGS, "ls_check_interval": "3s"})
    a1, a2, a3 = c.bootstrap(3)
    c.make_tenant(ls_count=2, primary="z1;z3;z2")
    wait_until(lambda: c.leaders_on(a1) == 2, 60, message="both leaders on a1")

    # FORCE DELETE of a1, the leader, once it is INACTIVE.
    c.agents[a1].kill()
    wait_until(lambda: c.statuses()[a1] == "INACTIVE", 20, message="a1 INACTIVE")
    c.ok(f"ALTER SYSTEM FORCE DELETE SERVER '{a1}'")
    got = _leaders(c)
    if not all(len(v) == 1 and v[0] in (a2, a3) for v in got.values()):
        ahead.append(f"FORCE DELETE {a1}: leaders {got}")

    # a3, the new leader (z3 before z2), dies too: both log streams (members a2, a3) lost
    # their majority; a2 survives and must be shown leading.
    wait_until(lambda: c.leaders_on(a3) == 2, 30, message="both leaders on a3")
    c.agents[a3].kill()
    wait_until(lambda: c.statuses()[a3] == "INACTIVE", 20, message="a3 INACTIVE")
    c.ok(f"ALTER SYSTEM RECOVER LS FROM LOST SERVERS '{a3}'")
    got = _leaders(c)
    if got != {1001: [a2], 1002: [a2]}:
        ahead.append(f"RECOVER LS from {a3}: leaders {got}")
    assert not ahead, ahead
