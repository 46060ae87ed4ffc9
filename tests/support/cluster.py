"""Helpers for integration tests that run real RootService and observer-agent processes.

:class:`Proc` starts a command with its output in a log file and can wait for it to report
SERVING on the standard gRPC health service, pause it (SIGSTOP, a hung process), kill it
(SIGKILL, a crash) or stop it politely. Every ``Proc`` is recorded in a module registry, so
that nothing outlives the test run: the ``procs`` fixture (tests/conftest.py) stops what a
test started, and an ``atexit`` hook kills whatever is left if pytest itself is interrupted.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from obcommon.security.certs import Role
from tests.support import pki, timescale, zygote
from tests.support.ports import free_port
from tests.support.timescale import scaled

T = TypeVar("T")

_registry: list[Proc] = []
_registry_lock = threading.Lock()


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    interval_s: float = 0.1,
    message: str = "",
    *,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Exceptions listed in ``ignore`` count as "not yet" (e.g. ``grpc.RpcError`` while a server
    is still starting). Raises ``AssertionError`` with ``message`` and the last value (or
    exception) seen when ``timeout_s`` passes, a limit for the README's machine that the
    run's wait factor scales (tests/support/timescale.py).
    """
    limit_s = scaled(timeout_s)
    deadline = time.monotonic() + limit_s
    last: Any = None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except ignore as e:
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {limit_s:.1f}s ({timeout_s}s x {timescale.scale():g}) waiting for "
                f"{message or predicate!r}; last result: {last!r}"
            )
        time.sleep(interval_s)


def _flag_args(flags: Mapping[str, Any]) -> list[str]:
    """``lease_time="2s"`` -> ``--lease-time 2s``; True -> ``--flag``; False/None -> nothing;
    a list or tuple repeats the flag once per item."""
    out: list[str] = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                out += [flag, str(item)]
        else:
            out += [flag, str(value)]
    return out


def _security_flags(role: Role, rpc_addr: str, flags: dict[str, Any]) -> dict[str, Any]:
    # Secure by default, as in production: the session's PKI names the process by its
    # address. ``insecure=True`` runs it plaintext (and health checks follow).
    if flags.get("insecure"):
        pki.INSECURE_ADDRS.add(rpc_addr)
        return flags
    if "certs_dir" not in flags:
        flags = {**flags, "certs_dir": pki.certs_dir(role, rpc_addr)}
    return flags


def rs_cmd(db_url: str, rpc_addr: str, data_dir: str | Path, **flags: Any) -> list[str]:
    """Command line of ``rootservice serve`` (run with this interpreter, as a module), with
    ``--certs-dir`` of the test PKI for ``rpc_addr`` unless ``insecure=True`` or a
    ``certs_dir`` is given, ``--mysql-addr`` / ``--http-addr`` on free ports unless
    ``mysql_addr`` / ``http_addr`` are, and ``--balancer-planner local`` unless
    ``balancer_planner`` is given."""
    flags = _security_flags(Role.RS, rpc_addr, flags)
    # Every test RS gets its own MySQL port: the default (2881) would be shared by the RS
    # processes of one test and by concurrent tests.
    flags = {"mysql_addr": f"127.0.0.1:{free_port()}", **flags}
    # Likewise the HTTP endpoint (default 8080).
    flags = {"http_addr": f"127.0.0.1:{free_port()}", **flags}
    # The pandas planner unless a test asks for Spark (the product's default): every RS that
    # planned a DELETE SERVER or a rebuild otherwise started a JVM of its own, about half a
    # minute of a core each on the 2-core machine, in tests about something else. Spark in
    # the RS is exercised by test_delete_server [sqlite], test_planner_failure and
    # test_spark_cluster, which pass ``balancer_planner="spark"``.
    flags = {"balancer_planner": "local", **flags}
    return [
        sys.executable,
        "-m",
        "rootservice.cli",
        "serve",
        "--db",
        db_url,
        "--rpc-addr",
        rpc_addr,
        "--data-dir",
        str(data_dir),
        *_flag_args(flags),
    ]


