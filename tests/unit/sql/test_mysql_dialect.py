"""sql.mysql_dialect: ``ObMySQL`` writes every tree out exactly as sqlglot's MySQL dialect
does (only its string escaping runs in C), and reads keep their canonical text."""

from __future__ import annotations

import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from sql import reads
from sql.ast import Query
from sql.mysql_dialect import ObMySQL

# Every character sqlglot's MySQL escaping maps, the quote and the line breaks, among others.
SPECIAL = "\\'\"\x00\x08\n\r\t\x1a%_"
texts = st.text(alphabet=st.sampled_from(SPECIAL) | st.characters(codec="utf-8"), max_size=60)


@settings(max_examples=400)
@given(texts)
def test_a_string_literal_is_written_as_sqlglots_mysql_writes_it(text: str) -> None:
    tree = exp.select(exp.Literal.string(text)).from_("__all_server")
    assert tree.sql(ObMySQL) == tree.sql("mysql")


@settings(max_examples=200)
@given(texts)
def test_the_escapes_without_backslash_are_sqlglots_too(text: str) -> None:
    mine, theirs = ObMySQL().generator(), sqlglot.Dialect.get_or_raise("mysql").generator()
    assert mine.escape_str(text, escape_backslash=False) == theirs.escape_str(
        text, escape_backslash=False
    )
    assert mine.escape_str(text, delimiter='"', escaped_delimiter='""') == theirs.escape_str(
        text, delimiter='"', escaped_delimiter='""'
    )


def test_byte_strings_and_whole_reads_are_unchanged() -> None:
    for text in (
        "SELECT x'4142', b'0101', 'a\\nb', \"dq\" FROM __all_server",
        "SELECT svr_ip FROM __all_server WHERE svr_ip LIKE 'a\\_%' ESCAPE '\\\\'",
        "SELECT 'it''s', '\\0\\Z\\t' AS odd FROM oceanbase.DBA_OB_SERVERS ORDER BY 1",
    ):
        tree = sqlglot.parse_one(text, read="mysql")
        assert tree.sql(ObMySQL) == tree.sql("mysql"), text


def test_a_read_with_a_long_literal_keeps_its_canonical_text() -> None:
    literal = "x\\'\n" * 50_000
    text = f"SELECT svr_ip FROM __all_server WHERE svr_ip = '{literal}'"
    q = reads.parse_read(text)
    assert isinstance(q, Query)
    assert q.text == q.tree.sql("mysql")
    assert len(q.text) > len(literal)
