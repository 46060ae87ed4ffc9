"""Collaborators every part of the server layer is given at construction and that exist before
any of them: the task registry's "run this task now" and the background executor.

Both are plain typed callables (``RootService.wake`` and ``RootService._background`` in
production; tests pass no-ops or run the work inline).
"""

from __future__ import annotations

from collections.abc import Callable

Wake = Callable[[str], None]
"""``wake(name)``: run the registered task ``name`` now (``"balancer"``,
``"empty_server_checker"``, ``"lost_replica_checker"``); a no-op for a name with no job.
Called on the heartbeat path, so it must be cheap (``rootservice.tasks.wake``)."""

Background = Callable[[Callable[[], object]], None]
"""``background(fn)``: run ``fn`` off the calling thread (the RS thread pool), e.g. the
automatic STOP / START of a server whose data disk fails / recovers, or the heartbeat request
after ADD SERVER. Exceptions of ``fn`` are the executor's to log."""


def inline(fn: Callable[[], object]) -> None:
    """A :data:`Background` that runs ``fn`` at once in the calling thread (unit tests)."""
    fn()
