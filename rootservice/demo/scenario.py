"""The scenario of ``make demo`` (see :mod:`rootservice.demo`), step by step."""

from __future__ import annotations

import time

from rootservice.demo.harness import (
    CERTS,
    LEASE,
    PERMANENT_OFFLINE,
    ROOT,
    Demo,
    free_port,
    step,
)
from rootservice.demo.shows import forged_lease, mysql_dashboard, observability


def run(d: Demo) -> None:
    """Drive the whole scenario of :mod:`rootservice.demo`'s docstring against the processes of
    ``d``.

    Raises ``SystemExit`` at the first step that does not behave as expected.
    """
    d.agents = {
        f"agent{i}": (f"127.0.0.1:{free_port()}", zone, free_port())
        for i, zone in enumerate(["z1", "z2", "z3", "z1"], start=1)
    }
    step(f"the cluster's certificates ({CERTS}): a CA, the RS, one per agent, the root client")
    d.create_ca()
    step(f"start one RS on SQLite ({ROOT / 'rs'}) and four agents in zones z1, z2, z3, z1")
    d.start_rs()
    for name in d.agents:
        # agent4 reports 1G of memory: too little for a tenant unit (see DELETE SERVER below)
        d.start_agent(name, *(["--memory-limit", "1G"] if name == "agent4" else []))
    d.wait("the RS answers", lambda: d.query("SELECT name FROM __all_sys_parameter") is not None)
    d.show_servers()

    step("BOOTSTRAP the first three servers, one per zone")
    a = {n: v[0] for n, v in d.agents.items()}
    d.must(
        f"ALTER SYSTEM BOOTSTRAP REGION 'sys_region' ZONE 'z1' SERVER '{a['agent1']}', "
        f"ZONE 'z2' SERVER '{a['agent2']}', ZONE 'z3' SERVER '{a['agent3']}'"
    )
    d.wait(
        "all three ACTIVE",
        lambda: all(d.status(n) == "ACTIVE" for n in ("agent1", "agent2", "agent3")),
    )
    d.must("SELECT * FROM DBA_OB_ZONES")
    d.show_servers()

    step("ADD SERVER the fourth agent to z1")
    d.must(f"ALTER SYSTEM ADD SERVER '{a['agent4']}' ZONE 'z1'")
    d.wait(
        "the new server ACTIVE (only a heartbeat makes it ACTIVE)",
        lambda: d.status("agent4") == "ACTIVE",
    )
    d.show_servers()

    step("a unit config, a resource pool over the three zones and a tenant with 3 log streams")
    d.must("CREATE RESOURCE UNIT unit1 MAX_CPU 1, MEMORY_SIZE '2G', LOG_DISK_SIZE '4G'")
    d.must("CREATE RESOURCE POOL pool1 UNIT 'unit1', UNIT_NUM 1, ZONE_LIST ('z1', 'z2', 'z3')")
    d.must("SELECT unit_id, tenant_id, zone, svr_ip, svr_port, memory_size FROM DBA_OB_UNITS")
    t0 = time.monotonic()
    d.must("CREATE TENANT tenant1 RESOURCE_POOL_LIST ('pool1'), PRIMARY_ZONE 'z1', LS_COUNT 3")
    print(f"... tenant created in {time.monotonic() - t0:.2f} s (3 log streams x 3 zones)\n")
    d.must("SELECT * FROM DBA_OB_TENANTS")
    d.must("SELECT unit_id, tenant_id, zone, svr_ip, svr_port, memory_size FROM DBA_OB_UNITS")
    d.wait("__all_ls_meta_table shows 9 replicas, 3 leaders", lambda: d.leaders() == 3)
    d.show_locations()
    d.show_replica_dirs()

    step("STOP SERVER moves every leader off it; the statement returns at leader_cnt 0")
    d.must(f"ALTER SYSTEM STOP SERVER '{a['agent1']}'")
    d.show_locations()
    d.show_servers()
    step("START SERVER: the leaders come back to the primary zone z1")
    d.must(f"ALTER SYSTEM START SERVER '{a['agent1']}'")
    d.wait("the 3 leaders back on agent1", lambda: d.leaders(a["agent1"]) == 3)
    d.show_locations()

    step(f"kill -9 agent3: its lease ({LEASE}) expires and it goes INACTIVE")
    d.kill("agent3")
    d.wait("agent3 INACTIVE", lambda: d.status("agent3") == "INACTIVE")
    d.show_servers()

    step("restart agent3: its next heartbeat makes it ACTIVE again")
    d.start_agent("agent3")
    d.wait("agent3 ACTIVE", lambda: d.status("agent3") == "ACTIVE")
    d.show_servers()

    step("DELETE SERVER refused for lack of room: agent1's unit cannot move to agent4 (1G)")
    d.refused(f"ALTER SYSTEM DELETE SERVER '{a['agent1']}'")
    d.refused(f"EXPLAIN ALTER SYSTEM DELETE SERVER '{a['agent1']}'")  # the same refusal

    step("DELETE SERVER the fourth: it holds no unit, so the empty-server checker removes it")
    d.must(f"ALTER SYSTEM DELETE SERVER '{a['agent4']}'")
    d.wait("it left __all_server", lambda: d.status("agent4") is None)
    d.show_servers()
    d.must(
        "SELECT job_id, job_type, job_status, svr_ip, svr_port, progress FROM __all_rootservice_job"
    )

    step("DELETE SERVER with room: a fifth server joins z1, then agent1 is emptied onto it")
    d.agents["agent5"] = (f"127.0.0.1:{free_port()}", "z1", free_port())
    d.start_agent("agent5")
    a["agent5"] = d.agents["agent5"][0]
    d.wait("agent5 listening", lambda: d.listening("agent5"))
    d.must(f"ALTER SYSTEM ADD SERVER '{a['agent5']}' ZONE 'z1'")
    d.wait("agent5 ACTIVE", lambda: d.status("agent5") == "ACTIVE")
    # Its dry run first: what would move, from where to where, and what
    # would block it, nothing done. When this is the first plan the RS starts its
    # SparkSession here, and the DELETE's own first round below starts sooner.
    print("(EXPLAIN: the first plan that needs Spark starts the RS's SparkSession)\n")
    d.must(f"EXPLAIN ALTER SYSTEM DELETE SERVER '{a['agent1']}'", timeout_s=240)
    d.must(f"ALTER SYSTEM DELETE SERVER '{a['agent1']}'")
    print("(obadmin follows the job)\n")
    d.wait_job(d.job_of("agent1"))
    d.wait("agent1 left __all_server", lambda: d.status("agent1") is None)
    d.must("SELECT unit_id, zone, svr_ip, svr_port, migrate_from_svr_ip FROM DBA_OB_UNITS")
    d.wait("agent5 leads the 3 log streams", lambda: d.leaders(a["agent5"]) == 3)
    d.show_locations()
    d.show_replica_dirs()

    step("DELETE SERVER then CANCEL DELETE mid-way: the unit stays, the partial copies go")
    d.agents["agent6"] = (f"127.0.0.1:{free_port()}", "z2", free_port())
    d.start_agent("agent6")
    a["agent6"] = d.agents["agent6"][0]
    d.wait("agent6 listening", lambda: d.listening("agent6"))
    d.must(f"ALTER SYSTEM ADD SERVER '{a['agent6']}' ZONE 'z2'")
    d.wait("agent6 ACTIVE", lambda: d.status("agent6") == "ACTIVE")
    # copies into agent6 crawl (fault switch), so the cancel lands mid-way
    (ROOT / "agent6" / "FAULT_COPY_SLOW_MS").write_text("1500")
    d.must(f"ALTER SYSTEM DELETE SERVER '{a['agent2']}'")
    d.wait("a copy to agent6 under way", lambda: d.replica_dirs("agent6") > 0, 120)
    d.must("SELECT job_id, job_status, progress, extra_info FROM DBA_OB_ROOTSERVICE_JOBS")
    # The cancel answers when its transaction commits, even while the balancer's round is in
    # a Spark plan: its time is printed, it is not a check.
    began = time.monotonic()
    d.must(f"ALTER SYSTEM CANCEL DELETE SERVER '{a['agent2']}'")
    print(f"(CANCEL DELETE SERVER answered in {time.monotonic() - began:.2f} s, obadmin included)")
    d.wait("agent2 ACTIVE again", lambda: d.status("agent2") == "ACTIVE")
    d.wait("agent6's partial replicas removed", lambda: d.replica_dirs("agent6") == 0)
    (ROOT / "agent6" / "FAULT_COPY_SLOW_MS").unlink()
    d.must("SELECT unit_id, zone, svr_ip, svr_port, migrate_from_svr_ip FROM DBA_OB_UNITS")
    d.must("SELECT job_id, job_type, job_status, svr_port, progress FROM DBA_OB_ROOTSERVICE_JOBS")

    step(f"kill -9 agent3 past server_permanent_offline_time ({PERMANENT_OFFLINE}): rebuild")
    d.agents["agent7"] = (f"127.0.0.1:{free_port()}", "z3", free_port())
    d.start_agent("agent7")
    a["agent7"] = d.agents["agent7"][0]
    d.wait("agent7 listening", lambda: d.listening("agent7"))
    d.must(f"ALTER SYSTEM ADD SERVER '{a['agent7']}' ZONE 'z3'")
    d.wait("agent7 ACTIVE", lambda: d.status("agent7") == "ACTIVE")
    d.kill("agent3")
    d.wait(
        "agent3's replicas rebuilt on agent7 and its lost rows cleaned",
        lambda: d.locations_on(a["agent7"]) == 3 and d.locations_on(a["agent3"]) == 0,
        120,
    )
    d.show_locations()
    d.show_servers()

    step("users and privileges: SELECT only, a wrong password, a forged lease")
    d.must("CREATE USER 'ops' IDENTIFIED BY 'ops-secret'")
    d.must("GRANT SELECT ON *.* TO 'ops'")
    d.must("SHOW GRANTS FOR 'ops'")
    if d.obadmin(
        "SELECT svr_ip, svr_port, status FROM __all_server", "-u", "ops", "-p", "ops-secret"
    ):
        raise SystemExit("demo failed: ops could not SELECT")
    if not d.obadmin(f"ALTER SYSTEM STOP SERVER '{a['agent2']}'", "-u", "ops", "-p", "ops-secret"):
        raise SystemExit("demo failed: ops without ALTER SYSTEM was allowed to STOP SERVER")
    if not d.obadmin("SELECT 1 FROM __all_server", "-u", "ops", "-p", "wrong"):
        raise SystemExit("demo failed: a wrong password was accepted")
    forged_lease(d, a["agent2"], a["agent3"])

    step("the MySQL protocol: a dashboard's GROUP BY and a join as 'ops', over TLS (PyMySQL)")
    mysql_dashboard(d)

    step("observability over HTTPS: readiness, the status API, Prometheus metrics")
    observability(d)

    step("refused statements change nothing")
    d.refused("ALTER SYSTEM ADD SERVER '1.2.3.4:99999' ZONE 'z1'")
    d.refused(f"ALTER SYSTEM ADD SERVER '{a['agent4']}' ZONE 'z1'")
    d.refused("ALTER SYSTEM DELETE SERVER '10.9.8.7:2882'")
    d.refused(f"ALTER SYSTEM STOP SERVER '{a['agent1']}', '{a['agent2']}'")
    d.refused("ALTER SYSTEM SET lease_time = '1s'")
    d.refused("ALTER SYSTM ADD SERVER 'x'")
    d.show_servers()

    step("the event history")
    d.must(
        "SELECT gmt_create, module, event, name1, value1 FROM __all_rootservice_event_history ORDER BY id"
    )
