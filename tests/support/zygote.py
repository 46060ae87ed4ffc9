"""Root service and agent processes forked from a warm interpreter instead of started cold.

Half of a test RS's start-up CPU (0.9 of about 1.3 s on the 2-core machine) and most of an
agent's (0.45 of 0.6 s) is importing Python modules, and the suite starts a few hundred of
each on a machine whose two cores it keeps busy. So a test process asks a *zygote* for them:
a child interpreter (``python -m tests.support.zygote``) that has imported
``rootservice.cli`` and ``observer_agent.cli`` once, then forks one child per request. Each
child is a real, separate process running the product's own ``main(argv)``, as ``python -m``
would run it, in a new session, with its output in the log file, its environment set, and
the same exit: non-daemon threads joined, ``atexit`` handlers run, the exit code of ``main``
(or 1 and the traceback for an uncaught exception).

What differs from ``python -m``: the interpreter's start-up and the imports happened before
the request (with the environment the zygote started with: the product reads its
environment when it runs, not when it is imported), and ``random`` is seeded again in each
child so that they do not share one sequence. Only ``python -m rootservice.cli`` and
``python -m observer_agent.cli`` commands without an environment or working directory of
their own come here (:func:`eligible`); everything else, and every command when
``OB_TEST_NO_ZYGOTE=1``, is started by ``subprocess`` as before. The zygote imports nothing
that starts a thread or a gRPC channel, so that forking it is safe. In ``ps`` a forked
process shows the zygote's command line (``python -m tests.support.zygote``): its pid, in
the test's failure report, and its log name tell which it is.

Protocol, one JSON object per line: the client writes ``{"args", "env", "log"}`` on the
zygote's stdin and reads ``{"pid"}`` (or ``{"error"}``) back; the zygote also writes
``{"exited": pid, "status": waitstatus}`` whenever it reaps a child (it polls every 50 ms).
A zygote that dies (killed, out of memory) leaves its children to ``init``: their exits are
then watched in ``/proc`` and reported as :data:`UNKNOWN_EXIT`, since nobody can read their
status any more.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

#: The modules a zygote serves (``python -m <module> ...``).
MODULES = ("rootservice.cli", "observer_agent.cli")
#: What the zygote imports before it forks anything: the modules it serves and those an RS
#: imports as it starts serving (0.3 s of CPU more per RS). Not pandas (the local
#: planner's, 0.5 s): importing numpy starts threads, and a process with threads must not
#: fork.
PRELOAD = (*MODULES, "rootservice.api.grpc_server", "rootservice.api.mysql_server")
#: Set to 1 to start every process with ``subprocess`` (the zygote is not used).
DISABLE_ENV = "OB_TEST_NO_ZYGOTE"
#: The exit code given for a child that ended after its zygote died (its status is lost).
UNKNOWN_EXIT = 255
#: How often (seconds) the end of such a child is looked for in ``/proc``.
ORPHAN_POLL_S = 0.05


def _start_time(pid: int) -> int | None:
    """``pid``'s start time (clock ticks after boot, ``/proc/<pid>/stat`` field 22), None
    when it has ended (gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # fields[0] is the state (field 3): a zombie has ended, only its status is left.
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def eligible(args: Sequence[str], env: Mapping[str, str] | None, cwd: object) -> bool:
    """Whether ``args`` may be forked from a zygote: ``<this python> -m <one of MODULES>``,
    no environment overrides and no working directory of its own, zygote not disabled."""
    return (
        os.environ.get(DISABLE_ENV) != "1"
        and env is None
        and cwd is None
        and len(args) >= 3
        and args[0] == sys.executable
        and args[1] == "-m"
        and args[2] in MODULES
    )


class ZygoteChild:
    """The ``subprocess.Popen`` surface :class:`tests.support.cluster.Proc` uses
    (``pid``, ``poll``, ``wait``) for a process forked by the zygote, whose exit the
    zygote reports (it is the zygote's child, not ours)."""

    def __init__(self, zygote: Zygote, pid: int, args: Sequence[str]) -> None:
        self._zygote = zygote
        self.pid = pid
        self.args = list(args)

    def poll(self) -> int | None:
        """The exit code (negative signal number when killed), None while it runs."""
        return self._zygote.exit_code(self.pid)

    def terminate(self) -> None:
        """SIGTERM to the process (``Popen.terminate``)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        """Wait up to ``timeout`` seconds (None: for ever) for the exit; returns the exit
        code. Raises ``subprocess.TimeoutExpired``."""
        code = self._zygote.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code


class Zygote:
    """The client side: one zygote process per test process, started on first use and
    again if it died. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = 0
        # pid -> exit code, as the zygote reports them; the answers to spawns, in order.
        self._exits: dict[int, int] = {}
        self._answers: list[dict[str, Any]] = []
        # Children left running by a zygote that died: pid -> start time (against pid reuse).
        self._orphans: dict[int, int] = {}

    def spawn(self, args: Sequence[str], env: Mapping[str, str], log_path: str) -> ZygoteChild:
        """Fork ``python -m args[2] args[3:]`` with ``env`` as its whole environment and
        its output appended to ``log_path``. Raises ``OSError`` when the zygote cannot be
        started or does not answer."""
        with self._lock:
            proc = self._running()
            line = json.dumps({"args": list(args), "env": dict(env), "log": log_path}) + "\n"
            assert proc.stdin is not None
            proc.stdin.write(line.encode())
            proc.stdin.flush()
            with self._cond:
                ok = self._cond.wait_for(lambda: self._answers or proc.poll() is not None, 60)
                if not ok or not self._answers:
                    raise OSError(f"the zygote did not answer (exit {proc.poll()})")
                answer = self._answers.pop(0)
        if "error" in answer:
            raise OSError(f"the zygote could not fork: {answer['error']}")
        return ZygoteChild(self, int(answer["pid"]), args)

    def exit_code(self, pid: int) -> int | None:
        """The exit code of ``pid`` if the zygote reported it (:data:`UNKNOWN_EXIT` for a
        child that ended after its zygote died), else None."""
        with self._cond:
            return self._exit_locked(pid)

    def _exit_locked(self, pid: int) -> int | None:
        started = self._orphans.get(pid)
        if started is not None and _start_time(pid) != started:
            del self._orphans[pid]
            self._exits[pid] = UNKNOWN_EXIT
        return self._exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        """The exit code of ``pid`` once reported (see :meth:`exit_code`), or None after
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (code := self._exit_locked(pid)) is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                if pid in self._orphans:
                    # An orphan's end is not reported: looked for every ORPHAN_POLL_S.
                    left = ORPHAN_POLL_S if left is None else min(left, ORPHAN_POLL_S)
                self._cond.wait(left)
            return code

    def _running(self) -> subprocess.Popen[bytes]:
        # A forked test process (multiprocessing) must not share its parent's zygote.
        if self._proc is None or self._proc.poll() is not None or self._owner != os.getpid():
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            if not self._owner:
                atexit.register(self.close)
            self._owner = os.getpid()
            threading.Thread(
                target=self._read, args=(self._proc,), name="zygote-reader", daemon=True
            ).start()
        return self._proc

    def close(self) -> None:
        """End the zygote (it exits when its stdin closes) and reap it; the processes it
        forked are not touched (the ``procs`` fixture stops those)."""
        proc = self._proc
        if proc is None or self._owner != os.getpid():
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        running: set[int] = set()  # this zygote's children whose exit it has not reported
        for raw in proc.stdout:
            msg = json.loads(raw)
            with self._cond:
                if "exited" in msg:
                    pid = int(msg["exited"])
                    self._exits[pid] = os.waitstatus_to_exitcode(int(msg["status"]))
                    running.discard(pid)
                else:
                    # Pids are reused: an exit reported for an earlier child with this pid
                    # is not this one's (its own exit can only come after this answer).
                    if "pid" in msg:
                        self._exits.pop(int(msg["pid"]), None)
                        self._orphans.pop(int(msg["pid"]), None)
                        running.add(int(msg["pid"]))
                    self._answers.append(msg)
                self._cond.notify_all()
        with self._cond:
            # The zygote is gone: nobody will report these children's exits.
            for pid in running:
                started = _start_time(pid)
                if started is None:
                    self._exits[pid] = UNKNOWN_EXIT
                else:
                    self._orphans[pid] = started
            self._cond.notify_all()


_zygote = Zygote()


def spawn(args: Sequence[str], env: Mapping[str, str], log_path: str) -> ZygoteChild:
    """:meth:`Zygote.spawn` on this test process's zygote."""
    return _zygote.spawn(args, env, log_path)


# --------------------------------------------------------------------------- the zygote


def _child(args: list[str], env: dict[str, str], log: str) -> None:
    """In the forked child: become ``python -m args[2] args[3:]``; never returns."""
    code = 1
    try:
        os.setsid()
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        if out > 2:
            os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(env)
        import random

        random.seed()
        sys.argv = [args[0], *args[3:]]
        main = sys.modules[args[2]].main
        try:
            code = main(args[3:]) or 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        # What the interpreter does at exit: join non-daemon threads, run atexit handlers.
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _serve() -> None:
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    # Native threads count too (a library's thread pool): a process with threads must not fork.
    assert len(os.listdir("/proc/self/task")) == 1, "the zygote has threads: it cannot fork"
    # The protocol goes through the file descriptors, not sys.stdout (children inherit it).
    inp, outp = sys.stdin.fileno(), sys.stdout.fileno()
    buf = b""

    def send(msg: dict[str, Any]) -> None:
        os.write(outp, (json.dumps(msg) + "\n").encode())

    while True:
        ready, _, _ = select.select([inp], [], [], 0.05)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            send({"exited": pid, "status": status})
        if not ready:
            continue
        chunk = os.read(inp, 1 << 16)
        if not chunk:
            return  # the test process is gone
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            try:
                pid = os.fork()
            except OSError as e:
                send({"error": str(e)})
                continue
            if pid == 0:
                # (fd 1, the protocol's pipe, is replaced by the log in _child)
                _child(req["args"], req["env"], req["log"])
            send({"pid": pid})


if __name__ == "__main__":
    _serve()
