"""``obadmin``'s input side: splitting input at ``;`` (outside quotes and comments), the
interactive shell with its prompts and history, and running a script that stops at the
first error like ``mysql < file``.
"""

from __future__ import annotations

import contextlib
import os
from typing import TextIO

from sql.client import NO_CREDENTIALS, Credentials, RsUnreachableError, execute
from sql.formatting import format_response

PROMPT = "obadmin> "


CONTINUATION_PROMPT = "    -> "


HISTORY_FILE = "~/.obadmin_history"


HISTORY_LENGTH = 1000


EXIT_COMMANDS = frozenset({"exit", "quit", "\\q"})
"""The mysql client's commands for leaving the shell (``exit``, ``quit``, ``\\q``)."""


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


class Shell:
    """Runs statements against ``rs_addrs`` (``ip:port`` of every RS) and prints the answers
    in ``fmt`` (``table`` / ``json`` / ``csv``) on ``out``, errors on ``err``; ``timeout_s``
    bounds each statement (seconds); every statement is sent with ``credentials``."""

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

    def run_one(self, statement: str) -> bool:
        """Send one statement and print the answer; False when it failed."""
        try:
            response = execute(self.rs_addrs, statement, self.timeout_s, self.credentials)
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
