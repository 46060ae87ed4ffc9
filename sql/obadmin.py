"""``obadmin``: the operators' SQL client for the RootService, in the manner of the mysql client.

::

    obadmin --rs HOST:PORT[,HOST:PORT...] [-e STATEMENT] [--format table|json|csv] [--timeout S]

Statements travel verbatim through ``AdminService.ExecuteSql`` (rootservice/proto/obrpc.proto);
the RS parses and executes them, the client only splits its input at ``;`` and prints the
answer. With ``-e`` it runs the given statements; otherwise it reads stdin: an interactive
shell on a terminal, a script (stopping at the first error, like ``mysql < file``) when not.

Output follows the mysql client: a ``+---+`` bordered table and ``N rows in set`` / ``Empty set``
for result sets, ``Query OK, N rows affected`` otherwise, and ``ERROR <code> (<state>): ...`` on
stderr with exit status 1 for errors (SPEC.md sections 7 and 12).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

import grpc
from tabulate import tabulate

from obcommon.errors import ERRORS, ObError, RemoteObError, error_from_proto, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc

PROMPT = "obadmin> "
CONTINUATION_PROMPT = "    -> "
HISTORY_FILE = "~/.obadmin_history"
HISTORY_LENGTH = 1000
FORMATS = ("table", "json", "csv")
DEFAULT_TIMEOUT_S = 60.0

EXIT_COMMANDS = frozenset({"exit", "quit", "\\q"})
"""The mysql client's commands for leaving the shell (``exit``, ``quit``, ``\\q``)."""

NOT_MASTER_CODES = frozenset({ERRORS["OB_RS_NOT_MASTER"].code, ERRORS["OB_NOT_MASTER"].code})
"""Answers that mean "ask another RS": the statement was not executed."""

Value = int | float | str | None


class RsUnreachableError(Exception):
    """No RootService in the list answered: every address refused the connection (gRPC
    ``UNAVAILABLE``). ``addr`` is the last address tried, ``detail`` gRPC's explanation."""

    def __init__(self, addr: str, detail: str) -> None:
        """Record the last address tried and gRPC's explanation of the failure."""
        super().__init__(f"can't connect to RootService on {addr!r}: {detail}")
        self.addr = addr
        self.detail = detail

    def to_sql_text(self) -> str:
        """The line obadmin prints, shaped like the mysql client's ``ERROR 2003 (HY000):
        Can't connect to MySQL server on 'host:port' (111)``."""
        return f"ERROR 2003 (HY000): Can't connect to RootService on '{self.addr}' ({self.detail})"


