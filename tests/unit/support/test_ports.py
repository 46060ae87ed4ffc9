"""tests/support/ports.py: ports unique across processes (xdist workers), below the ephemeral
range, skipping what is taken, never handed out twice."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ports
from tests.support.ports import NoFreePort, PortAllocator, ephemeral_low, free_port

ROOT = Path(__file__).resolve().parents[3]

# A range far from the default allocator's, so these tests never hand out a port a parallel
# worker's default allocator could.
LOW = 60000 if ephemeral_low() > 61000 else 9000
# The tests below use fixed ports of that range: one xdist worker runs them all, in turn
# (tests/support/xdist_sched.py).


def _holder_code(lock_dir: Path, low: int, high: int, block: int, count: int) -> str:
    """Python code for a real second process that takes ``count`` ports from the same lock
    directory, prints them and holds its block until its stdin closes."""
    code = (
        "import sys; from pathlib import Path; from tests.support.ports import PortAllocator\n"
        f"a = PortAllocator(Path({str(lock_dir)!r}), {low}, {high}, {block})\n"
        f"print(' '.join(str(a.port()) for _ in range({count})), flush=True)\n"
        "sys.stdin.read()\n"
    )
    return code


def test_default_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    got = [free_port() for _ in range(20)]
    assert len(set(got)) == 20
    high = ports.default_allocator().high
    assert high == ephemeral_low()  # this machine's range leaves room below it
    for p in got:
        assert ports.LOW <= p < high
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # would raise if it were taken


def test_ports_run_through_a_block_then_claim_another(tmp_path: Path) -> None:
    a = PortAllocator(tmp_path / "locks", LOW, LOW + 30, block_size=10)
    got = [a.port() for _ in range(25)]
    assert len(set(got)) == 25
    assert all(LOW <= p < LOW + 30 for p in got)
    # Three blocks claimed, each as a run of consecutive ports.
    assert len({(p - LOW) // 10 for p in got}) == 3
    assert sorted(os.listdir(tmp_path / "locks")) == [
        f"block-{LOW + i * 10}.lock" for i in range(3)
    ]


def test_a_port_in_use_is_skipped(tmp_path: Path) -> None:
    a = PortAllocator(tmp_path / "locks", LOW, LOW + 10, block_size=10)
    first = a.port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", first + 1))
        busy.listen()
        assert a.port() == first + 2


def test_the_range_used_up_raises(tmp_path: Path) -> None:
    a = PortAllocator(tmp_path / "locks", LOW, LOW + 4, block_size=2)
    assert len({a.port() for _ in range(4)}) == 4
    with pytest.raises(NoFreePort, match="no free block of 2 ports"):
        a.port()


def test_a_bad_range_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        PortAllocator(tmp_path, 2000, 1000)
    with pytest.raises(ValueError):
        PortAllocator(tmp_path, 1000, 2000, block_size=0)


def test_two_processes_never_share_a_block_and_a_dead_ones_block_is_free_again(
    tmp_path: Path,
) -> None:
    locks = tmp_path / "locks"
    code = _holder_code(locks, LOW, LOW + 20, 10, 3)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    other = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert other.stdout is not None
        theirs = {int(p) for p in other.stdout.readline().split()}
        assert len(theirs) == 3
        mine = PortAllocator(locks, LOW, LOW + 20, block_size=10)
        got = {mine.port() for _ in range(10)}
        # The other process holds one block of two: all ten of mine come from the other one.
        assert {(p - LOW) // 10 for p in got} != {(p - LOW) // 10 for p in theirs}
        assert len({(p - LOW) // 10 for p in got}) == 1
        with pytest.raises(NoFreePort):
            mine.port()
    finally:
        other.communicate("", timeout=30)
    # The other process has exited: its lock went with it, and a newcomer may take the block.
    newcomer = PortAllocator(locks, LOW, LOW + 20, block_size=10)
    assert {(newcomer.port() - LOW) // 10} == {(p - LOW) // 10 for p in theirs}


def test_a_forked_child_takes_a_block_of_its_own(tmp_path: Path) -> None:
    a = PortAllocator(tmp_path / "locks", LOW, LOW + 20, block_size=10)
    parent_port = a.port()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one port and leave without running pytest's teardown
        try:
            os.write(w, str(a.port()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        child_port = int(f.read())
    os.waitpid(pid, 0)
    assert (child_port - LOW) // 10 != (parent_port - LOW) // 10
