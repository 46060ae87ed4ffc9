"""tests/support/cluster.py against real processes: a tiny grpc.aio server with the standard health
service stands in for the RootService and the observer agent until they exist."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from obcommon.security.certs import Role
from tests.support import pki
from tests.support.cluster import Proc, ProcSet, agent_cmd, health_status, rs_cmd, wait_until
from tests.support.ports import free_port

TESTS_DIR = Path(__file__).resolve().parents[2]

# argv: port, gate file ("-" for none: SERVING at once, else NOT_SERVING until the file
# exists), "graceful" (exit 0 on SIGTERM) or "ignore-term".
HEALTH_SERVER = textwrap.dedent(
    """
    import asyncio, os, signal, sys

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    async def main(port, gate, mode):
        server = grpc.aio.server()
        servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        if mode == "ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            def on_term():
                print("got SIGTERM", flush=True)
                done.set()
            loop.add_signal_handler(signal.SIGTERM, on_term)
        S = health_pb2.HealthCheckResponse
        await servicer.set("", S.NOT_SERVING if gate != "-" else S.SERVING)
        await server.start()
        print(f"listening on 127.0.0.1:{port}", flush=True)
        while gate != "-" and not os.path.exists(gate):
            await asyncio.sleep(0.02)
        await servicer.set("", S.SERVING)
        await done.wait()
        await server.stop(1)

    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
    """
)


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` is a live process; a zombie counts as dead (a container's init may
    be slow to reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _health_server(
    tmp_path: Path, *, gate: Path | None = None, mode: str = "graceful"
) -> tuple[Proc, str]:
    script = tmp_path / "health_server.py"
    script.write_text(HEALTH_SERVER)
    port = free_port()
    args = [sys.executable, str(script), str(port), str(gate) if gate else "-", mode]
    pki.INSECURE_ADDRS.add(f"127.0.0.1:{port}")  # a plaintext server: health checks follow
    return Proc(args, tmp_path / "logs", name="health"), f"127.0.0.1:{port}"


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # would raise if it were taken


def test_proc_healthy_pause_resume_stop(procs: ProcSet, tmp_path: Path) -> None:
    p, addr = _health_server(tmp_path)
    p.wait_healthy(addr, timeout_s=30)
    assert p.alive and p.returncode is None
    assert f"listening on {addr}" in p.log_text()

    p.pause()
    # A stopped process keeps its socket (the kernel still accepts) but answers nothing.
    with pytest.raises(grpc.RpcError) as err:
        health_status(addr, timeout_s=0.3)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert p.alive

    p.resume()
    p.wait_healthy(addr, timeout_s=10)

    # SIGTERM first: the server's handler runs and it exits cleanly.
    assert p.stop(timeout_s=10) == 0
    assert p.returncode == 0
    assert "got SIGTERM" in p.log_text()
    assert not _pid_alive(p.pid)


def test_wait_healthy_waits_for_serving(procs: ProcSet, tmp_path: Path) -> None:
    gate = tmp_path / "ready"
    p, addr = _health_server(tmp_path, gate=gate)
    # Bounded: it gives up at its deadline while the server stays NOT_SERVING (the gate is
    # not there yet), saying what it last saw.
    with pytest.raises(AssertionError, match="NOT_SERVING"):
        p.wait_healthy(addr, timeout_s=1.0)
    assert health_status(addr) == health_pb2.HealthCheckResponse.NOT_SERVING
    gate.touch()
    p.wait_healthy(addr, timeout_s=10)
    assert health_status(addr) == health_pb2.HealthCheckResponse.SERVING


def test_stop_escalates_to_sigkill(procs: ProcSet, tmp_path: Path) -> None:
    p, addr = _health_server(tmp_path, mode="ignore-term")
    p.wait_healthy(addr, timeout_s=30)  # the SIGTERM handler is in place by now
    # The process ignores SIGTERM: only the escalation can end it.
    assert p.stop(timeout_s=0.5) == -signal.SIGKILL
    assert not p.alive


def test_kill_and_stop_of_a_paused_process(procs: ProcSet, tmp_path: Path) -> None:
    p, addr = _health_server(tmp_path)
    p.wait_healthy(addr, timeout_s=30)
    p.pause()
    assert p.kill() == -signal.SIGKILL
    assert p.stop() == -signal.SIGKILL  # stopping a dead process just reports its status

    q = procs.start(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], "sleeper"
    )
    wait_until(lambda: "up" in q.log_text(), 30, message="sleeper printed 'up'")
    q.pause()
    # A paused process must still be stoppable by SIGTERM (stop() resumes it).
    assert q.stop(timeout_s=10) == -signal.SIGTERM


def test_wait_healthy_reports_an_early_exit(tmp_path: Path) -> None:
    p = Proc(
        [sys.executable, "-c", "print('bad flag --nope'); raise SystemExit(3)"],
        tmp_path,
        name="crasher",
    )
    # A deadline past the suite's per-test timeout (300 s): only noticing the exit returns.
    with pytest.raises(AssertionError) as err:
        p.wait_healthy(f"127.0.0.1:{free_port()}", timeout_s=3600)
    assert "exited with 3" in str(err.value)
    assert "bad flag --nope" in str(err.value)
    assert (tmp_path / "crasher.log").read_text().strip() == "bad flag --nope"


def test_wait_until() -> None:
    calls = iter([0, None, "", "ready"])
    assert wait_until(lambda: next(calls), timeout_s=5, interval_s=0.01) == "ready"

    # It asks again until its deadline, then gives up (at least the first call and one
    # more after an interval of a quarter of the timeout).
    asked: list[int] = []
    with pytest.raises(AssertionError, match="the moon to rise"):
        wait_until(
            lambda: asked.append(1), timeout_s=0.2, interval_s=0.05, message="the moon to rise"
        )
    assert len(asked) >= 2

    attempts = []

    def flaky() -> bool:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("not yet")
        return True

    assert wait_until(flaky, timeout_s=5, interval_s=0.01, ignore=(ConnectionError,)) is True
    with pytest.raises(ConnectionError):
        wait_until(_raise, timeout_s=1)


def _raise() -> bool:
    raise ConnectionError("not ignored")


def test_rs_cmd_and_agent_cmd() -> None:
    cmd = rs_cmd(
        "sqlite:////tmp/rs.db",
        "127.0.0.1:2882",
        Path("/tmp/rs"),
        lease_time="2s",
        allow_short_timings=True,
        verbose=False,
        config=None,
    )
    # Every test RS gets a MySQL port of its own unless the test names one.
    mysql_addr = cmd[cmd.index("--mysql-addr") + 1]
    assert mysql_addr.startswith("127.0.0.1:") and mysql_addr != "127.0.0.1:2881"
    # And an HTTP port of its own.
    http_addr = cmd[cmd.index("--http-addr") + 1]
    assert http_addr.startswith("127.0.0.1:") and http_addr not in ("127.0.0.1:8080", mysql_addr)
    assert cmd == [
        sys.executable,
        "-m",
        "rootservice.cli",
        "serve",
        "--db",
        "sqlite:////tmp/rs.db",
        "--rpc-addr",
        "127.0.0.1:2882",
        "--data-dir",
        "/tmp/rs",
        "--balancer-planner",
        "local",
        "--http-addr",
        http_addr,
        "--mysql-addr",
        mysql_addr,
        "--lease-time",
        "2s",
        "--allow-short-timings",
        "--certs-dir",
        str(pki.certs_dir(Role.RS, "127.0.0.1:2882")),
    ]
    assert (pki.certs_dir(Role.RS, "127.0.0.1:2882") / "rs.crt").exists()
    named = rs_cmd("sqlite://", "127.0.0.1:2882", Path("/tmp/rs"), mysql_addr="127.0.0.1:9")
    assert named[named.index("--mysql-addr") + 1] == "127.0.0.1:9"
    assert named.count("--mysql-addr") == 1
    cmd = agent_cmd(
        ["127.0.0.1:2882", "127.0.0.1:2883"],
        "127.0.0.1:2890",
        2881,
        "z1",
        "/tmp/a",
        heartbeat_interval="100ms",
    )
    agent_http = cmd[cmd.index("--http-addr") + 1]
    assert agent_http.startswith("127.0.0.1:") and agent_http != "127.0.0.1:8088"
    assert cmd == [
        sys.executable,
        "-m",
        "observer_agent.cli",
        "--rs-list",
        "127.0.0.1:2882,127.0.0.1:2883",
        "--rpc-addr",
        "127.0.0.1:2890",
        "--sql-port",
        "2881",
        "--zone",
        "z1",
        "--data-dir",
        "/tmp/a",
        "--http-addr",
        agent_http,
        "--heartbeat-interval",
        "100ms",
        "--certs-dir",
        str(pki.certs_dir(Role.NODE, "127.0.0.1:2890")),
    ]
    insecure = agent_cmd("127.0.0.1:2882", "127.0.0.1:2891", 2881, "z1", "/tmp/b", insecure=True)
    assert insecure[-1] == "--insecure" and "--certs-dir" not in insecure
    assert "127.0.0.1:2891" in pki.INSECURE_ADDRS


INNER_TESTS = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from tests.support.cluster import wait_until

    SLEEP = [sys.executable, "-c", "import time; print('marker-' + 'xyzzy', flush=True); time.sleep(120)"]

    def _start(procs, name):
        p = procs.start(SLEEP, name)
        Path(__file__).with_name(name + ".pid").write_text(str(p.pid))
        wait_until(lambda: "marker-xyzzy" in p.log_text(), 30, message="marker")
        return p

    def test_passes(procs):
        _start(procs, "passing")

    def test_fails(procs):
        _start(procs, "failing")
        assert False, "deliberate failure"
    """
)


def test_procs_fixture_stops_processes_and_reports_logs(tmp_path: Path) -> None:
    # A nested pytest run with this very conftest: the fixture's teardown and failure
    # report are only observable from outside the test that uses it.
    (tmp_path / "conftest.py").write_text((TESTS_DIR / "conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(TESTS_DIR.parent), os.environ.get("PYTHONPATH", "")]),
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "deliberate failure" in out
    # The failing test's report carries its process's log; the passing one's does not.
    assert "process log tails" in out
    assert "failing (pid" in out and "passing (pid" not in out
    assert "marker-xyzzy" in out
    pids = [int((tmp_path / f"{name}.pid").read_text()) for name in ("passing", "failing")]
    wait_until(lambda: not any(map(_pid_alive, pids)), 10, message=f"{pids} gone")


def test_atexit_kills_procs_left_running(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from tests.support.cluster import Proc, wait_until
        p = Proc([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"],
                 {str(tmp_path)!r}, name="orphan")
        wait_until(lambda: "up" in p.log_text(), 30)
        print(p.pid)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR.parent))
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout.strip())
    wait_until(lambda: not _pid_alive(pid), 10, message="orphan killed at exit")
