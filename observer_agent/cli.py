"""``observer-agent``: the process on every data node (docs/design/leases.md).

Usage::

    observer-agent --rs-list 10.0.0.1:2882[,10.0.0.2:2882] --rpc-addr 10.0.0.5:2882 \\
        --sql-port 2881 --zone z1 --data-dir /data/ob [--heartbeat-interval 2s] \\
        [--rpc-timeout 2s] [--build-version S] [--log-disk-size SIZE] \\
        [--disk-probe-interval 5s] [--resource-refresh-interval 10s] [--log-level INFO] \\
        [--log-format text|json] \\
        [--replica-size 4M] [--log-interval 500ms] [--cpu-count N] [--memory-limit SIZE] \\
        [--max-concurrent-copies 2] [--http-addr 127.0.0.1:8088] \\
        [--reconnect-backoff-base 100ms] [--reconnect-backoff-cap 2s]

Durations are written like ``500ms``, ``2s``; sizes as bytes or OceanBase size words
(``512K``, ``4M``, ``1G``; binary multiples).

- ``--log-disk-size``: log disk capacity reported (``log_disk_total``); default 30 % of the
  data disk.
- ``--replica-size``: bytes of each LS replica's data file (default 4M, 4K .. 64G).
- ``--log-interval``: a leader replica appends one log entry this often (default 500ms,
  10ms .. 1m); followers poll their leader every ``min(log-interval, 200ms)``.
- ``--max-concurrent-copies``: replicas built by copy from another member (replica
  migration) that stream their data file at the same time (default 2, 1 .. 64); the others
  wait, reported as building with ``bytes_copied`` 0.
- ``--http-addr``: ``/metrics`` (Prometheus; a client certificate of the cluster CA unless
  ``--insecure``), ``/healthz``, ``/readyz`` (:mod:`observer_agent.http`).
- ``--cpu-count`` (cores, > 0) / ``--memory-limit`` (size, > 0): reported as ``cpu_total``
  / ``mem_total`` instead of the machine's, since the RS places units by these capacities.

Every flag may also come from the environment as ``OB_AGENT_<NAME>`` (flags win), e.g.
``OB_AGENT_REPLICA_SIZE=64K``. Exit codes: 0 after SIGTERM / SIGINT, 2 for bad flags or
settings (one line on stderr), 1 when the agent cannot start (unreadable identity file, RPC
address in use).

Replicas live under ``DATA_DIR/replicas/<tenant_id>_<ls_id>/`` (``data``, ``meta.json``)
and ``DATA_DIR/clog/<tenant_id>_<ls_id>/log``; they are reloaded at start.

Fault injection (files in ``DATA_DIR``, for tests and drills; remove them to recover):

- ``FAULT_DATA_DISK_ERROR``: while it exists the disk probe fails and the agent reports
  ``server_status`` DATA_DISK_ERROR (0x1).
- ``FAULT_REPLICATION_STOP``: while it exists, the followers on this agent stop fetching the
  log from their leaders (they fall behind; leaders here keep appending, and the catch-up of
  a replica becoming leader still fetches).
- ``FAULT_REPLICATION_DELAY_MS`` containing an integer N: followers apply only entries whose
  ``ts`` is at least N ms old, a steady lag of about N ms.
- ``FAULT_COPY_SLOW_MS`` containing an integer N: a replica being built by copy on this agent
  sleeps N ms after every data chunk it receives (checked at every chunk).
- ``FAULT_SERVE_DATA_ERROR``: while it exists, this agent answers every ``FetchData`` (a
  member copying a replica from it) with an error, so the copy fails there.

The replication files are checked at most once per follower poll.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from typing import Any, NoReturn

from pydantic import ValidationError

from obcommon import logs
from obcommon.clock import SystemClock
from obcommon.security.certs import Role
from obcommon.security.tls import SecurityConfigError, TransportSecurity
from obcommon.version import version_line
from observer_agent.agent import Agent
from observer_agent.http import AgentHttp
from observer_agent.identity import IdentityError
from observer_agent.service import start_server, stop_server
from observer_agent.settings import AgentSettings

PROG = "observer-agent"
EXIT_OK = 0
EXIT_START_FAILED = 1
EXIT_BAD_SETTINGS = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block: operators grep logs for it.
        self.exit(EXIT_BAD_SETTINGS, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The flags; every default is None so that unset flags fall back to the environment."""
    p = _Parser(
        prog=PROG,
        description="OceanBase observer agent: keeps this server's lease with the RootService.",
    )
    p.add_argument("--version", action="version", version=version_line(PROG))
    p.add_argument("--rs-list", help="RS RPC addresses host:port[,host:port...]")
    p.add_argument("--rpc-addr", help="this agent's RPC address ip:port (the server's identity)")
    p.add_argument("--sql-port", type=int, help="the SQL port reported to the RS (1..65535)")
    p.add_argument("--zone", help="the zone this server belongs to")
    p.add_argument("--data-dir", help="data directory (identity.json, disk probe, clog)")
    p.add_argument("--heartbeat-interval", help="lease renewal period, e.g. 2s")
    p.add_argument("--rpc-timeout", help="timeout of one lease exchange, e.g. 2s")
    p.add_argument(
        "--build-version",
        help="version string reported to the RS, starting with the release "
        "(default: e.g. 0.2.0_ob-rootservice-py)",
    )
    p.add_argument(
        "--log-disk-size",
        help="log disk size to report, bytes or e.g. 10G (default 30%% of the data disk)",
    )
    p.add_argument("--disk-probe-interval", help="data-disk probe period, e.g. 5s")
    p.add_argument("--resource-refresh-interval", help="resource refresh period, e.g. 10s")
    p.add_argument(
        "--reconnect-backoff-base",
        help="first window of the jittered backoff to an unreachable RS, e.g. 100ms",
    )
    p.add_argument(
        "--reconnect-backoff-cap",
        help="largest wait between attempts to reach an RS, e.g. 2s (more for many agents)",
    )
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR")
    p.add_argument("--log-format", help="text (default) or json: one JSON object per line")
    p.add_argument(
        "--certs-dir", help="ca.crt and node.crt / node.key (CN = --rpc-addr): mutual TLS"
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="plaintext gRPC without authentication",
    )
    p.add_argument(
        "--http-addr",
        help="HTTP(S) listen address host:port of /metrics, /healthz, /readyz "
        "(default 127.0.0.1:8088, obagent's monitor port)",
    )
    p.add_argument("--replica-size", help="bytes of each LS replica's data file, e.g. 4M")
    p.add_argument("--log-interval", help="a leader replica appends a log entry this often")
    p.add_argument("--cpu-count", help="CPU cores to report as cpu_total (default: the machine's)")
    p.add_argument("--memory-limit", help="memory to report as mem_total, e.g. 8G")
    p.add_argument(
        "--max-concurrent-copies",
        type=int,
        help="replica copies (migration) streaming data at the same time (default 2)",
    )
    return p


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def format_validation_error(e: ValidationError) -> str:
    """One line naming the flags at fault, e.g. ``--sql-port: Input should be ...``."""
    parts = []
    for err in e.errors():
        loc = err.get("loc") or ()
        field = str(loc[0]) if loc else ""
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        if err.get("type") == "missing":
            msg = f"is required (flag {_flag(field)} or env OB_AGENT_{field.upper()})"
        parts.append(f"{_flag(field)}: {msg}" if field else msg)
    return "; ".join(parts)