class _Unavailable(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# --- talking to the RS -----------------------------------------------------------------


def _error_response(err: ObError) -> obrpc_pb2.SqlResponse:
    resp = obrpc_pb2.SqlResponse()
    error_to_proto(err, resp.error)
    return resp


def _rpc_error_response(e: grpc.RpcError) -> obrpc_pb2.SqlResponse:
    """An RPC that failed after reaching the RS, as an error response (the statement may
    have run, so it is not retried elsewhere)."""
    code = e.code() if isinstance(e, grpc.Call) else None
    details = (e.details() if isinstance(e, grpc.Call) else None) or str(e)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return _error_response(ObError("OB_TIMEOUT"))
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # gRPC refuses a message above the RS's receive limit before the RS sees it: for the
        # operator that is MySQL's max_allowed_packet error.
        return _error_response(ObError("ER_NET_PACKET_TOO_LARGE"))
    # Unary refusals may carry the OceanBase error in trailing metadata (rootservice/errors.py).
    meta = dict(e.trailing_metadata() or ()) if isinstance(e, grpc.Call) else {}
    ob_code, ob_name = meta.get("ob-code"), meta.get("ob-name")
    if isinstance(ob_code, str) and isinstance(ob_name, str):
        try:
            number = int(ob_code)
        except ValueError:
            number = 0
        if number:
            known = ERRORS.get(ob_name)
            sqlstate = known.sqlstate if known else "HY000"
            return _error_response(RemoteObError(number, ob_name, sqlstate, details))
    return _error_response(ObError("OB_ERR_UNEXPECTED", detail=f"{code}: {details}"))


def _call(addr: str, statement: str, timeout_s: float) -> obrpc_pb2.SqlResponse:
    with grpc.insecure_channel(addr) as channel:
        stub = obrpc_pb2_grpc.AdminServiceStub(channel)
        try:
            response: obrpc_pb2.SqlResponse = stub.ExecuteSql(
                obrpc_pb2.SqlRequest(statement=statement), timeout=timeout_s
            )
        except grpc.RpcError as e:
            if isinstance(e, grpc.Call) and e.code() == grpc.StatusCode.UNAVAILABLE:
                raise _Unavailable(e.details() or "unavailable") from e
            return _rpc_error_response(e)
    return response


def execute(rs_addrs: Sequence[str], statement: str, timeout_s: float) -> obrpc_pb2.SqlResponse:
    """Run ``statement`` on the leader RS and return its ``SqlResponse`` (which may carry an
    error: check ``error.code``).

    The addresses (``"host:port"``) are tried in order; an address is skipped when it refuses
    the connection (gRPC ``UNAVAILABLE``) or answers ``OB_RS_NOT_MASTER`` / ``OB_NOT_MASTER``.
    The first not-master answer's ``leader_hint`` is tried next, once. ``timeout_s`` bounds
    the whole call; when it runs out the response carries ``OB_TIMEOUT`` and no other RS is
    tried (the statement may be running). When every address only said not-master, the last
    such response is returned.

    Raises :class:`RsUnreachableError` when no address could be reached.
    """
    deadline = time.monotonic() + timeout_s
    pending = [a.strip() for a in rs_addrs if a.strip()]
    tried: set[str] = set()
    hint_followed = False
    not_master: obrpc_pb2.SqlResponse | None = None
    unreachable: RsUnreachableError | None = None
    while pending:
        addr = pending.pop(0)
        if addr in tried:
            continue
        tried.add(addr)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _error_response(ObError("OB_TIMEOUT"))
        try:
            response = _call(addr, statement, remaining)
        except _Unavailable as e:
            unreachable = RsUnreachableError(addr, e.detail)
            continue
        if response.error.code not in NOT_MASTER_CODES:
            return response
        not_master = response
        hint = response.leader_hint.strip()
        if hint and not hint_followed and hint not in tried:
            hint_followed = True
            pending.insert(0, hint)
    if not_master is not None:
        return not_master
    if unreachable is None:
        unreachable = RsUnreachableError(",".join(rs_addrs), "no address given")
    raise unreachable


# --- formatting (pure) ---------------------------------------------------------------------


def cell_value(cell: obrpc_pb2.Cell) -> Value:
    """The Python value of a result cell: None for NULL (or an empty cell), else the int,
    float or str set in its ``value`` oneof."""
    kind = cell.WhichOneof("value")
    if kind == "int_value":
        return cell.int_value
    if kind == "double_value":
        return cell.double_value
    if kind == "string_value":
        return cell.string_value
    return None


def result_rows(resp: obrpc_pb2.SqlResponse) -> list[list[Value]]:
    """The rows of a result set as lists of Python values (see :func:`cell_value`)."""
    return [[cell_value(c) for c in row.cells] for row in resp.rows]


def _text(value: int | float | str) -> str:
    return str(value)  # floats print as repr: shortest text that reads back the same


def _plural(n: int, word: str) -> str:
    # The mysql client says "1 row in set" but "0 rows affected".
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Value]]) -> str:
    """A result set as the mysql client prints it: bordered table (NULL for nulls, numbers
    right-aligned, headers left-aligned) followed by ``N rows in set``; ``Empty set`` when
    there are no rows."""
    if not rows:
        return "Empty set"
    width = len(columns)
    aligns = []
    for i in range(width):
        values = [r[i] for r in rows if i < len(r) and r[i] is not None]
        numeric = bool(values) and all(isinstance(v, int | float) for v in values)
        aligns.append("right" if numeric else "left")
    cells = [[None if v is None else _text(v) for v in row] for row in rows]
    table = tabulate(
        cells,
        headers=list(columns),
        # "pretty" draws the mysql client's +---+ rules (none between rows) and, unlike the
        # other formats, pads headers by exactly one blank; alignment is set explicitly below.
        tablefmt="pretty",
        missingval="NULL",
        disable_numparse=True,  # '007' stays a string, not 7
        preserve_whitespace=True,
        colalign=aligns,
        headersglobalalign="left",
    )
    return f"{table}\n{_plural(len(rows), 'row')} in set"


