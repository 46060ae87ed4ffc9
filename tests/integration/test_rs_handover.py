"""ALTER SYSTEM SWITCH ROOTSERVICE LEADER with real processes: two ``rootservice serve`` on
one PostgreSQL database and three agents heartbeating, a client sending statements to both
root services throughout. The named standby takes office without waiting for the lease to
run out, no server is ever shown anything but ACTIVE (through the new leader's take-office
grace and its judgement), and every statement sent meanwhile is answered OK or with a
clear OceanBase error, never left hanging. Then the refusals: the leader itself, an address
where no root service ever ran, a standby that stopped running.

Every wait is bounded; nothing asserts on speed (the handover's duration is recorded as a
test property).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.integration.test_ha import (
    LEASE_S,
    HaCluster,
    StatusWatch,
    execute_on,
    metrics,
    wait_past_take_office_grace,
)
from tests.support.cluster import ProcSet, wait_until
from tests.support.pgserver import PgServer
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

#: The errors a statement may get while the office changes hands: the old leader forwards
#: to a successor not yet in office, or not yet in service.
CLEAR_DURING_HANDOVER = {"OB_RS_NOT_MASTER"}


@pytest.fixture
def ha(procs: ProcSet, tmp_path: Path, pg_server: PgServer) -> Iterator[HaCluster]:
    """Two RS processes' cluster on a fresh PostgreSQL database (as test_ha's)."""
    name = f"handover_{free_port()}"
    pg_server.create_database(name)
    c = HaCluster(procs, tmp_path, pg_server.url(name))
    try:
        yield c
    finally:
        c.close()
        procs.stop_all()
        pg_server.drop_database(name)


class Traffic:
    """Sends statements to every RS in turn from a thread (each call bounded by a
    deadline) and records each answer: ``(name, message)``, name "OK" for success and
    "HANG" for a call that ran into its deadline or failed at the transport."""

    def __init__(self, addrs: list[str]) -> None:
        self.addrs = addrs
        self.answers: list[tuple[str, str, str]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        statements = (
            "ALTER SYSTEM SET server_check_interval = '20s'",
            "SELECT COUNT(*) FROM DBA_OB_SERVERS",
        )
        for i in range(100_000):
            if self._stop.is_set():
                return
            addr = self.addrs[i % len(self.addrs)]
            text = statements[(i // len(self.addrs)) % len(statements)]
            try:
                resp = execute_on(addr, text, timeout_s=15)
                name = resp.error.name or "OK"
                self.answers.append((name, resp.error.message, text))
            except grpc.RpcError as e:
                self.answers.append(("HANG", f"{addr}: {e.code()} {e.details()}", text))
            self._stop.wait(0.05)

    def __enter__(self) -> Traffic:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(30)


def test_switch_rootservice_leader_hands_over_at_once(
    ha: HaCluster, record_property: Callable[[str, object], None]
) -> None:
    c = ha
    c.start_all_rs()
    old = c.wait_leader()
    new = next(a for a in c.rs_addrs if a != old)
    c.wait_state(new, "NOT_MASTER", 10)
    servers = c.bootstrap(3)
    c.wait_full_service(old)
    epoch, holder = c.lease()
    assert holder == old

    with StatusWatch(c, {s: {"ACTIVE"} for s in servers}) as watch, Traffic(c.rs_addrs) as traffic:
        wait_until(lambda: len(traffic.answers) >= 4, 30, message="traffic flows")
        before = len(traffic.answers)
        t0 = time.monotonic()
        resp = execute_on(old, f"ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER = '{new}'", 30)
        took = time.monotonic() - t0
        assert resp.error.code == 0, (resp.error.name, resp.error.message)
        assert resp.info.startswith(f"root service {new} took office with epoch ")
        c.wait_full_service(new)
        wait_past_take_office_grace(new, watch)
        wait_until(lambda: len(traffic.answers) >= before + 8, 30, message="traffic after")
    record_property("handover_s", round(took, 3))
    # Nobody INACTIVE (nor anything else) at any poll, through the whole handover.
    assert watch.polls > 10 and watch.bad == [], watch.bad[:10]
    # Every statement answered: OK, or the clear refusal of a leader being replaced.
    outcomes = Counter(name for name, _, _ in traffic.answers)
    unclear = [a for a in traffic.answers if a[0] not in {"OK", *CLEAR_DURING_HANDOVER}]
    assert unclear == [], unclear[:5]
    assert all(msg for name, msg, _ in traffic.answers if name != "OK")
    record_property("outcomes", dict(outcomes))
    # The successor holds the next epoch (or a later one of its own, should it have stepped
    # down and taken office again on a loaded machine); the old leader stands by.
    new_epoch, holder = c.lease()
    assert holder == new and new_epoch > epoch
    c.wait_state(old, "NOT_MASTER", 10)
    m = metrics(new)
    assert m is not None and m["alive"] == 3 and m["epoch"] == new_epoch
    assert f"handed the office of epoch {epoch} over to {new}" in c.rs[old].log_text()
    # Statements sent to either RS reach the new leader.
    assert execute_on(old, "ALTER SYSTEM SET server_check_interval = '30s'").error.code == 0
    assert c.db("SELECT value FROM __all_sys_parameter WHERE name = 'server_check_interval'") == [
        ("30s",)
    ]

    # Refusals, each leaving the new leader in office.
    def refused(target: str) -> tuple[str, str]:
        r = execute_on(old, f"ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER '{target}'", 30)
        return r.error.name, r.error.message

    name, msg = refused(new)
    assert name == "OB_OP_NOT_ALLOW" and "the leader already" in msg
    name, msg = refused("127.0.0.1:1")
    assert name == "OB_ENTRY_NOT_EXIST" and "127.0.0.1:1" in msg
    # The old leader stops: after a lease without its election rounds it is not alive.
    c.rs[old].stop()
    time_stopped = time.monotonic()
    wait_until(lambda: time.monotonic() - time_stopped > 1.5 * LEASE_S, 10, 0.1)
    r = execute_on(new, f"ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER '{old}'", 30)
    assert r.error.name == "OB_OP_NOT_ALLOW" and "not alive" in r.error.message
    assert c.lease() == (new_epoch, new)
    c.wait_full_service(new)
