"""The demo's looks from outside the admin language: a forged lease refused, a dashboard
over the MySQL protocol, the HTTPS endpoints an SRE's tools read."""

from __future__ import annotations

from typing import Any

import grpc

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import CA_CERT, Role, cert_file, key_file
from obcommon.security.tls import TransportSecurity
from rootservice.demo.harness import (
    Demo,
)


def forged_lease(d: Demo, holder: str, victim: str) -> None:
    """Renew ``victim``'s lease with ``holder``'s (valid) node certificate: the RS refuses it
    (a node may only speak for itself) and ``victim``'s row does not change."""
    name = next(n for n, v in d.agents.items() if v[0] == holder)
    sec = TransportSecurity.for_dir(d.certs(name), Role.NODE)
    req = obrpc_pb2.LeaseRequest(server=victim, zone="z1", sql_port=1, build_version="forged")
    print(f"RenewLease for {victim} with the certificate of {holder}:", flush=True)
    with sec.channel(d.rs_addr) as ch:
        try:
            obrpc_pb2_grpc.RootServiceStub(ch).RenewLease(req, timeout=5)
        except grpc.RpcError as e:
            print(f"  refused: {e.code().name}: {e.details()}\n", flush=True)  # type: ignore[attr-defined]
            return
    raise SystemExit("demo failed: a forged lease was accepted")


def mysql_dashboard(d: Demo) -> None:
    """What a dashboard does over the MySQL endpoint: log in as ``ops`` with its
    password over TLS, run a GROUP BY and a join, and be refused ALTER SYSTEM (1227)."""
    import pymysql  # a dev dependency: make demo installs it
    from tabulate import tabulate

    conn = pymysql.connect(
        host="127.0.0.1",
        port=d.mysql_port,
        user="ops",
        password="ops-secret",
        database="oceanbase",
        ssl={"ca": str(d.certs("client") / CA_CERT)},
        connect_timeout=10,
    )
    try:
        with conn.cursor() as cur:
            for sql in (
                "SELECT zone, status, count(*) AS servers FROM DBA_OB_SERVERS "
                "GROUP BY zone, status ORDER BY zone",
                "SELECT s.svr_port, z.zone, z.status AS zone_status, "
                "(SELECT count(*) FROM DBA_OB_UNITS u WHERE u.svr_port = s.svr_port) AS units "
                "FROM __all_server s JOIN DBA_OB_ZONES z ON z.zone = s.zone ORDER BY s.svr_port",
            ):
                print(f"mysql> {sql}")
                cur.execute(sql)
                print(tabulate(cur.fetchall(), [c[0] for c in cur.description], "psql"))
            sql = f"ALTER SYSTEM STOP SERVER '{d.agents['agent2'][0]}'"
            print(f"mysql> {sql}")
            try:
                cur.execute(sql)
            except pymysql.MySQLError as e:
                print(f"ERROR {e.args[0]}: {e.args[1]}")
                if e.args[0] != 1227:
                    raise SystemExit(f"demo failed: expected 1227, got {e.args[0]}") from None
            else:
                raise SystemExit("demo failed: ops could STOP SERVER over the MySQL protocol")
    finally:
        conn.close()


def http_get(d: Demo, port: int, path: str, *, basic: tuple[str, str] | None = None) -> Any:
    """GET ``https://127.0.0.1:<port><path>`` trusting the cluster CA, presenting the root
    client's certificate unless ``basic`` (user, password) is given; returns ``(status,
    body)`` (JSON decoded when the reply is JSON)."""
    import base64
    import http.client
    import json
    import ssl

    client = d.certs("client")
    ctx = ssl.create_default_context(cafile=str(client / CA_CERT))
    ctx.check_hostname = False  # the certificates name ip:port, not a DNS name
    headers = {}
    if basic is None:
        ctx.load_cert_chain(
            client / cert_file(Role.CLIENT, "root"), client / key_file(Role.CLIENT, "root")
        )
    else:
        token = base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        if r.getheader("Content-Type", "").startswith("application/json"):
            return r.status, json.loads(body)
        return r.status, body.decode()
    finally:
        conn.close()


def observability(d: Demo) -> None:
    """What an SRE's tools see: the RS's /readyz, the status API as 'ops' (SELECT
    only, HTTP Basic), a few lines of the RS's and an agent's /metrics, and the dashboard's
    address."""
    status, body = http_get(d, d.http_port, "/readyz")
    print(f"GET /readyz -> {status} {body}")
    if status != 200:
        raise SystemExit("demo failed: the leader in FULL_SERVICE is not ready")
    status, cluster = http_get(d, d.http_port, "/api/v1/cluster", basic=("ops", "ops-secret"))
    if status != 200:
        raise SystemExit(f"demo failed: /api/v1/cluster as ops answered {status}")
    from tabulate import tabulate

    print("GET /api/v1/cluster (as ops) -> servers:")
    rows = [
        [
            s["server"],
            s["zone"],
            s["status"],
            s["heartbeat_status"],
            f"{(s['last_heartbeat_age_us'] or 0) / 1e6:.1f} s",
            s["leader_count"],
        ]
        for s in sorted(cluster["servers"], key=lambda s: (s["zone"], s["server"]))
    ]
    print(tabulate(rows, ["server", "zone", "status", "heartbeat", "age", "leaders"], "psql"))
    status, text = http_get(d, d.http_port, "/metrics")
    wanted = ("ob_rs_heartbeats_received_total", "ob_rs_servers{", "ob_rs_epoch")
    lines = [ln for ln in str(text).splitlines() if ln.startswith(wanted)]
    print(f"GET /metrics -> {status}, {len(str(text))} bytes; for example:")
    print("\n".join(f"  {ln}" for ln in lines[:8]))
    name = sorted(d.agent_http)[0]
    status, text = http_get(d, d.agent_http[name], "/metrics")
    lines = [ln for ln in str(text).splitlines() if ln.startswith("ob_agent_lease")]
    print(f"GET {name} /metrics -> {status}; for example:")
    print("\n".join(f"  {ln}" for ln in lines[:4]))
    print(f"the dashboard: https://127.0.0.1:{d.http_port}/ (log in as ops)\n")
