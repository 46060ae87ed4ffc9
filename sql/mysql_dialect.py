"""The MySQL text of parsed reads: sqlglot's MySQL dialect, with its string literals escaped
by ``str.translate`` instead of a Python loop over their characters.

sqlglot's ``Generator.escape_str`` escapes a MySQL string literal with a generator
expression over every character. For a 4 MiB literal that took 0.34-0.37 s of CPU (the 2-core
machine of docs/benchmarks.md), twice per read with such a literal (its canonical text and
its result header), all of it pure Python holding the interpreter lock, which the RS's
lease loop and election thread need too. ``str.translate`` with the same table gives the
same text in C. Everything else is sqlglot's MySQL dialect unchanged.
"""

from __future__ import annotations

from sqlglot.dialects.mysql import MySQL
from sqlglot.generators.mysql import MySQLGenerator


class ObMySQL(MySQL):
    """sqlglot's ``MySQL`` dialect whose generator escapes string literals with
    ``str.translate``; use it wherever the product writes a tree out as MySQL
    (``tree.sql(ObMySQL)``). It reads as ``MySQL`` does; only the speed of writing differs.
    Raises what ``MySQL`` raises."""

    class Generator(MySQLGenerator):
        """``MySQL.Generator`` (``MySQLGenerator``) with :meth:`escape_str` done in C for text strings."""

        def escape_str(
            self,
            text: str,
            escape_backslash: bool = True,
            delimiter: str | None = None,
            escaped_delimiter: str | None = None,
            is_byte_string: bool = False,
            is_bytes: bool = False,
        ) -> str:
            """``MySQL.Generator.escape_str(text, ...)``: the same text, escaped by one
            ``str.translate`` for a text string (byte strings go to sqlglot's own)."""
            if is_byte_string or is_bytes or not self.dialect.STRINGS_SUPPORT_ESCAPED_SEQUENCES:
                return super().escape_str(
                    text, escape_backslash, delimiter, escaped_delimiter, is_byte_string, is_bytes
                )
            text = text.translate(_ESCAPES if escape_backslash else _ESCAPES_BUT_BACKSLASH)
            # The rest as sqlglot's escape_str does it (already C-speed string methods).
            delimiter = delimiter or self.dialect.QUOTE_END
            escaped_delimiter = escaped_delimiter or self._escaped_quote_end
            return self._replace_line_breaks(text).replace(delimiter, escaped_delimiter)


# sqlglot maps one character at a time (``ESCAPED_SEQUENCES.get(ch, ch)``), so only its
# one-character keys can ever apply.
_ESCAPES = {ord(k): v for k, v in ObMySQL.ESCAPED_SEQUENCES.items() if len(k) == 1}
_ESCAPES_BUT_BACKSLASH = {k: v for k, v in _ESCAPES.items() if k != ord("\\")}