def format_json(columns: Sequence[str], rows: Sequence[Sequence[Value]]) -> str:
    """A result set as a JSON array of objects, column -> value (ints stay ints, NULL is
    null)."""
    objects = [dict(zip(columns, row, strict=False)) for row in rows]
    return json.dumps(objects, ensure_ascii=False, indent=2)


def format_csv(columns: Sequence[str], rows: Sequence[Sequence[Value]]) -> str:
    """A result set as CSV (RFC 4180 quoting by the csv module): a header line, then one line
    per row. NULL is an empty field, as PostgreSQL's CSV output writes it."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else _text(v) for v in row])
    return out.getvalue().rstrip("\n")


def format_ok(resp: obrpc_pb2.SqlResponse) -> str:
    """A statement without result set: ``Query OK, N rows affected`` then the ``info`` line."""
    text = f"Query OK, {_plural(resp.affected_rows, 'row')} affected"
    return f"{text}\n{resp.info}" if resp.info else text


def format_response(resp: obrpc_pb2.SqlResponse, fmt: str = "table") -> str:
    """The text obadmin prints for one response, without a trailing newline.

    An error gives its ``ObError.to_sql_text()`` line (to go to stderr); a result set is
    rendered as ``fmt`` (``table``, ``json`` or ``csv``); anything else is ``Query OK...``.
    Raises ``ValueError`` for an unknown ``fmt``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}, expected one of {', '.join(FORMATS)}")
    err = error_from_proto(resp.error)
    if err is not None:
        return err.to_sql_text()
    if not resp.is_result_set:
        return format_ok(resp)
    columns, rows = list(resp.columns), result_rows(resp)
    if fmt == "json":
        return format_json(columns, rows)
    if fmt == "csv":
        return format_csv(columns, rows)
    return format_table(columns, rows)


# --- splitting input into statements -------------------------------------------------------

_BLANKS = " \t\r\n\f\v"


def split_statements(text: str) -> tuple[list[str], str]:
    """Cut ``text`` at the ``;`` that end statements, as the mysql client does: a ``;`` inside
    quotes (``'``, ``"``, `````), ``--``/``#`` line comments or ``/* */`` comments does not
    count. Returns the complete statements (without their ``;``, stripped, skipping those
    holding only blanks and comments) and the unfinished rest: ``""`` when it is only blanks
    and closed comments, else the raw text, to be continued or sent as the last statement.

    Only the statement boundaries are found here; the RS parses the statements.
    """
    statements: list[str] = []
    start = 0
    significant = False  # the current statement has more than blanks and comments
    state = ""  # "" outside; a quote character; "--" in a line comment; "/*" in a block one
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if not state:
            if c in "'\"`":
                state = c
                significant = True
            elif c == "#":
                state = "--"
            elif c == "-" and text.startswith("--", i) and (i + 2 >= n or text[i + 2] in _BLANKS):
                state = "--"
                i += 1
            elif c == "/" and text.startswith("/*", i):
                state = "/*"
                i += 1
            elif c == ";":
                if significant:
                    statements.append(text[start:i].strip())
                start = i + 1
                significant = False
            elif c not in _BLANKS:
                significant = True
        elif state == "--":
            if c == "\n":
                state = ""
        elif state == "/*":
            if text.startswith("*/", i):
                state = ""
                i += 1
        elif c == "\\" and state != "`":
            i += 1  # MySQL: a backslash escapes the next character in strings
        elif c == state:
            if i + 1 < n and text[i + 1] == state:
                i += 1  # a doubled quote stands for itself
            else:
                state = ""
        i += 1
    rest = text[start:]
    if not significant and state in ("", "--"):
        rest = ""
    return statements, rest