def agent_cmd(
    rs_list: str | Sequence[str],
    rpc_addr: str,
    sql_port: int,
    zone: str,
    data_dir: str | Path,
    **flags: Any,
) -> list[str]:
    """Command line of the observer agent; ``rs_list`` may be a list of ``host:port``.
    Secured like :func:`rs_cmd` (a node certificate for ``rpc_addr``); ``--http-addr`` on a
    free port unless ``http_addr`` is given."""
    flags = _security_flags(Role.NODE, rpc_addr, flags)
    # Its own HTTP port (the default 8088 would be shared by every agent).
    flags = {"http_addr": f"127.0.0.1:{free_port()}", **flags}
    if not isinstance(rs_list, str):
        rs_list = ",".join(rs_list)
    return [
        sys.executable,
        "-m",
        "observer_agent.cli",
        "--rs-list",
        rs_list,
        "--rpc-addr",
        rpc_addr,
        "--sql-port",
        str(sql_port),
        "--zone",
        zone,
        "--data-dir",
        str(data_dir),
        *_flag_args(flags),
    ]


def health_status(addr: str, timeout_s: float = 1.0, service: str = "") -> int:
    """One standard health check (service ``service``, default ``""``) of ``addr``: a
    ``health_pb2.HealthCheckResponse`` status. Raises ``grpc.RpcError`` when unreachable."""
    with pki.channel(addr) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        return int(resp.status)


