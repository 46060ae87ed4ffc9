"""TCP ports on 127.0.0.1 for the processes the tests start, unique across concurrent pytest
processes (pytest-xdist workers, or two developers' runs on one machine).

Binding port 0 and closing the socket (the obvious way) races: between the close and the
child process's own bind, the kernel may give the same ephemeral port to another xdist worker
doing the same thing, or to any outgoing connection. So ports come from below the kernel's
ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``, which outgoing connections draw
from), in blocks of :data:`BLOCK_SIZE`: a process claims a block by holding an exclusive
``flock`` on ``<tmp>/ob-test-ports/block-<n>.lock`` for its whole life (the kernel drops the
lock when the process dies, so a killed run leaves nothing stale), then hands its ports out
one after the other, skipping any it cannot bind at that moment (a server of someone else's).
A port is never handed out twice by one process, and two processes never share a block.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import tempfile
import threading
from pathlib import Path

HOST = "127.0.0.1"
#: Lowest port handed out: above the registered ports of common local services (PostgreSQL's
#: 5432, MySQL's 3306, OceanBase's 2881/2882...).
LOW = 10000
#: Ports per block: a worker of the whole suite uses a few hundred.
BLOCK_SIZE = 250
LOCK_DIR_NAME = "ob-test-ports"


class NoFreePort(RuntimeError):
    """Every block of the range is held by another live process, or no port of it binds."""


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """First port of the kernel's ephemeral range (Linux's default 32768 when unreadable)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    # No SO_REUSEADDR: a port with a socket in TIME_WAIT is skipped too, which costs nothing
    # and spares a server without SO_REUSEADDR a spurious "address in use".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


class PortAllocator:
    """Ports from ``[low, high)`` in blocks of ``block_size``, claimed through lock files in
    ``lock_dir`` (see the module docstring). Thread-safe; a forked child starts afresh with
    blocks of its own (the parent's cursor and locks are not its to use).

    Raises :class:`NoFreePort` from :meth:`port` when the range is used up.
    """

    def __init__(self, lock_dir: Path, low: int, high: int, block_size: int = BLOCK_SIZE) -> None:
        if not 0 < low < high <= 65536 or block_size < 1:
            raise ValueError(f"bad port range [{low}, {high}) / block size {block_size}")
        self.lock_dir = lock_dir
        self.low = low
        self.high = high
        self.block_size = block_size
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # A new lock too: in a forked child the parent's may be held by a thread that is gone.
        self._lock = threading.Lock()
        self._held: list[int] = []  # file descriptors holding the claimed blocks' locks
        self._claimed: set[int] = set()  # block numbers tried by this process
        self._next = 0
        self._end = 0

    @property
    def blocks(self) -> int:
        """How many whole blocks the range holds."""
        return (self.high - self.low) // self.block_size

    def _claim_block(self) -> None:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            # Anyone's run may need the directory: another user's included.
            os.chmod(self.lock_dir, 0o1777)
        n = self.blocks
        # Start at a spot that depends on the pid so that workers starting together do not
        # all contend for block 0 first; any free block will do.
        start = os.getpid() % n if n else 0
        for i in range(n):
            block = (start + i) % n
            if block in self._claimed:
                continue
            self._claimed.add(block)
            path = self.lock_dir / f"block-{self.low + block * self.block_size}.lock"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError:
                continue  # e.g. another user's file we may not open
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o666)  # past the umask: other users' runs lock it too
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
                    continue
                raise
            self._held.append(fd)
            self._next = self.low + block * self.block_size
            self._end = self._next + self.block_size
            return
        raise NoFreePort(
            f"no free block of {self.block_size} ports in [{self.low}, {self.high}) "
            f"(locks in {self.lock_dir})"
        )

    def port(self) -> int:
        """A port of a block this process holds, bindable on 127.0.0.1 right now and never
        returned before by this process."""
        with self._lock:
            while True:
                while self._next < self._end:
                    p = self._next
                    self._next += 1
                    if _bindable(p):
                        return p
                self._claim_block()


_default: PortAllocator | None = None
_default_lock = threading.Lock()


def default_allocator() -> PortAllocator:
    """The process's allocator: ``[LOW, ephemeral_low())``, locks in ``<tmp>/ob-test-ports``."""
    global _default
    with _default_lock:
        if _default is None:
            high = ephemeral_low()
            if high - LOW < BLOCK_SIZE:  # an unusual ephemeral range: use the one above it
                high = 65536
            _default = PortAllocator(Path(tempfile.gettempdir()) / LOCK_DIR_NAME, LOW, high)
        return _default


def free_port() -> int:
    """A TCP port on 127.0.0.1, free now and handed to no other test process (see the module
    docstring). Raises :class:`NoFreePort` when the range is used up."""
    return default_allocator().port()
