"""In-process RootService on a real database with a FakeClock, for unit tests.

``make_rs(db_url, tmp_path)`` opens an RS on the database (migrations applied), takes
office and, with ``servers``, seeds a bootstrapped cluster the way a restarted RS finds one:
zones and ``__all_server`` rows in the tables, then ``do_restart`` loads them. No scheduler
runs: tests call each task's ``run_once`` and advance the clock themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from rootservice.balancer.planner import Planner
from rootservice.config import RsSettings
from rootservice.db import param_repo, server_repo, zone_repo
from rootservice.db.zone_repo import ZoneInfo
from rootservice.servers.status import HeartbeatStatus, ServerStatus
from tests.support.db_template import fill_from_template

S = 1_000_000
# Where every FakeClock starts (2026-01-01): the times of the lease requests built here.
FAKE_START_US = FakeClock().now_us()

#: The clock of the last RS :func:`make_rs` made. The agents of these tests live on its host:
#: their lease requests carry its time, as a real agent's carry its own clock (the RS refuses
#: a ``current_server_time`` more than ``MAX_CLOCK_SKEW_US`` off its clock).
_agent_clock: FakeClock | None = None


def agent_now_us() -> int:
    """The test agents' clock: the last RS's fake clock, :data:`FAKE_START_US` before any."""
    return _agent_clock.now_us() if _agent_clock is not None else FAKE_START_US


LEASE = 10 * S
OFFLINE = 3600 * S

# (server, zone) of the seeded cluster: two servers in z1, one in z2 and one in z3.
SEEDED = [
    ("127.0.0.1:3001", "z1"),
    ("127.0.0.1:3002", "z2"),
    ("127.0.0.1:3003", "z3"),
    ("127.0.0.1:3004", "z1"),
]
(A, ZA), (B, ZB), (C, ZC), (D, ZD) = SEEDED  # A and D in z1, B in z2, C in z3

ROOT = Principal("root", "127.0.0.1:40000")
"""The principal statements run as in tests that are not about privileges."""


def make_rs(
    db_url: str,
    tmp_path: Path,
    *,
    seed: bool = True,
    planner: Planner | None = None,
    **overrides: Any,
) -> RootService:
    global _agent_clock
    # An empty database gets its schema by copy, not by migrating (tests/support/db_template.py).
    fill_from_template(db_url)
    clock = _agent_clock = FakeClock()
    settings = RsSettings(
        data_dir=tmp_path,
        db_url=db_url,
        rpc_addr="127.0.0.1:2881",
        rpc_timeout="200ms",
        **overrides,
    )
    rs = RootService(
        settings,
        clock,
        start_scheduler=False,
        sleep=lambda seconds: clock.advance(int(seconds * S)),
        background=lambda fn: fn(),
        planner=planner,
    )
    rs.open()
    rs.start()
    # A real RS retries a failed election round at its next one; here nothing runs rounds,
    # and one round can fail on a loaded machine (a 2 s idle-in-transaction cut seen once
    # on PostgreSQL at load 9). Bounded: five rounds.
    for _ in range(5):
        if rs.term.epoch > 0:
            break
        rs.election.run_once()
    if seed:
        seed_cluster(rs)
        rs.identity.bootstrapped = True
        rs.office.do_restart()
    return rs


def seed_cluster(rs: RootService, servers: list[tuple[str, str]] = SEEDED) -> None:
    """Write zones z1..z3 (ACTIVE) and the given servers (INACTIVE, never heartbeated) as
    BOOTSTRAP + ADD SERVER would have left them."""
    now = rs.clock.now_us()
    with rs.store.txn() as conn:
        for z in sorted({z for _, z in servers}):
            zone_repo.upsert_zone(conn, ZoneInfo(z, "ACTIVE", "r1", ""), now)
        for i, (server, zone) in enumerate(servers, start=1):
            ip, port = server.rsplit(":", 1)
            s = ServerStatus(id=i, zone=zone, ip=ip, port=int(port), sql_port=int(port) + 1000)
            s.last_offline_time = now
            server_repo.insert_server(conn, s.to_row(), now)
        param_repo.set_param(conn, param_repo.PARAM_CLUSTER_ID, "c0ffee", now)
        param_repo.set_param(conn, param_repo.PARAM_MAX_SERVER_ID, str(len(servers)), now)
        param_repo.set_param(conn, param_repo.PARAM_BOOTSTRAP_TIME, str(now), now)


def hb(server: str, zone: str, **fields: Any) -> obrpc_pb2.LeaseRequest:
    """A valid lease request from ``server`` (fields override)."""
    tail = server.rsplit(":", 1)[-1]
    port = int(tail) if tail.isdigit() else 1000
    req = obrpc_pb2.LeaseRequest(
        version=1,
        zone=zone,
        server=server,
        sql_port=port + 1000,
        build_version="4.2.0.0-test",
        # FakeClock's start: the RS refuses times before 2000 or ahead of its clock.
        start_service_time=FAKE_START_US,
        current_server_time=agent_now_us(),
        cluster_id="c0ffee",
    )
    req.resource_info.cpu_total = 2
    req.resource_info.mem_total = 8 << 30
    for k, v in fields.items():
        if k == "resource_info":
            req.resource_info.CopyFrom(v)
        else:
            setattr(req, k, v)
    return req


def heartbeat_all(rs: RootService, servers: list[tuple[str, str]] = SEEDED) -> None:
    for server, zone in servers:
        rs.heartbeats.receive_hb(hb(server, zone))


def error_name(fn: Any, *args: Any, **kwargs: Any) -> str:
    """Run ``fn`` and return the name of the ObError it raised (AssertionError if none)."""
    try:
        fn(*args, **kwargs)
    except ObError as e:
        return e.name
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise")


def server_row(rs: RootService, server: str) -> dict[str, Any] | None:
    ip, port = server.rsplit(":", 1)
    with rs.store.engine.connect() as conn:
        r = (
            conn.execute(
                sa.text("SELECT * FROM __all_server WHERE svr_ip = :ip AND svr_port = :p"),
                {"ip": ip, "p": int(port)},
            )
            .mappings()
            .first()
        )
    return dict(r) if r else None


def events(rs: RootService, event: str | None = None) -> list[dict[str, Any]]:
    q = "SELECT * FROM __all_rootservice_event_history"
    params: dict[str, Any] = {}
    if event:
        q += " WHERE event = :e"
        params["e"] = event
    with rs.store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.text(q + " ORDER BY id"), params).mappings()]


def jobs(rs: RootService) -> list[dict[str, Any]]:
    with rs.store.engine.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                sa.text("SELECT * FROM __all_rootservice_job ORDER BY job_id")
            ).mappings()
        ]


def flush(rs: RootService) -> None:
    rs.persist.run_once()
    assert rs.persist.depth() == 0


def hb_status(rs: RootService, server: str) -> HeartbeatStatus:
    """The heartbeat status of ``server`` in the whitelist (it must be whitelisted)."""
    s = rs.whitelist.get(server)
    assert s is not None
    return s.hb_status