def load_settings(argv: list[str] | None) -> AgentSettings:
    """Parse ``argv`` (default ``sys.argv[1:]``) over the environment. Raises ``SystemExit(2)``
    for unknown flags and ``ValidationError`` for bad values."""
    args = build_parser().parse_args(argv)
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if v is not None}
    return AgentSettings(**given)


def setup_logging(settings: AgentSettings) -> None:
    """Log to stderr in the format of the RS (:mod:`obcommon.logs`, component ``agent``, the
    agent's ``rpc_addr``), at ``settings.log_level``, as ``settings.log_format``."""
    logs.setup_logging("agent", settings.rpc_addr, settings.log_level, settings.log_format)


async def serve(settings: AgentSettings) -> int:
    """Run one agent until SIGTERM / SIGINT; returns the exit code."""
    log = logging.getLogger("observer_agent.cli")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Installed first, so a SIGTERM during start-up is a clean stop too.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            agent = Agent(settings, SystemClock())
        except (IdentityError, OSError) as e:
            log.error("cannot start: %s", e)
            return EXIT_START_FAILED
        try:
            server, _port = await start_server(agent)
        except (RuntimeError, OSError) as e:
            log.error("cannot serve gRPC on %s: %s", settings.rpc_addr, e)
            return EXIT_START_FAILED
        http = AgentHttp(agent)
        try:
            await http.start()
        except OSError as e:
            log.error("cannot serve HTTP on %s: %s", settings.http_addr, e)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(stop_server(agent, server), 5.0)
            return EXIT_START_FAILED
        log.info(
            "observer agent up: server %s zone %s rs_list %s data_dir %s (%s)",
            agent.server,
            settings.zone,
            ",".join(settings.rs_list),
            settings.data_dir,
            "empty"
            if agent.identity is None
            else f"cluster {agent.identity.cluster_id} server_id {agent.identity.server_id}",
        )
        try:
            await agent.run(stop)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(http.stop(), 5.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(stop_server(agent, server), 5.0)
        log.info("observer agent %s stopped", agent.server)
        return EXIT_OK
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``observer-agent``; returns the process exit code (see module doc)."""
    try:
        settings = load_settings(argv)
    except ValidationError as e:
        print(f"{PROG}: error: {format_validation_error(e)}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_BAD_SETTINGS
    try:
        security = TransportSecurity.from_flags(settings.certs_dir, settings.insecure, Role.NODE)
    except SecurityConfigError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    setup_logging(settings)
    if security.insecure:
        logging.getLogger("observer_agent.cli").warning("running INSECURE: %s", security.describe())
    return asyncio.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
