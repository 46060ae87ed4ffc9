"""tests/support/zygote.py: which commands are forked from the warm interpreter, and that a
forked process behaves as ``python -m`` would (its arguments, environment, output, exit code,
signals, session)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from obcommon.version import version_line
from tests.support import zygote
from tests.support.ports import free_port

RS = [sys.executable, "-m", "rootservice.cli"]


def agent_args(tmp_path: Path) -> list[str]:
    """An agent that runs until it is killed (its RS never answers), on free ports."""
    return [
        sys.executable, "-m", "observer_agent.cli", "--rs-list", f"127.0.0.1:{free_port()}",
        "--rpc-addr", f"127.0.0.1:{free_port()}", "--sql-port", str(free_port()), "--zone", "z1",
        "--data-dir", str(tmp_path / "data"), "--http-addr", f"127.0.0.1:{free_port()}",
        "--insecure",
    ]  # fmt: skip


def test_only_this_pythons_rs_and_agent_modules_without_env_or_cwd_are_forked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(zygote.DISABLE_ENV, raising=False)
    agent = [sys.executable, "-m", "observer_agent.cli", "--zone", "z1"]
    assert zygote.eligible([*RS, "serve"], None, None)
    assert zygote.eligible(agent, None, None)
    assert not zygote.eligible([*RS, "serve"], {"X": "1"}, None)
    assert not zygote.eligible([*RS, "serve"], None, "/tmp")
    assert not zygote.eligible([sys.executable, "-m", "sql.obadmin"], None, None)
    assert not zygote.eligible(["/usr/bin/python3", "-m", "rootservice.cli"], None, None)
    assert not zygote.eligible(["ip", "netns", "exec", "n1", *RS], None, None)
    assert not zygote.eligible(RS[:2], None, None)
    monkeypatch.setenv(zygote.DISABLE_ENV, "1")
    assert not zygote.eligible([*RS, "serve"], None, None)


def test_arguments_output_and_exit_code(tmp_path: Path) -> None:
    log = tmp_path / "version.log"
    child = zygote.spawn([*RS, "--version"], dict(os.environ), str(log))
    assert child.wait(timeout=30) == 0
    assert child.poll() == 0
    assert log.read_text().strip() == version_line("rootservice")


def test_the_environment_is_the_one_given(tmp_path: Path) -> None:
    log = tmp_path / "bad.log"
    env = {**os.environ, "OB_RS_LEASE_TIME": "bogus"}
    db = f"sqlite:///{tmp_path}/rs.db"
    child = zygote.spawn([*RS, "serve", "--db", db, "--insecure"], env, str(log))
    assert child.wait(timeout=30) == 2
    assert "rootservice: invalid lease_time: not a duration: 'bogus'" in log.read_text()


def test_a_running_process_has_its_own_session_and_dies_by_signal(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    args = agent_args(tmp_path)
    child = zygote.spawn(args, dict(os.environ), str(log))
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)
        assert child.poll() is None
        # A session of its own, as start_new_session=True gives: the harness signals the group.
        assert os.getsid(child.pid) == child.pid
        os.killpg(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
    assert "running INSECURE" in log.read_text()


def test_an_exit_reported_for_an_earlier_child_with_the_same_pid_is_not_the_new_ones() -> None:
    # A pid that runs (this process's): the stream's end below leaves the child running.
    pid = os.getpid()

    class Reported:
        # What the zygote wrote: the end of an earlier child, then a new child with its pid.
        stdout = io.BytesIO(f'{{"exited": {pid}, "status": 256}}\n{{"pid": {pid}}}\n'.encode())

    z = zygote.Zygote()
    z._read(Reported())  # type: ignore[arg-type]
    assert z.exit_code(pid) is None
    assert z._answers == [{"pid": pid}]


def test_a_child_outliving_its_zygote_is_seen_to_end(tmp_path: Path) -> None:
    z = zygote.Zygote()  # its own zygote: the one other tests share is not killed
    args = agent_args(tmp_path)
    child = z.spawn(args, dict(os.environ), str(tmp_path / "agent.log"))
    try:
        proc = z._proc
        assert proc is not None
        proc.kill()
        proc.wait(timeout=30)
        # Nobody reports this child's exit any more; it still runs ...
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.3)
        assert child.poll() is None
        # ... and its end is seen, its status lost.
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == zygote.UNKNOWN_EXIT
        assert child.poll() == zygote.UNKNOWN_EXIT
    finally:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        z.close()
