"""The replica layer's background work on the event loop: the set of tasks it spawns (so that
``stop`` can cancel them) and blocking calls moved to threads without racing their cleanup.
Times here are seconds of the event loop's monotonic clock (waits only, never reported)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

#: Bound on cancelling loops and closing channels at stop, seconds.
CLOSE_TIMEOUT_S = 1.0

_T = TypeVar("_T")


class TaskSet:
    """Tasks spawned by the replica layer (copies, verifications, applies) and still running;
    a task leaves the set when it ends."""

    def __init__(self) -> None:
        """An empty set."""
        self._tasks: set[asyncio.Future[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, _T], name: str) -> asyncio.Task[_T]:
        """Run ``coro`` in a task named ``name`` on the running loop and keep it in the set."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def running(self) -> set[asyncio.Future[Any]]:
        """A copy of the set (the tasks not ended yet)."""
        return set(self._tasks)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # Mark an abandoned thread's outcome as seen (no "exception never retrieved" warning).
    if not fut.cancelled():
        fut.exception()


async def run_blocking(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a thread. When the caller is cancelled meanwhile, wait (bounded) for
    ``fn`` to return before re-raising, so that the cleanup that follows never races the
    thread (an fd closed under a read, a temp file removed under a write)."""
    fut = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    fut.add_done_callback(_retrieve)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await asyncio.wait({fut}, timeout=CLOSE_TIMEOUT_S)
        raise