class Proc:
    """A child process with stdout and stderr in ``<log_dir>/<name>.log``.

    It runs in its own session (process group) so that signals reach any grandchildren too
    and a Ctrl-C in the terminal does not hit it before the test harness can stop it.
    """

    def __init__(
        self,
        args: Sequence[str],
        log_dir: str | Path,
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        self.args = [str(a) for a in args]
        self.name = name or Path(self.args[0]).name
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{self.name}.log"
        full_env = dict(os.environ)
        # Unbuffered so that the log shows what the process did right up to a kill.
        full_env["PYTHONUNBUFFERED"] = "1"
        if env:
            full_env.update(env)
        self.popen: subprocess.Popen[bytes] | zygote.ZygoteChild
        if zygote.eligible(self.args, env, cwd):
            # Forked from a warm interpreter: the same process, without its imports.
            self.popen = zygote.spawn(self.args, full_env, str(self.log_path))
        else:
            with open(self.log_path, "ab") as log:
                self.popen = subprocess.Popen(
                    self.args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    cwd=cwd,
                    start_new_session=True,
                )
        self.pid = self.popen.pid
        # The health service wait_healthy asks: an RS answers "" SERVING only once it leads
        # in FULL_SERVICE, so "started" is its "liveness" service; agents "".
        self.health_service = "liveness" if "rootservice.cli" in self.args else ""
        with _registry_lock:
            _registry.append(self)

    def __repr__(self) -> str:
        return f"Proc({self.name!r}, pid={self.pid}, returncode={self.returncode})"

    @property
    def returncode(self) -> int | None:
        """Exit status (negative signal number when killed), None while running."""
        return self.popen.poll()

    @property
    def alive(self) -> bool:
        """True while the process has not exited (a paused process is alive)."""
        return self.returncode is None

    def log_text(self) -> str:
        """Everything the process wrote so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def _signal(self, sig: signal.Signals) -> None:
        # The whole group: a wrapper script's children must not survive it. The group may
        # be gone already (the process exited and was reaped): that is fine.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def wait_healthy(self, addr: str, timeout_s: float = 30.0) -> None:
        """Poll the gRPC health service at ``addr`` every 100 ms until it reports SERVING
        (service :attr:`health_service`: ``liveness`` for an RS, which says SERVING on
        ``""`` only when ready; ``""`` for anything else).

        Raises ``AssertionError`` with the log tail when the process exits first or
        ``timeout_s`` (scaled by the run's wait factor) passes.
        """
        timeout_s = scaled(timeout_s)
        deadline = time.monotonic() + timeout_s
        last: object = "no answer yet"
        while True:
            if not self.alive:
                raise AssertionError(
                    f"{self.name} exited with {self.returncode} before becoming healthy at "
                    f"{addr}\n--- {self.log_path} ---\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"{self.name} not SERVING at {addr} after {timeout_s}s (last: {last})\n"
                    f"--- {self.log_path} ---\n{self.log_tail()}"
                )
            try:
                status = health_status(
                    addr, timeout_s=max(0.05, min(1.0, remaining)), service=self.health_service
                )
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
            except grpc.RpcError as e:
                last = e.code() if hasattr(e, "code") else e
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to exit on its own; raises AssertionError when ``timeout_s``
        (scaled by the run's wait factor) passes first."""
        timeout_s = scaled(timeout_s)
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout_s}s\n{self.log_tail()}"
            ) from None

    def terminate(self) -> None:
        """SIGTERM (then SIGCONT, so that a paused process can act on it) without waiting."""
        if self.alive:
            self._signal(signal.SIGTERM)
            self._signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout_s`` (scaled by the
        run's wait factor). Returns the exit status. A paused process is resumed first so
        that it can act on SIGTERM."""
        return self._stop_within(scaled(timeout_s))

    def _stop_within(self, limit_s: float) -> int:
        # stop() with a limit already scaled (stop_all shares one among its processes).
        if self.alive:
            self.terminate()
            try:
                self.popen.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
        return self._reap()

    def kill(self) -> int:
        """SIGKILL (a crash: no clean-up handlers run). Returns the exit status."""
        self._signal(signal.SIGKILL)
        return self._reap()

    def _reap(self) -> int:
        # After SIGKILL the exit is a matter of the kernel tearing the process down; the
        # bound only guards against something truly odd (e.g. uninterruptible I/O).
        try:
            return self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} (pid {self.pid}) did not die after SIGKILL"
            ) from None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a hung server)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self._signal(signal.SIGCONT)


def registry_mark() -> int:
    """A position in the registry; :func:`procs_since` lists what was started after it."""
    with _registry_lock:
        return len(_registry)


def procs_since(mark: int) -> list[Proc]:
    """Every :class:`Proc` created after ``mark`` (see :func:`registry_mark`)."""
    with _registry_lock:
        return list(_registry[mark:])


def stop_all(procs: Sequence[Proc], timeout_s: float = 10.0) -> list[str]:
    """Stop each of ``procs``; returns the errors instead of stopping at the first one, so
    one stubborn process does not leave the others running."""
    errors: list[str] = []
    # SIGTERM to every process first, then wait for each: a test's RS and its six agents
    # then take as long to stop as the slowest of them, not the sum (one to three seconds
    # each on a loaded machine: teardowns of 10-20 s).
    for p in procs:
        try:
            p.terminate()
        except Exception as e:  # collected and reported by the caller
            errors.append(f"{p!r}: {e}")
    deadline = time.monotonic() + scaled(timeout_s)
    for p in procs:
        try:
            p._stop_within(max(0.0, deadline - time.monotonic()))
        except Exception as e:  # collected and reported by the caller
            errors.append(f"{p!r}: {e}")
    return errors


class ProcSet:
    """What the ``procs`` fixture hands a test: starts processes with their logs in one
    directory and, at teardown, stops every :class:`Proc` created since it was made (also
    those a test constructed directly)."""

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self._mark = registry_mark()

    def start(
        self,
        args: Sequence[str],
        name: str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> Proc:
        """Start ``args`` as a :class:`Proc` logging to ``<log_dir>/<name>.log``."""
        return Proc(args, self.log_dir, name=name, env=env, cwd=cwd)

    def start_agent_with_http(
        self, rs_addr: str, data_dir: Path, zone: str = "z1"
    ) -> tuple[str, str]:
        """Start one agent of ``rs_addr`` in ``zone`` with its HTTPS endpoint on (heartbeats
        every 200 ms) and wait until its gRPC health answers; returns ``(node, http)``, both
        ``ip:port`` on free ports."""
        node = f"127.0.0.1:{free_port()}"
        http = f"127.0.0.1:{free_port()}"
        args = agent_cmd(
            rs_addr, node, free_port(), zone, data_dir, heartbeat_interval="200ms", http_addr=http
        )
        self.start(args, "agent").wait_healthy(node, timeout_s=30)
        return node, http

    @property
    def started(self) -> list[Proc]:
        """Every Proc created since this set was made, in start order."""
        return procs_since(self._mark)

    def log_tails(self, lines: int = 40) -> str:
        """The tail of each process's log, one section per process."""
        return "\n".join(
            f"----- {p.name} (pid {p.pid}, returncode {p.returncode}) {p.log_path} -----\n"
            f"{p.log_tail(lines)}"
            for p in self.started
        )

    def stop_all(self, timeout_s: float = 10.0) -> list[str]:
        """Stop every Proc started since this set was made; returns the errors."""
        return stop_all(self.started, timeout_s)


@atexit.register
def _kill_leftovers() -> None:
    # Last line of defence (pytest interrupted, a fixture that never ran its teardown):
    # no RS or agent may keep running, and holding ports, after the test run.
    with _registry_lock:
        leftovers = [p for p in _registry if p.alive]
    for p in leftovers:
        with contextlib.suppress(Exception):
            p.kill()
