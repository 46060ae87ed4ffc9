"""The RS commands this agent applied, and the thread stacks the RS asks for when it finds
the agent lagging (the lag detector).

Every RS command (``ApplyReplicas``, ``RequestHeartbeat``) carries ``command_seq``, the RS's
per-server sequence number (``rs_epoch << 32 | n``, so a new RS leader's commands sort above
the old one's); :class:`AppliedCommands` keeps the highest one applied and every lease request
reports it (``LeaseRequest.applied_command_seq``). The RS finds a server LAGGING when one of
its commands stays unapplied for ``agent_lag_timeout`` while the heartbeats go on
(Elasticsearch's ``LagDetector``: a node that has not applied a committed cluster state
within ``cluster.follower_lag.timeout``).

:func:`dump_stacks` is ``ObserverService.DumpStacks``: every thread's Python stack and the
event loop's tasks, which the RS writes into the LAGGING event (Elasticsearch logs the lagging
node's hot threads before it removes it).
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
import traceback
from typing import Any

from obcommon.proto import obrpc_pb2

#: The most characters of one stack kept in a dump (a deep recursion must not make the
#: answer megabytes).
STACK_CHARS = 8_000


class AppliedCommands:
    """The highest RS ``command_seq`` applied (0 = none yet); memory only: after a restart the
    RS's calls in flight failed and it forgets them."""

    def __init__(self) -> None:
        """Nothing applied yet."""
        self.highest = 0

    def applied(self, seq: int) -> None:
        """Command ``seq`` (0 = an RS that numbers none) was applied."""
        if seq > self.highest:
            self.highest = seq


def dump_stacks() -> obrpc_pb2.DumpStacksResponse:
    """Every live thread's Python stack (``sys._current_frames``, innermost frame last, at
    most :data:`STACK_CHARS` each) and, when called on an event loop, each asyncio task's
    stack. Never raises."""
    frames = sys._current_frames()
    out = obrpc_pb2.DumpStacksResponse()
    for t in threading.enumerate():
        frame = frames.get(t.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        out.threads.add(name=t.name, ident=t.ident or 0, stack=stack[-STACK_CHARS:])
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        return out
    buf = io.StringIO()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        # By hand, not Task.print_stack: that shows only a suspended task's outermost
        # coroutine (and cannot format a frame of gRPC's Cython coroutines, which has no line
        # number); following ``cr_await`` shows what it waits in, outermost first.
        buf.write(f"Stack for {task.get_name()} (most recent call last):\n")
        coro: Any = task.get_coro()
        for _ in range(30):
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is None:
                break
            code = frame.f_code
            buf.write(
                f'  File "{code.co_filename}", line {frame.f_lineno or 0}, in {code.co_name}\n'
            )
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    out.event_loop = buf.getvalue()[-4 * STACK_CHARS :]
    return out
