"""``obadmin``'s input side: splitting input at ``;`` / ``\\G`` (outside quotes and comments),
the interactive shell (prompt_toolkit: completion of keywords, tables and columns, whole
statements as history entries), ``help``, and running a script that stops at the first
error like ``mysql < file``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable
from typing import NamedTuple, TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.completion.base import get_common_complete_suffix
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output

from obcommon.proto import obrpc_pb2
from sql.client import NO_CREDENTIALS, Credentials, RsUnreachableError, Value, execute, result_rows
from sql.drain_watch import drain_target, run_with_progress
from sql.formatting import error_json, format_response
from sql.help import help_text, help_topic_of, keywords

PROMPT = "obadmin> "


CONTINUATION_PROMPT = "    -> "


HISTORY_FILE = "~/.obadmin_history"


EXIT_COMMANDS = frozenset({"exit", "quit", "\\q"})
"""The mysql client's commands for leaving the shell (``exit``, ``quit``, ``\\q``)."""


_BLANKS = " \t\r\n\f\v"


class Piece(NamedTuple):
    """One statement cut from the input: its ``text`` (stripped, without terminator) and
    whether it ended with ``\\G`` (print its rows vertically)."""

    text: str
    vertical: bool = False


def split_statements(text: str) -> tuple[list[str], str]:
    """:func:`split_input` without the terminators: the statements' texts and the rest."""
    pieces, rest = split_input(text)
    return [p.text for p in pieces], rest


def split_input(text: str) -> tuple[list[Piece], str]:
    """Cut ``text`` at the ``;``, ``\\g`` and ``\\G`` that end statements, as the mysql
    client does: a terminator inside quotes (``'``, ``"``, `````), ``--``/``#`` line comments
    or ``/* */`` comments does not count. Returns the complete statements (stripped, without
    their terminator, skipping those holding only blanks and comments; ``vertical`` for
    ``\\G``) and the unfinished rest: ``""`` when it is only blanks and closed comments, else
    the raw text, to be continued or sent as the last statement.

    Only the statement boundaries are found here; the RS parses the statements.
    """
    statements: list[Piece] = []
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
            elif c == ";" or (c == "\\" and text.startswith(("\\G", "\\g"), i)):
                if significant:
                    statements.append(Piece(text[start:i].strip(), text.startswith("\\G", i)))
                if c == "\\":
                    i += 1  # the G
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


class Catalog:
    """The table and column names the shell completes, fetched lazily from the RS through
    ``query`` (a statement -> its rows, or None when it failed) and cached for the session:
    the tables with ``SHOW TABLES`` on first use, a table's columns with ``DESC t`` the first
    time the table is named. A failed query counts as no names (completion fails soft: the
    keywords still complete) and is not repeated."""

    def __init__(self, query: Callable[[str], list[list[Value]] | None]) -> None:
        self._query = query
        self._tables: list[str] | None = None
        self._columns: dict[str, list[str]] = {}

    def _first_column(self, statement: str) -> list[str]:
        rows = self._query(statement) or []
        return [str(r[0]) for r in rows if r and r[0] is not None]

    def tables(self) -> list[str]:
        """The tables and views of ``SHOW TABLES`` (first column), fetched once."""
        if self._tables is None:
            self._tables = self._first_column("SHOW TABLES")
        return self._tables

    def columns(self, table: str) -> list[str]:
        """The columns of ``table`` (a name from :meth:`tables`), the ``Field`` column of
        ``DESC table``, fetched once per table."""
        key = table.lower()
        if key not in self._columns:
            self._columns[key] = self._first_column(f"DESC `{table.replace('`', '``')}`")
        return self._columns[key]


_WORD = re.compile(r"[A-Za-z0-9_$]+")


