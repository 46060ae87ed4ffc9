"""obadmin's side of ``ALTER SYSTEM DRAIN SERVER``: the statement is sent
with a deadline of its own TIMEOUT plus a margin, and while it waits a second thread reads
``DBA_OB_SERVER_DRAINS`` every :data:`POLL_S` and prints one progress line per reading on
the error stream (the answer's format on the output stream stays what ``--format`` says).

Why polling the view rather than a server-streaming RPC: the progress is in the table anyway
(the MySQL endpoint's sessions read it the same way), a poll goes through any RS (a follower
forwards it) and keeps working when the RS leader changes mid-drain, where a stream would
break with the leader that served it; and no new RPC, nor proto field, is needed. The cost,
one small SELECT a second, is nothing next to the drain.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TextIO

from obcommon.addresses import format_server, parse_server
from obcommon.durations import parse_duration
from obcommon.proto import obrpc_pb2
from sql.client import result_rows

#: Period of the progress reads, seconds (the RS writes at least every second).
POLL_S = 1.0
#: Added to the statement's TIMEOUT for its RPC deadline, seconds.
MARGIN_S = 30.0
#: DRAIN's default TIMEOUT, seconds (the RS's ``DRAIN_DEFAULT_TIMEOUT_US``).
DEFAULT_TIMEOUT_S = 600.0

_DRAIN = re.compile(
    r"^\s*ALTER\s+SYSTEM\s+DRAIN\s+SERVER\s+'([^']*)'(?:\s+TIMEOUT\s+'?([0-9]+[a-z]*)'?)?",
    re.IGNORECASE,
)


def drain_target(statement: str) -> tuple[str, float] | None:
    """``(server, rpc deadline in seconds)`` of a DRAIN SERVER statement, None for any
    other statement (or an address or timeout the RS will refuse anyway)."""
    m = _DRAIN.match(statement)
    if m is None:
        return None
    try:
        ip, port = parse_server(m.group(1))
        timeout_s = parse_duration(m.group(2)) / 1e6 if m.group(2) else DEFAULT_TIMEOUT_S
    except (ValueError, Exception):
        return None
    return format_server(ip, port), timeout_s + MARGIN_S


def progress_query(server: str) -> str:
    """The SELECT of one drain's row."""
    ip, port = parse_server(server)
    return (
        "SELECT STATUS, LEADERS_LEFT, COPIES_LEFT, BLOCKERS FROM DBA_OB_SERVER_DRAINS "
        f"WHERE SVR_IP = '{ip}' AND SVR_PORT = {port}"
    )


def progress_line(server: str, row: list[object]) -> str:
    """``drain 127.0.0.1:2882 DRAINING: leaders left 3, copies left 0``."""
    status, leaders, copies, blockers = row[:4]
    counted = int(str(leaders)) >= 0 if leaders is not None else False
    text = f"drain {server} {status}: " + (
        f"leaders left {leaders}, copies left {copies}" if counted else "counting"
    )
    return text + (f" ({blockers})" if blockers else "")


def run_with_progress(
    statement: str,
    server: str,
    send: Callable[[str], obrpc_pb2.SqlResponse],
    query: Callable[[str], obrpc_pb2.SqlResponse],
    err: TextIO,
    poll_s: float = POLL_S,
) -> obrpc_pb2.SqlResponse:
    """Send ``statement`` with ``send`` and, until it answers, print a progress line on
    ``err`` every ``poll_s`` from ``query`` (errors of a poll are skipped: the next one
    retries). Returns the statement's answer."""
    done = threading.Event()
    box: list[obrpc_pb2.SqlResponse] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            box.append(send(statement))
        except BaseException as e:  # re-raised in the caller's thread
            failure.append(e)
        finally:
            done.set()

    threading.Thread(target=run, name="drain-statement", daemon=True).start()
    sql = progress_query(server)
    while not done.wait(poll_s):
        try:
            resp = query(sql)
        except Exception:  # noqa: BLE001 - a failed poll is retried at the next one
            continue
        if resp.error.code or not resp.is_result_set:
            continue
        for row in result_rows(resp):
            print(progress_line(server, list(row)), file=err, flush=True)
    if failure:
        raise failure[0]
    return box[0]