def is_exit_command(line: str) -> bool:
    """True for the mysql client's ``exit``, ``quit`` and ``\\q`` (optionally with ``;``)."""
    return line.strip().rstrip(";").strip().lower() in EXIT_COMMANDS


# --- the command ---------------------------------------------------------------------------


class _Client:
    def __init__(
        self, rs_addrs: list[str], fmt: str, timeout_s: float, out: TextIO, err: TextIO
    ) -> None:
        self.rs_addrs = rs_addrs
        self.fmt = fmt
        self.timeout_s = timeout_s
        self.out = out
        self.err = err

    def run_one(self, statement: str) -> bool:
        """Send one statement and print the answer; False when it failed."""
        try:
            response = execute(self.rs_addrs, statement, self.timeout_s)
        except RsUnreachableError as e:
            print(e.to_sql_text(), file=self.err, flush=True)
            return False
        text = format_response(response, self.fmt)
        if response.error.code:
            print(text, file=self.err, flush=True)
            return False
        print(text, file=self.out, flush=True)
        return True

    def run_script(self, text: str) -> int:
        """Run every statement of ``text`` in order, stopping at the first error (exit 1),
        like ``mysql -e`` and ``mysql < file``. A last statement without ``;`` runs too."""
        statements, rest = split_statements(text)
        if rest.strip():
            statements.append(rest.strip())
        for statement in statements:
            if is_exit_command(statement):
                break
            if not self.run_one(statement):
                return 1
        return 0

    def interactive(self) -> int:
        """The shell: prompts, multi-line statements ended by ``;``, readline history kept in
        ``~/.obadmin_history``; errors are printed and the shell goes on."""
        try:
            import readline
        except ImportError:  # not every Python is built with it; the shell still works
            readline = None  # type: ignore[assignment]
        history = os.path.expanduser(HISTORY_FILE)
        if readline is not None:
            # First run, or an unreadable file: start with no history.
            with contextlib.suppress(OSError):
                readline.read_history_file(history)
            readline.set_history_length(HISTORY_LENGTH)
        buffer = ""
        try:
            while True:
                try:
                    line = input(CONTINUATION_PROMPT if buffer else PROMPT)
                except EOFError:
                    print(file=self.out)
                    break
                except KeyboardInterrupt:
                    # As the mysql client: Ctrl-C drops the statement being typed.
                    print("^C", file=self.out)
                    buffer = ""
                    continue
                if not buffer and is_exit_command(line):
                    break
                statements, buffer = split_statements(buffer + line + "\n")
                for statement in statements:
                    try:
                        self.run_one(statement)
                    except KeyboardInterrupt:
                        print("Query aborted by Ctrl+C", file=self.err)
                    print(file=self.out)
        finally:
            if readline is not None:
                # History is a convenience: never fail the session over it.
                with contextlib.suppress(OSError):
                    readline.write_history_file(history)
        print("Bye", file=self.out)
        return 0