class SqlCompleter(Completer):
    """Completes the word before the cursor with the columns of the tables named in the
    input, then table names, then keywords (``keywords``, upper case; written in lower case
    when the word is typed in lower case). Nothing is offered for an empty word."""

    def __init__(self, keywords: Iterable[str], catalog: Catalog) -> None:
        self.keywords = sorted(set(keywords))
        self.catalog = catalog

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        """The completions of the word before the cursor (prompt_toolkit's interface)."""
        word = document.get_word_before_cursor(pattern=_WORD)
        if not word or not _WORD.fullmatch(word):
            return
        prefix = word.lower()
        tables = self.catalog.tables()
        by_name = {t.lower(): t for t in tables}
        named = [by_name[w.lower()] for w in _WORD.findall(document.text) if w.lower() in by_name]
        seen: set[str] = set()
        candidates: list[tuple[str, str]] = []
        for table in dict.fromkeys(named):
            candidates += [(c, f"column of {table}") for c in self.catalog.columns(table)]
        candidates += [(t, "table") for t in tables]
        lower = word == word.lower()
        candidates += [(k.lower() if lower else k, "keyword") for k in self.keywords]
        for text, meta in candidates:
            if text.lower().startswith(prefix) and text.lower() != prefix and text not in seen:
                seen.add(text)
                yield Completion(text, start_position=-len(word), display_meta=meta)


class _History(FileHistory):
    """prompt_toolkit's file history (a multi-line statement is one entry) that never fails
    the session over an unwritable file: history is a convenience."""

    def store_string(self, string: str) -> None:
        """Append ``string`` to the file; an ``OSError`` is ignored."""
        with contextlib.suppress(OSError):
            super().store_string(string)


def input_is_complete(text: str) -> bool:
    """Whether Enter runs ``text`` (else it starts a new line, as in the mysql client): blank
    input, a client command (``help ...``, ``exit``), or statements all ended by ``;`` /
    ``\\G`` (nothing unfinished after them)."""
    if not text.strip() or help_topic_of(text) is not None or is_exit_command(text):
        return True
    pieces, rest = split_input(text)
    return bool(pieces) and not rest


