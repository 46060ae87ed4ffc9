"""The processes of ``make demo`` and the helpers its steps use: certificates, the RS and
the agents started and stopped, statements through ``obadmin``, waits and tables shown.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from obcommon.security.certs import CA_CERT
from rootservice import cert_commands
from sql.client import Credentials, client_security, execute, result_rows

ROOT = Path.cwd() / "demo_data"
CERTS = ROOT / "certs"
CA_KEY = CERTS / "ca.key"
LEASE = "3s"
DEADLINE_S = 600.0
PERMANENT_OFFLINE = "8s"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Demo:
    """The processes of the demo and the helpers to drive them."""

    def __init__(self) -> None:
        """Pick a free RPC address for the RS; no process is started yet."""
        self.started = time.monotonic()
        self.rs_addr = f"127.0.0.1:{free_port()}"
        self.mysql_port = free_port()
        self.http_port = free_port()
        # Each agent's HTTP port (/metrics, /healthz, /readyz), kept across its restarts.
        self.agent_http: dict[str, int] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.agents: dict[str, tuple[str, str, int]] = {}  # name -> (addr, zone, sql_port)
        self.credentials = Credentials()

    # --- certificates --------------------------------------------------------------------

    def certs(self, who: str) -> Path:
        """``CERTS/<who>``: the certificates directory of one process (``rs``, an agent's
        name, ``client``), with a copy of ``ca.crt``."""
        d = CERTS / who
        if not d.exists():
            d.mkdir(parents=True)
            shutil.copy(CERTS / "ca" / CA_CERT, d / CA_CERT)
        return d

    def cert(self, command: str, name: str, who: str) -> None:
        """``rootservice cert <command> <name> --certs-dir CERTS/<who> --ca-key CERTS/ca.key``
        (run in-process through the same code as the command), echoed."""
        argv = ["cert", command, name, "--certs-dir", str(self.certs(who)), "--ca-key", str(CA_KEY)]
        print("$ rootservice " + " ".join(argv), flush=True)
        if cert_commands.run(_cert_args(argv)) != 0:
            raise SystemExit(f"demo failed: rootservice {' '.join(argv)}")

    def create_ca(self) -> None:
        """``rootservice cert create-ca``, the RS's and the root client's certificates."""
        argv = ["cert", "create-ca", "--certs-dir", str(CERTS / "ca"), "--ca-key", str(CA_KEY)]
        print("$ rootservice " + " ".join(argv), flush=True)
        if cert_commands.run(_cert_args(argv)) != 0:
            raise SystemExit("demo failed: rootservice cert create-ca")
        self.cert("create-rs", self.rs_addr, "rs")
        self.cert("create-client", "root", "client")
        self.credentials = Credentials(security=client_security(self.certs("client"), None))
        print()

    # --- processes ---------------------------------------------------------------------

    def spawn(self, name: str, args: list[str]) -> None:
        """Start ``args`` as process ``name``, its output appended to ``ROOT/<name>.log``.

        It gets its own session (process group) so that :meth:`kill` and :meth:`stop_all` can
        signal it together with its children.
        """
        log = open(ROOT / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start_rs(self) -> None:
        """Start the RS (``rootservice.cli serve``) on SQLite under ``ROOT/rs``.

        ``lease_time`` is lowered to ``LEASE`` (3 s) so that a killed agent goes INACTIVE quickly.
        """
        self.spawn(
            "rs",
            [
                sys.executable, "-m", "rootservice.cli", "serve",
                "--data-dir", str(ROOT / "rs"), "--rpc-addr", self.rs_addr,
                "--mysql-addr", f"127.0.0.1:{self.mysql_port}",
                "--http-addr", f"127.0.0.1:{self.http_port}",
                "--lease-time", LEASE, "--heartbeat-interval", "1s",
                "--empty-server-check-interval", "2s", "--log-level", "WARNING",
                "--ls-check-interval", "500ms", "--balancer-interval", "1s",
                "--lost-replica-check-interval", "1s", "--spark-master", "local[1]",
                "--server-permanent-offline-time", PERMANENT_OFFLINE, "--allow-short-timings",
                "--certs-dir", str(self.certs("rs")),
            ],
        )  # fmt: skip

    def start_agent(self, name: str, *extra: str) -> None:
        """Start (or restart) agent ``name`` (``observer_agent.cli``) with ``extra`` flags.

        Its RPC address, zone and SQL port come from :attr:`agents`; it heartbeats every 1 s,
        its replicas' data files are 1M and leaders append a log entry every 200 ms.
        """
        addr, zone, sql_port = self.agents[name]
        http_port = self.agent_http.setdefault(name, free_port())
        if not (self.certs(name) / "node.crt").exists():
            self.cert("create-node", addr, name)
        self.spawn(
            name,
            [
                sys.executable, "-m", "observer_agent.cli", "--rs-list", self.rs_addr,
                "--rpc-addr", addr, "--sql-port", str(sql_port), "--zone", zone,
                "--data-dir", str(ROOT / name), "--heartbeat-interval", "1s", "--log-level", "WARNING",
                "--replica-size", "1M", "--log-interval", "200ms",
                "--http-addr", f"127.0.0.1:{http_port}",
                "--certs-dir", str(self.certs(name)), *extra,
            ],
        )  # fmt: skip

    def kill(self, name: str) -> None:
        """SIGKILL the process group of ``name`` and reap it (up to 10 s); it is then forgotten."""
        p = self.procs.pop(name)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)

    def stop_all(self) -> None:
        """SIGTERM every process still running, wait up to 10 s each, SIGKILL any that stay."""
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for name, p in self.procs.items():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
                print(f"(killed {name}: it did not stop on SIGTERM)")
        self.procs.clear()

    # --- statements ------------------------------------------------------------------------

    def obadmin(self, statement: str, *login: str, timeout_s: float = 60.0) -> int:
        """Run one statement through the obadmin command (mutual TLS with the client
        certificates of ``CERTS/client``; ``login`` e.g. ``-u ops -p ...``), echoing it and its
        output; ``timeout_s`` is obadmin's ``--timeout`` (seconds)."""
        shown = " ".join("***" if i and login[i - 1] == "-p" else a for i, a in enumerate(login))
        print(f"obadmin {shown}> {statement}" if login else f"obadmin> {statement}", flush=True)
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "sql.obadmin",
                "--rs",
                self.rs_addr,
                "--certs-dir",
                str(self.certs("client")),
                *login,
                "--timeout",
                str(timeout_s),
                "-e",
                statement,
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s + 30,
        )
        out = (r.stdout + r.stderr).rstrip()
        print(out + "\n", flush=True)
        return r.returncode

    def must(self, statement: str, timeout_s: float = 60.0) -> None:
        """Run ``statement`` through obadmin (``timeout_s`` its deadline); raises
        ``SystemExit`` if it is refused."""
        if self.obadmin(statement, timeout_s=timeout_s) != 0:
            raise SystemExit(f"demo failed: {statement!r} was refused")

    def refused(self, statement: str) -> None:
        """Run ``statement`` through obadmin; raises ``SystemExit`` if it is not refused."""
        if self.obadmin(statement) == 0:
            raise SystemExit(f"demo failed: {statement!r} should have been refused")

    def query(self, statement: str) -> list[list[Any]]:
        """Run ``statement`` over the admin RPC and return its result rows (lists of cell values).

        Raises ``RuntimeError`` with the OceanBase error name and message when the RS refuses it.
        """
        resp = execute([self.rs_addr], statement, timeout_s=30, credentials=self.credentials)
        if resp.error.code:
            raise RuntimeError(f"{resp.error.name}: {resp.error.message}")
        return result_rows(resp)

    def wait(self, what: str, predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
        """Poll ``predicate`` every 200 ms until it is true, then print how long ``what`` took.

        Exceptions from ``predicate`` count as "not yet" (the RS may still be starting). Gives up
        after ``timeout_s`` seconds, or when the whole demo passes ``DEADLINE_S`` (600 s) since it
        started, by raising ``SystemExit``. (At 300 s the demo, run by the suite beside other
        tests on two cores, reached its rebuild step at 273 s and failed there.)
        """
        t0 = time.monotonic()
        deadline = min(t0 + timeout_s, self.started + DEADLINE_S)
        while True:
            try:
                if predicate():
                    print(f"... {what} after {time.monotonic() - t0:.1f} s\n", flush=True)
                    return
            except Exception:  # the RS may still be starting
                pass
            if time.monotonic() >= deadline:
                raise SystemExit(f"demo failed: timed out waiting for {what}")
            time.sleep(0.2)

    def status(self, name: str) -> str | None:
        """Agent ``name``'s display status in ``__all_server``, or None when it has no row.

        The status is ``ACTIVE``, ``INACTIVE`` or ``DELETING`` (docs/design/servers.md#the-three-statuses).
        """
        addr = self.agents[name][0]
        ip, port = addr.rsplit(":", 1)
        rows = self.query(
            f"SELECT status FROM __all_server WHERE svr_ip = '{ip}' AND svr_port = {port}"
        )
        return str(rows[0][0]) if rows else None

    def leaders(self, server: str | None = None) -> int:
        """How many LEADER rows ``DBA_OB_LS_LOCATIONS`` has (on ``server`` when given)."""
        rows = self.query("SELECT svr_ip, svr_port FROM DBA_OB_LS_LOCATIONS WHERE role = 'LEADER'")
        return sum(1 for ip, port in rows if server is None or f"{ip}:{port}" == server)

    def listening(self, name: str) -> bool:
        """Agent ``name`` accepts TCP connections on its RPC port."""
        host, port = self.agents[name][0].rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return True
        except OSError:
            return False

    def locations_on(self, server: str) -> int:
        """How many rows ``DBA_OB_LS_LOCATIONS`` has on ``server``."""
        rows = self.query("SELECT svr_ip, svr_port FROM DBA_OB_LS_LOCATIONS")
        return sum(1 for ip, port in rows if f"{ip}:{port}" == server)

    def replica_dirs(self, name: str) -> int:
        """How many replica directories agent ``name`` has on disk."""
        base = ROOT / name / "replicas"
        return len(list(base.iterdir())) if base.exists() else 0

    def job_of(self, name: str) -> int:
        """The id of the newest DELETE_SERVER job of agent ``name``."""
        ip, port = self.agents[name][0].rsplit(":", 1)
        rows = self.query(
            "SELECT job_id FROM DBA_OB_ROOTSERVICE_JOBS WHERE job_type = 'DELETE_SERVER' "
            f"AND svr_ip = '{ip}' AND svr_port = {port} ORDER BY job_id DESC"
        )
        return int(rows[0][0])

    def wait_job(self, job_id: int) -> None:
        """``obadmin --wait-job``: its progress lines are printed as they come."""
        print(f"obadmin --wait-job {job_id}", flush=True)
        r = subprocess.run(
            [sys.executable, "-m", "sql.obadmin", "--rs", self.rs_addr, "--wait-job", str(job_id),
             "--certs-dir", str(self.certs("client")),
             "--wait-timeout", "200"],
            timeout=240,
        )  # fmt: skip
        print(flush=True)
        if r.returncode != 0:
            raise SystemExit(f"demo failed: job {job_id} did not succeed")

    def show_locations(self) -> None:
        """Print ``DBA_OB_LS_LOCATIONS`` (where every replica is and who leads)."""
        self.must(
            "SELECT tenant_id, ls_id, svr_ip, svr_port, zone, role, member_list "
            "FROM DBA_OB_LS_LOCATIONS ORDER BY ls_id, zone"
        )

    def show_replica_dirs(self) -> None:
        """Print the replica directories each agent holds on disk, with their file sizes."""
        for name in sorted(self.agents):
            base = ROOT / name / "replicas"
            dirs = sorted(p for p in base.iterdir()) if base.exists() else []
            parts = [
                f"{p.name} ({sum(f.stat().st_size for f in p.rglob('*') if f.is_file())} B)"
                for p in dirs
            ]
            print(f"{name}: {', '.join(parts) or '(no replica)'}")
        print(flush=True)

    def show_servers(self) -> None:
        """Print the main ``__all_server`` columns ordered by id; ``SystemExit`` if refused."""
        self.must(
            "SELECT svr_ip, svr_port, id, zone, status, stop_time, last_offline_time FROM __all_server ORDER BY id"
        )


def step(title: str) -> None:
    """Print a ``==== title ====`` banner for one demo step."""
    print(f"==== {title} " + "=" * max(0, 76 - len(title)), flush=True)


def _cert_args(argv: list[str]) -> Any:
    import argparse

    parser = argparse.ArgumentParser(prog="rootservice")
    cert_commands.add_parsers(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)