def progress_line(job_id: int, status: str, progress: int, extra: str, width: int = 30) -> str:
    """One progress line of a rootservice job: ``job 7 [#########.....]  45% units 1/2 ...``.

    ``extra`` is the job's ``extra_info`` (JSON written by the RS's balancer, or "")."""
    filled = max(0, min(width, progress * width // 100))
    bar = "#" * filled + "." * (width - filled)
    parts = [f"job {job_id} [{bar}] {progress:3d}% {status}"]
    try:
        info = json.loads(extra) if extra else {}
    except ValueError:
        info = {}
    if info:
        parts.append(
            f"units {info.get('units_moved', 0)}/{info.get('units_total', 0)}"
            f" replicas {info.get('replicas_moved', 0)}/{info.get('replicas_total', 0)}"
            f" copied {info.get('copied', '0')}"
        )
        if info.get("eta"):
            parts.append(f"eta {info['eta']}")
        if info.get("stalled"):
            parts.append(f"STALLED: {info['stalled']}")
    return "  ".join(parts)


def wait_job(
    rs_addrs: Sequence[str],
    job_id: int,
    timeout_s: float,
    out: TextIO,
    poll_s: float = 0.5,
    deadline_s: float = 3600.0,
) -> int:
    """Poll ``DBA_OB_ROOTSERVICE_JOBS`` for ``job_id`` until it leaves INPROGRESS, drawing a
    progress bar on ``out`` (redrawn in place on a terminal, one line per change otherwise).
    Returns 0 for SUCCESS, 1 for CANCELED / FAILED / an unknown job / an error, 3 when
    ``deadline_s`` seconds pass first."""
    tty = out.isatty()
    last = ""
    for _ in range(int(deadline_s / poll_s) + 1):
        resp = execute(
            rs_addrs,
            "SELECT job_status, progress, extra_info FROM DBA_OB_ROOTSERVICE_JOBS "
            f"WHERE job_id = {int(job_id)}",
            timeout_s,
        )
        if resp.error.code:
            out.write(f"\n{format_response(resp)}\n")
            return 1
        rows = result_rows(resp)
        if not rows:
            out.write(f"no job {job_id}\n")
            return 1
        status, progress, extra = rows[0]
        line = progress_line(job_id, str(status), int(progress or 0), str(extra or ""))
        if line != last:
            out.write(("\r" + line + "\033[K") if tty else line + "\n")
            out.flush()
            last = line
        if status != "INPROGRESS":
            if tty:
                out.write("\n")
            return 0 if status == "SUCCESS" else 1
        time.sleep(poll_s)
    out.write(f"\njob {job_id} still INPROGRESS after {deadline_s:.0f} s\n")
    return 3


def _build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="obadmin",
        description="Send admin SQL (ALTER SYSTEM ..., SHOW PARAMETERS, SELECT) to the RootService.",
    )
    parser.add_argument(
        "--rs",
        required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="RootService addresses, tried in order until the leader answers",
    )
    parser.add_argument(
        "-e", "--execute", metavar="STATEMENT", help="run these statements and exit"
    )
    parser.add_argument("--format", choices=FORMATS, default="table", help="result set format")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="deadline of each statement (default: %(default)s)",
    )
    parser.add_argument(
        "--wait-job",
        type=int,
        metavar="JOB_ID",
        help="follow a rootservice job (e.g. DELETE_SERVER) with a progress bar until it ends",
    )
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="give up --wait-job after this long (exit 3; default: %(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``obadmin`` console script. Returns the exit status: 0 when every statement
    succeeded, 1 after an error (printed on stderr as ``ERROR <code> (<state>): ...``), 2 for
    bad command-line arguments (argparse)."""
    parser = _build_arg_parser()
    args = parser.parse_args(argv)
    rs_addrs = [a.strip() for a in args.rs.split(",") if a.strip()]
    if not rs_addrs:
        parser.error("--rs needs at least one HOST:PORT")
    if not args.timeout > 0:
        parser.error("--timeout must be positive")
    if args.wait_job is not None:
        return wait_job(
            rs_addrs, args.wait_job, args.timeout, sys.stdout, deadline_s=args.wait_timeout
        )
    client = _Client(rs_addrs, args.format, args.timeout, sys.stdout, sys.stderr)
    if args.execute is not None:
        return client.run_script(args.execute)
    if sys.stdin.isatty():
        return client.interactive()
    return client.run_script(sys.stdin.read())


if __name__ == "__main__":
    sys.exit(main())
