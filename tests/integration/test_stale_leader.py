"""A former leader's rows while its server is away, in a real cluster: real ``rootservice``
and ``observer-agent`` processes hosting replicas, on SQLite and PostgreSQL.

The agent leading both log streams (primary zone z1) is SIGSTOPped past its lease; the RS
moves the leaders away. Its rows in ``__all_ls_meta_table`` are its last report (role
LEADER, the old term) while it cannot report, and again for a moment after it resumes, until
it hears of the new term. Every read of ``DBA_OB_LS_LOCATIONS``, ``CDB_OB_LS_LOCATIONS`` and
the status API (``/api/v1/servers``' ``leader_count``, ``/api/v1/ls_locations``) during the
pause and after the resume shows at most one LEADER per log stream, exactly one once the
leaders moved, and the paused server's rows are marked stale with the time of their last
report (OceanBase's ``ObLSInfo::find_leader``: the leader is the LEADER row at the highest
``proposal_id``).
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from obcommon.security.certs import CA_CERT, Role, cert_file, key_file
from tests.integration.test_tenants import RS_FLAGS, TenantCluster
from tests.support import pki
from tests.support.cluster import ProcSet, wait_until
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

LS_IDS = (1001, 1002)


def _api(http: str, path: str) -> Any:
    """The JSON document of one HTTPS GET of the status API (client certificate, 10 s)."""
    ctx = ssl.create_default_context(cafile=str(pki.root() / "ca" / CA_CERT))
    d = pki.client_certs()
    ctx.load_cert_chain(d / cert_file(Role.CLIENT, "root"), d / key_file(Role.CLIENT, "root"))
    with urllib.request.urlopen(f"https://{http}{path}", context=ctx, timeout=10) as r:
        return json.loads(r.read())


def _view_leaders(c: TenantCluster, view: str) -> dict[int, list[str]]:
    """LS id -> the servers one read of ``view`` shows LEADER."""
    out: dict[int, list[str]] = {ls: [] for ls in LS_IDS}
    for ls, ip, port in c.ok(f"SELECT ls_id, svr_ip, svr_port FROM {view} WHERE role = 'LEADER'"):
        out.setdefault(int(ls), []).append(f"{ip}:{port}")
    return out


def _stale_rows(c: TenantCluster, server: str) -> list[list[Any]]:
    """(STALE, LAST_REPORT_TIME, ROLE) of ``server``'s rows of DBA_OB_LS_LOCATIONS."""
    ip, port = server.rsplit(":", 1)
    return c.ok(
        "SELECT stale, last_report_time, role FROM DBA_OB_LS_LOCATIONS "
        f"WHERE svr_ip = '{ip}' AND svr_port = {port} ORDER BY ls_id"
    )


class Reads:
    """Every read of the three surfaces, each checked for at most one LEADER per LS."""

    def __init__(self, c: TenantCluster, http: str) -> None:
        self.c = c
        self.http = http
        self.count = 0
        self.phase = "before the pause"

    def once(self) -> dict[int, list[str]]:
        """One read of each surface; returns DBA_OB_LS_LOCATIONS' leaders by LS."""
        self.count += 1
        dba = _view_leaders(self.c, "DBA_OB_LS_LOCATIONS")
        cdb = _view_leaders(self.c, "CDB_OB_LS_LOCATIONS")
        for name, got in (("DBA_OB_LS_LOCATIONS", dba), ("CDB_OB_LS_LOCATIONS", cdb)):
            assert all(len(v) <= 1 for v in got.values()), (name, self.phase, self.count, got)
        servers = _api(self.http, "/api/v1/servers")
        assert sum(s["leader_count"] for s in servers) <= len(LS_IDS), (
            self.phase,
            self.count,
            servers,
        )
        api: Counter[int] = Counter()
        for row in _api(self.http, "/api/v1/ls_locations"):
            if row["role"] == "LEADER":
                api[int(row["ls_id"])] += 1
        assert all(n <= 1 for n in api.values()), (self.phase, self.count, api)
        return dba


def test_a_paused_leader_is_never_shown_beside_the_new_one(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    c = TenantCluster(procs, tmp_path, db_url)
    http = f"127.0.0.1:{free_port()}"
    c.start_rs(
        **RS_FLAGS,
        http_addr=http,
        balancer_planner="local",
        server_permanent_offline_time="120s",
    )
    old, b, d = c.bootstrap(3)
    c.make_tenant(ls_count=2, primary="z1")
    wait_until(lambda: c.leaders_on(old) == 2, 30, message="both leaders in z1")
    reads = Reads(c, http)
    assert reads.once() == {ls: [old] for ls in LS_IDS}

    agent = c.agents[old]
    agent.pause()
    reads.phase = "paused"
    try:
        # Read until the leaders moved off the paused server (each LS led by b or d) and
        # then a while longer: the paused server's last report (LEADER) is still there.
        moved = 0
        for _ in range(400):
            got = reads.once()
            if all(len(v) == 1 and v[0] in (b, d) for v in got.values()):
                moved += 1
                if moved >= 10:
                    break
        assert moved >= 10, f"leaders never moved off {old} in {reads.count} reads"
        assert c.statuses()[old] == "INACTIVE"
        rows = _stale_rows(c, old)
        assert len(rows) == 2
        assert all(r[0] == "YES" and r[1] is not None and r[2] == "FOLLOWER" for r in rows), rows
    finally:
        agent.resume()
        reads.phase = "resumed"

    # Back: it reports the old term's leadership until it hears of the new term. The reads
    # go on until its rows are current (not stale) again, every one checked. (The leaders
    # may come back to it once it is no longer SUSPECT: primary zone z1.)
    def current() -> bool:
        got = reads.once()
        rows = _stale_rows(c, old)
        return (
            all(len(v) == 1 for v in got.values())
            and len(rows) == 2
            and all(r[0] == "NO" and r[1] is None for r in rows)
        )

    wait_until(current, 60, message=f"{old}'s rows current again")
    assert reads.count > 12
