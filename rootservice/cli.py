"""``rootservice`` command line: ``serve``, ``db upgrade | downgrade | current`` and ``cert
create-ca | create-rs | create-node | create-client | list`` (:mod:`rootservice.cert_commands`).

``serve`` needs exactly one of ``--certs-dir DIR`` (mutual TLS with ``DIR/rs.crt``) and
``--insecure`` (plaintext, no authentication, logged as a warning); with neither it refuses
to start, naming both (as CockroachDB). Three listeners: gRPC (``--rpc-addr``),
MySQL (``--mysql-addr``) and HTTP(S) (``--http-addr``: :mod:`rootservice.http`).

Flags override ``__all_sys_parameter``, which overrides the defaults (docs/design/index.md#configuration).
Exit codes: 0 after a clean stop (SIGTERM / SIGINT), 1 when the RS cannot start (database
unreachable, address in use), 2 for bad flags.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError

from obcommon import logs
from obcommon.errors import ObError
from obcommon.security.certs import Role
from obcommon.security.tls import SecurityConfigError, TransportSecurity
from obcommon.version import version_line
from rootservice import cert_commands
from rootservice.app import RootService, StartupError
from rootservice.config import RsSettings
from rootservice.db import engine as dbengine

log = logging.getLogger("rootservice")

# flag -> settings field, for the duration flags
_DURATION_FLAGS = {
    "--lease-time": "lease_time",
    "--server-permanent-offline-time": "server_permanent_offline_time",
    "--server-suspect-time": "server_suspect_time",
    "--agent-lag-timeout": "agent_lag_timeout",
    "--server-check-interval": "server_check_interval",
    "--heartbeat-check-interval": "heartbeat_check_interval",
    "--heartbeat-interval": "heartbeat_interval",
    "--empty-server-check-interval": "empty_server_check_interval",
    "--rpc-timeout": "rpc_timeout",
    "--bootstrap-timeout": "bootstrap_timeout",
    "--bootstrap-in-service-timeout": "bootstrap_in_service_timeout",
    "--forward-timeout": "forward_timeout",
    "--ls-check-interval": "ls_check_interval",
    "--ls-log-sync-threshold": "ls_log_sync_threshold",
    "--stop-server-check-timeout": "stop_server_check_timeout",
    "--leader-switch-timeout": "leader_switch_timeout",
    "--tenant-create-timeout": "tenant_create_timeout",
    "--migration-stall-time": "migration_stall_time",
    "--balancer-interval": "balancer_interval",
    "--lost-replica-check-interval": "lost_replica_check_interval",
}


# Admission of admin statements (rootservice/api/admission.py).
_ADMISSION_FLAGS = {
    "--admin-workers": "threads running admin statements (default 4)",
    "--admin-queue-limit": "admin statements admitted at once in all (default 64)",
    "--admin-per-user-limit": "admin statements admitted at once per user (default 4)",
    "--max-statement-tokens": "tokens a statement may have (default 100000)",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rootservice", description="OceanBase-style RootService server manager"
    )
    p.add_argument("--version", action="version", version=version_line("rootservice"))
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the root service")
    s.add_argument(
        "--db", dest="db_url", help="SQLAlchemy URL (default: SQLite file in --data-dir)"
    )
    s.add_argument(
        "--rpc-addr",
        help="gRPC listen address host:port (default 127.0.0.1:2882, OceanBase's RPC port)",
    )
    s.add_argument(
        "--mysql-addr",
        help="MySQL-protocol listen address host:port (default 127.0.0.1:2881, OceanBase's SQL port)",
    )
    s.add_argument(
        "--http-addr",
        help="HTTP(S) listen address host:port: /metrics, /healthz, /readyz, the status API "
        "and the dashboard (default 127.0.0.1:8080)",
    )
    s.add_argument("--data-dir", help="directory for the SQLite file (default ./rs_data)")
    for flag in _DURATION_FLAGS:
        s.add_argument(flag, metavar="DURATION")
    s.add_argument("--self-server", help="ip:port of the observer co-located with this RS")
    s.add_argument(
        "--allow-short-timings",
        action="store_true",
        default=None,
        help="relax lower bounds (tests, demos)",
    )
    s.add_argument("--spark-master", help="Spark master of the balancer's plans (default local[*])")
    s.add_argument(
        "--balancer-planner",
        choices=["spark", "local"],
        help="planner of the balancer's plans: spark (default) or local (pandas, no JVM); "
        "ALTER SYSTEM SET balancer_planner changes it at run time",
    )
    s.add_argument(
        "--spark-conf",
        action="append",
        metavar="K=V",
        help="extra Spark configuration, repeatable (e.g. spark.executor.memory=4g)",
    )
    s.add_argument(
        "--migration-concurrency-per-server",
        type=int,
        help="replica copies building at once on one destination (default 2)",
    )
    s.add_argument(
        "--migration-max-bytes-per-second",
        metavar="SIZE",
        help="bytes per second all copies to one destination may receive, e.g. 64M "
        "(default 0 = unlimited; ALTER SYSTEM SET changes it at run time)",
    )
    s.add_argument("--certs-dir", help="ca.crt and rs.crt / rs.key: serve and dial with mutual TLS")
    s.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="plaintext gRPC without authentication (every client is root)",
    )
    for flag, what in _ADMISSION_FLAGS.items():
        s.add_argument(flag, type=int, help=what)
    s.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    s.add_argument("--log-format", help="text (default) or json: one JSON object per line")
    cert_commands.add_parsers(sub)
    d = sub.add_parser("db", help="schema migrations")
    d.add_argument("action", choices=["upgrade", "downgrade", "current"])
    d.add_argument("--db", dest="db_url", required=True)
    d.add_argument("--revision", default=None, help="target revision (default head / base)")
    return p


def _settings(args: argparse.Namespace) -> RsSettings:
    given: dict[str, Any] = {}
    for key in (
        "db_url",
        "rpc_addr",
        "mysql_addr",
        "http_addr",
        "data_dir",
        "self_server",
        "allow_short_timings",
        "spark_master",
        "balancer_planner",
        "spark_conf",
        "migration_concurrency_per_server",
        "migration_max_bytes_per_second",
        "certs_dir",
        "insecure",
        "log_format",
        *(f.lstrip("-").replace("-", "_") for f in _ADMISSION_FLAGS),
    ):
        v = getattr(args, key)
        if v is not None:
            given[key] = v
    for flag, field in _DURATION_FLAGS.items():
        v = getattr(args, flag.lstrip("-").replace("-", "_"))
        if v is not None:
            given[field] = v
    return RsSettings(**given)


async def _serve(rs: RootService) -> int:
    from grpc_health.v1.health import aio as health_aio

    from rootservice.api.admission import Admission
    from rootservice.api.forwarding import forwarder_for
    from rootservice.api.grpc_server import create_server, follow_readiness
    from rootservice.api.loop_stall_watch import LoopStallWatch
    from rootservice.api.mysql_server import start_mysql_server
    from rootservice.http.server import start_http_server

    # One forwarder for every front end; None in insecure mode.
    forwarder = forwarder_for(rs)
    # One admission for both front ends: a user's statements count against the same limits
    # whether they come over gRPC or the MySQL protocol.
    st = rs.settings
    admission = Admission(st.admin_workers, st.admin_queue_limit, st.admin_per_user_limit)
    health = health_aio.HealthServicer()
    try:
        server, port = await create_server(
            rs, forwarder=forwarder, admission=admission, health=health
        )
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    try:
        mysql = await start_mysql_server(rs, admission, forwarder=forwarder)
    except (OSError, RuntimeError) as e:
        log.error("cannot listen for MySQL clients on %s: %s", st.mysql_addr, e)
        return 1
    try:
        http = await start_http_server(rs)
    except (OSError, RuntimeError) as e:
        log.error("cannot listen for HTTP clients on %s: %s", st.http_addr, e)
        mysql.close()
        return 1
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.to_thread(rs.start)
    except (ObError, StartupError) as e:
        log.error("cannot start the root service: %s", e)
        await server.stop(0)
        mysql.close()
        await http.stop()
        rs.shutdown()
        return 1
    # The gRPC health statuses follow the readiness.
    follower = asyncio.create_task(follow_readiness(rs, health, stop, also=http.reload_tls))
    # How late the gRPC event loop runs (the RS's own heartbeat backlog), and who held the
    # loop when it stops answering: the probe's wakes are the stall watch's beats.
    stall_watch = LoopStallWatch(rs.clock, rs.metrics)
    probe = asyncio.create_task(rs.intake_health.run_probe(stop, beat=stall_watch.beat))
    stall_watch.start()
    log.info(
        "root service listening on %s, MySQL clients on %s, HTTP on %s (state %s)",
        rs.rpc_addr,
        rs.mysql_addr,
        rs.http_addr,
        rs.term.state.value,
    )
    await stop.wait()
    log.info("stopping: signal received")
    await follower
    await probe
    stall_watch.stop()
    mysql.close()
    await http.stop()
    await server.stop(1.0)
    await asyncio.to_thread(rs.shutdown)
    if forwarder is not None:
        forwarder.close()
    log.info("root service %s stopped", rs.rpc_addr)
    return 0


def tune_gc() -> None:
    """Collect young objects every 50,000 net allocations instead of CPython's 700.

    With 10,000 agents the event loop creates short-lived cyclic objects for every
    heartbeat; at the default thresholds the collector ran about 30 times a second and its
    older-generation passes paused every thread for 100-550 ms (``make bench``: heartbeat
    p99 60-118 ms). With these thresholds the same run gave p99 10 ms and no full
    collection; memory held by not-yet-collected cycles stays within a few MiB.
    """
    gc.set_threshold(50_000, 50, 100)


#: How long (seconds) a thread may hold the interpreter lock while another waits for it
#: (CPython's default is 5 ms). See :func:`tune_switch_interval`.
SWITCH_INTERVAL_S = 0.001


def tune_switch_interval() -> None:
    """Make a thread that holds the interpreter lock give it up after 1 ms, not 5, when
    another thread waits for it.

    The RS's lease renewal (the election thread), its lease checker and the event loop of
    the agents' lease streams share the interpreter with the admin statements' worker
    threads, which can run pure-Python work for a second or more (sqlglot parsing and
    checking a large statement). Under four such threads a thread that
    slept 10 ms woke 18 ms late at the median, 136 ms at the 99th percentile and 196 ms at
    worst with the default; 4.4, 29 and 45 ms with 1 ms (8 s each, one run, the 2-core
    machine). A thread waits for the lock only when another wants it, so an RS whose
    threads do not contend (the steady heartbeat path) is not affected.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rootservice`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "cert":
        return cert_commands.run(args)
    if args.command == "db":
        # Alembic's progress lines in the same text format as the server's, without an address
        # (no server runs).
        logs.setup_logging("rs", "-", "INFO")
        try:
            engine = dbengine.make_engine(args.db_url)
            if args.action == "upgrade":
                dbengine.upgrade(engine, args.revision or "head")
            elif args.action == "downgrade":
                dbengine.downgrade(engine, args.revision or "base")
            print(dbengine.current_revision(engine) or "base")
        except sa.exc.SQLAlchemyError as e:
            print(f"rootservice: database error: {e}", file=sys.stderr)
            return 1
        return 0
    try:
        settings = _settings(args)
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "settings"
            print(
                f"rootservice: invalid {loc}: {err['msg'].removeprefix('Value error, ')}",
                file=sys.stderr,
            )
        return 2
    try:
        logs.setup_logging("rs", settings.rpc_addr, args.log_level, settings.log_format)
    except ValueError as e:
        print(f"rootservice: invalid log_level: {e}", file=sys.stderr)
        return 2
    try:
        security = TransportSecurity.from_flags(settings.certs_dir, settings.insecure, Role.RS)
    except SecurityConfigError as e:
        print(f"rootservice: {e}", file=sys.stderr)
        return 2
    if security.insecure:
        log.warning("running INSECURE: %s", security.describe())
    else:
        log.info("%s", security.describe())
    tune_gc()
    tune_switch_interval()
    # Read back, not restated: what this process really runs with.
    log.info(
        "interpreter: young collections every %d allocations, lock switch interval %g ms",
        gc.get_threshold()[0],
        sys.getswitchinterval() * 1000,
    )
    rs = RootService(settings)
    try:
        rs.open()
    except StartupError as e:
        print(f"rootservice: {e}", file=sys.stderr)
        return 1
    # The loop's selector counts its waits for I/O: how busy the loop is (the lease
    # queue's pacing, rootservice/servers/loop_load.py).
    with asyncio.Runner(
        loop_factory=lambda: asyncio.SelectorEventLoop(rs.loop_load.selector())
    ) as runner:
        return runner.run(_serve(rs))


if __name__ == "__main__":
    sys.exit(main())
