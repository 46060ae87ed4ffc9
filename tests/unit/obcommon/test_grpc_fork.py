"""obcommon.grpc_fork: the root service's process forks (PySpark's gateway launch) without
gRPC's fork handlers, which froze a whole RS once in 24 runs of test_planner_failure."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from obcommon.grpc_fork import FORK_SUPPORT_VAR, disable_grpc_fork_handlers

# A gRPC asyncio server, then three forks the way PySpark's launch_gateway makes them
# (Popen with a preexec_fn, which makes CPython fork with the GIL held).
_CHILD = textwrap.dedent(
    """
    import asyncio, subprocess, sys
    if sys.argv[1] == "rootservice":
        import rootservice  # noqa: F401
    import grpc

    async def main():
        server = grpc.aio.server()
        server.add_insecure_port("127.0.0.1:0")
        await server.start()
        for _ in range(3):
            await asyncio.to_thread(
                subprocess.run, ["/bin/true"], preexec_fn=lambda: None, check=True
            )
        await server.stop(None)
        print("forked 3")

    asyncio.run(main())
    """
)


def _run(first_import: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in __import__("os").environ.items() if k != FORK_SUPPORT_VAR}
    return subprocess.run(
        [sys.executable, "-c", _CHILD, first_import],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_the_root_service_forks_without_grpc_fork_handlers() -> None:
    out = _run("rootservice")
    assert out.returncode == 0 and "forked 3" in out.stdout, out.stderr
    assert "fork_posix" not in out.stderr, out.stderr


def test_without_it_grpc_runs_its_fork_handlers() -> None:
    # The other side: the same process without the package's set-up goes through gRPC's
    # handlers on every fork (they log from fork_posix.cc), which is what hung. The exit
    # status is not asserted: in one run of twenty a child even died of SIGABRT in gRPC's
    # child handler before it could exec /bin/true.
    out = _run("grpc-only")
    assert "fork_posix" in out.stderr, out.stderr


def test_an_operator_setting_wins() -> None:
    env = {FORK_SUPPORT_VAR: "1"}
    assert disable_grpc_fork_handlers(env) is False
    assert env == {FORK_SUPPORT_VAR: "1"}
    empty: dict[str, str] = {}
    assert disable_grpc_fork_handlers(empty) is True
    assert empty == {FORK_SUPPORT_VAR: "false"}