class Shell:
    """Runs statements against ``rs_addrs`` (``ip:port`` of every RS) and prints the answers
    in ``fmt`` (``table`` / ``json`` / ``csv``) on ``out``, errors on ``err`` (on ``out`` too
    with ``json``: one JSON document per statement); ``timeout_s`` bounds each statement
    (seconds); every statement is sent with ``credentials``."""

    def __init__(
        self,
        rs_addrs: list[str],
        fmt: str,
        timeout_s: float,
        out: TextIO,
        err: TextIO,
        credentials: Credentials = NO_CREDENTIALS,
    ) -> None:
        self.rs_addrs = rs_addrs
        self.credentials = credentials
        self.fmt = fmt
        self.timeout_s = timeout_s
        self.out = out
        self.err = err
        self.catalog = Catalog(self._query_rows)

    def _query_rows(self, statement: str) -> list[list[Value]] | None:
        # Completion must not hang the prompt for a minute: a short deadline, and any failure
        # (RS down, statement unknown to this RS) means "no names".
        try:
            resp = execute(self.rs_addrs, statement, min(self.timeout_s, 5.0), self.credentials)
        except RsUnreachableError:
            return None
        if resp.error.code or not resp.is_result_set:
            return None
        return result_rows(resp)

    def run_one(self, statement: str, vertical: bool = False) -> bool:
        """Send one statement and print the answer (vertically for a ``\\G`` one); a help
        request is answered here. False when it failed."""
        topic = help_topic_of(statement)
        if topic is not None:
            print(help_text(topic), file=self.out, flush=True)
            return True
        errors = self.out if self.fmt == "json" else self.err
        try:
            response = self._send(statement)
        except RsUnreachableError as e:
            text = e.to_sql_text()
            if self.fmt == "json":
                message = text.split(": ", 1)[1]
                text = error_json(2003, "HY000", "CR_CONN_HOST_ERROR", message)
            print(text, file=errors, flush=True)
            return False
        text = format_response(response, self.fmt, vertical)
        if response.error.code:
            print(text, file=errors, flush=True)
            return False
        print(text, file=self.out, flush=True)
        return True

    def _send(self, statement: str) -> obrpc_pb2.SqlResponse:
        """One statement; DRAIN SERVER with its own deadline and progress lines on ``err``
        while it waits (:mod:`sql.drain_watch`)."""
        drain = drain_target(statement)
        if drain is None:
            return execute(self.rs_addrs, statement, self.timeout_s, self.credentials)
        server, deadline_s = drain
        return run_with_progress(
            statement,
            server,
            lambda text: execute(
                self.rs_addrs, text, max(deadline_s, self.timeout_s), self.credentials
            ),
            lambda text: execute(self.rs_addrs, text, min(self.timeout_s, 5.0), self.credentials),
            self.err,
        )

    def run_script(self, text: str) -> int:
        """Run every statement of ``text`` in order, stopping at the first error (exit 1),
        like ``mysql -e`` and ``mysql < file``. A last statement without ``;`` runs too."""
        pieces, rest = split_input(text)
        if rest.strip():
            pieces.append(Piece(rest.strip()))
        for piece in pieces:
            if is_exit_command(piece.text):
                break
            if not self.run_one(piece.text, piece.vertical):
                return 1
        return 0

    def session(
        self, input: Input | None = None, output: Output | None = None, history: str | None = None
    ) -> PromptSession[str]:
        """The prompt_toolkit session of :meth:`interactive`: multi-line input where Enter
        runs the statement once :func:`input_is_complete` (Esc-Enter always runs it), the
        ``    -> `` continuation prompt, Tab completion (:class:`SqlCompleter`), and the
        history file ``history`` (default ``~/.obadmin_history``)."""
        bindings = KeyBindings()

        @bindings.add("enter")
        @bindings.add("c-j")
        def _enter(event: KeyPressEvent) -> None:
            buffer = event.current_buffer
            if input_is_complete(buffer.text):
                buffer.validate_and_handle()
            else:
                buffer.insert_text("\n")

        completer = SqlCompleter(keywords(), self.catalog)

        @bindings.add("tab")
        def _tab(event: KeyPressEvent) -> None:
            # Completed here rather than by prompt_toolkit's background task, so that what is
            # typed next (even piped) lands after the completed word, as in the mysql client.
            buffer = event.current_buffer
            if buffer.complete_state:
                buffer.complete_next()
                return
            found = list(
                completer.get_completions(buffer.document, CompleteEvent(completion_requested=True))
            )
            if len(found) == 1:
                buffer.apply_completion(found[0])
                return
            common = get_common_complete_suffix(buffer.document, found)
            if common:
                buffer.insert_text(common)
            elif found:
                buffer.start_completion()  # the menu of candidates

        path = os.path.expanduser(HISTORY_FILE) if history is None else history
        return PromptSession(
            PROMPT,
            multiline=True,
            prompt_continuation=lambda width, line, wrap: CONTINUATION_PROMPT,
            key_bindings=bindings,
            completer=completer,
            complete_while_typing=False,
            history=_History(path),
            input=input,
            output=output,
        )

    def interactive(
        self, input: Input | None = None, output: Output | None = None, history: str | None = None
    ) -> int:
        """The shell (see :meth:`session` for ``input``, ``output``, ``history``): errors are
        printed and the shell goes on; Ctrl-C clears the input being typed (and aborts the
        wait for an answer), Ctrl-D on an empty line or ``exit`` leaves with 0."""
        session = self.session(input, output, history)
        print("Type 'help' or '\\h' for help. End statements with ; or \\G.", file=self.out)
        while True:
            try:
                text = session.prompt()
            except KeyboardInterrupt:
                continue  # as the mysql client: Ctrl-C drops the statement being typed
            except EOFError:
                break
            if is_exit_command(text):
                break
            if help_topic_of(text) is not None:
                self.run_one(text)
                continue
            pieces, _ = split_input(text)
            for piece in pieces:
                if is_exit_command(piece.text):
                    print("Bye", file=self.out)
                    return 0
                try:
                    self.run_one(piece.text, piece.vertical)
                except KeyboardInterrupt:
                    print("Query aborted by Ctrl+C", file=self.err)
                print(file=self.out, flush=True)
        print("Bye", file=self.out)
        return 0
