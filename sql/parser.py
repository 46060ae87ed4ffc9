"""Parser of the admin SQL dialect: text in, :mod:`sql.ast` statement out.

The grammar (``sql/grammar.lark``, docs/design/statements.md) is compiled once, at import, into a
Lark LALR(1) parser whose transformer builds the AST while parsing, so no tree is walked
recursively and deeply nested input cannot exhaust the Python stack.

Every refusal is an :class:`~obcommon.errors.ObError`, worded like MySQL's:

* ``ER_PARSE_ERROR`` (1064) ``... near '<the text from the offending token on>' at line N``
* ``ER_EMPTY_QUERY`` (1065) for a statement of only blanks, comments and ``;``
* ``ER_NET_PACKET_TOO_LARGE`` (1153) for a statement longer than ``max_bytes`` UTF-8 bytes

The read statements (SELECT, WITH, SHOW TABLES / DATABASES / COLUMNS, DESC) are handed to
:func:`sql.reads.parse_read` (sqlglot), which refuses with the same 1064 wording plus its own
refusals of anything that is not a read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

from lark import Lark, Token
from lark.exceptions import (
    LarkError,
    UnexpectedCharacters,
    UnexpectedInput,
    UnexpectedToken,
)

from obcommon.errors import ObError
from sql import ast
from sql.ast_builder import BadToken, ToAst
from sql.reads import is_read, parse_read, show_parameters_where

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
"""MySQL's default ``max_allowed_packet`` (4 MiB)."""


NEAR_TEXT_CHARS = 80
"""MySQL prints the rest of the statement with ``%-.80s`` in ER_PARSE_ERROR."""


_GRAMMAR_PATH = Path(__file__).with_name("grammar.lark")


class _WholeWordKeywords:
    """A pass-through postlexer whose only job is ``always_accept``: it puts IDENTIFIER in the
    contextual lexer of every parser state. Lark then reads a keyword only as a whole word (an
    IDENTIFIER spelling it), never as the prefix of a longer word, so ``DROP TENANTfoo`` is a
    syntax error rather than ``DROP TENANT foo``; where the grammar accepts no keyword of that
    spelling, the word is still an identifier (a column named ``zone``)."""

    always_accept = ("IDENTIFIER",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        """Hand the tokens on unchanged."""
        return stream


_PARSER = Lark(
    _GRAMMAR_PATH.read_text(encoding="utf-8"),
    parser="lalr",
    lexer="contextual",
    postlex=_WholeWordKeywords(),
    transformer=ToAst(),
)


# A lexer-only twin with the same terminals, to recognise empty statements without parsing.
_LEXER = Lark(_GRAMMAR_PATH.read_text(encoding="utf-8"), parser=None, lexer="basic")


def _too_large(text: str, max_bytes: int) -> bool:
    # Every character is 1..4 UTF-8 bytes: skip encoding when the length alone decides.
    if len(text) > max_bytes:
        return True
    if len(text) * 4 <= max_bytes:
        return False
    # surrogatepass: a lone surrogate must be counted, not crash the check.
    return len(text.encode("utf-8", "surrogatepass")) > max_bytes


def _is_blank(text: str) -> bool:
    """True when ``text`` holds only blanks, comments and semicolons."""
    try:
        return all(token.type == "SEMICOLON" for token in _LEXER.lex(text))
    except UnexpectedInput:
        return False  # something that is not even a token: let the parser report it


def _syntax_error(text: str, pos: int, line: int) -> ObError:
    near = text[pos : pos + NEAR_TEXT_CHARS]
    return ObError(
        "ER_PARSE_ERROR",
        "check the manual that corresponds to your OceanBase version for the right syntax "
        f"to use near '{near}' at line {line}",
    )


def _error_at_token(text: str, token: Token) -> ObError:
    if token.type == "$END":
        # Lark's end marker borrows the last token's position; MySQL says near ''.
        return _syntax_error(text, len(text), token.end_line or token.line or 1)
    pos = token.start_pos or 0
    line = token.line or 1
    if token.type == "SEMICOLON" and _is_blank(text[pos:]):
        # The terminating `;` is not part of the statement (the mysql client strips it), so an
        # incomplete statement reads near '' as in MySQL.
        return _syntax_error(text, len(text), line)
    return _syntax_error(text, pos, line)


def parse(text: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ast.Statement:
    """Parse one admin statement (docs/design/statements.md) into its :mod:`sql.ast` node.

    ``text`` holds one statement with an optional trailing ``;``; keywords are
    case-insensitive, strings take single or double quotes (MySQL escapes), and ``--``, ``#``
    and ``/* */`` comments may appear anywhere between tokens. Values are not validated
    here: that is the executors' job.

    Raises :class:`~obcommon.errors.ObError` and nothing else:
    ``ER_NET_PACKET_TOO_LARGE`` when ``text`` is over ``max_bytes`` UTF-8 bytes (checked first),
    ``ER_EMPTY_QUERY`` when it holds no statement, ``ER_PARSE_ERROR`` (MySQL's 1064 text,
    ``near '<rest of the text>' at line N``) for a syntax error, several statements, or a
    number that does not fit an int64, and for a read statement what
    :func:`sql.reads.parse_read` raises.
    """
    if _too_large(text, max_bytes):
        raise ObError("ER_NET_PACKET_TOO_LARGE")
    if _is_blank(text):
        raise ObError("ER_EMPTY_QUERY")
    where = show_parameters_where(text)
    if where is not None:
        return where
    if is_read(text):
        # SELECT / SHOW TABLES / DESC ...: MySQL's full read syntax, through sqlglot.
        return parse_read(text)
    try:
        # The transformer runs inside the parser, so the result is already the AST node.
        statement = cast(ast.Statement, _PARSER.parse(text))
    except UnexpectedToken as e:
        raise _error_at_token(text, e.token) from None
    except UnexpectedCharacters as e:
        raise _syntax_error(text, e.pos_in_stream or 0, e.line or 1) from None
    except BadToken as e:
        raise _error_at_token(text, e.token) from None
    except LarkError:
        # Any other Lark failure (e.g. UnexpectedEOF) is still the user's syntax error.
        raise _syntax_error(text, len(text), text.count("\n") + 1) from None
    return statement
