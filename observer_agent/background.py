"""Helpers for the agent's background jobs (the lease loop, the disk probe and the resource
refresh of docs/design/leases.md): blocking work in daemon threads, sleeps that end early on
stop, and one-line descriptions of failures for log lines. Durations here are seconds."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

_T = TypeVar("_T")


def in_daemon_thread(fn: Callable[[], _T], name: str) -> asyncio.Future[_T]:
    """Run ``fn`` in a new daemon thread; the returned future completes on the running loop.

    Not ``asyncio.to_thread``: a probe stuck in the kernel on a dead disk would then block
    the executor's shutdown, and with it SIGTERM. A daemon thread is simply left behind.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[_T] = loop.create_future()

    def deliver(setter: Callable[[Any], None], value: Any) -> None:
        if not fut.done():
            setter(value)

    def target() -> None:
        try:
            result = fn()
        except BaseException as e:  # delivered to the awaiting side, not swallowed
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(deliver, fut.set_exception, e)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver, fut.set_result, result)

    threading.Thread(target=target, name=name, daemon=True).start()
    return fut


def describe_exception(e: BaseException) -> str:
    """A one-line description of a failed RPC or wait, for log lines."""
    if isinstance(e, grpc.aio.AioRpcError):
        details = (e.details() or "").replace("\n", " ")
        return f"{e.code().name}: {details}"
    if isinstance(e, TimeoutError):
        return "no answer in time"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def is_set(stop: asyncio.Event | None) -> bool:
    """True once ``stop`` is set (never when there is no event)."""
    return stop is not None and stop.is_set()


async def sleep_unless_stopped(stop: asyncio.Event | None, seconds: float) -> None:
    """Sleep up to ``seconds`` (negative = 0), waking early when ``stop`` is set."""
    if stop is None:
        await asyncio.sleep(max(0.0, seconds))
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))


async def sleep_unless_woken(
    stop: asyncio.Event | None, wake: asyncio.Event, seconds: float
) -> bool:
    """Sleep up to ``seconds`` (negative = 0), waking early when ``stop`` or ``wake`` is set;
    True when ``wake`` is set at the end (it is left set: the caller clears it)."""
    if wake.is_set() or is_set(stop):
        return wake.is_set()
    waits = {asyncio.ensure_future(wake.wait())}
    if stop is not None:
        waits.add(asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(waits, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        # Retrieved, so a cancelled wait is never reported as never awaited.
        await asyncio.gather(*waits, return_exceptions=True)
    return wake.is_set()
