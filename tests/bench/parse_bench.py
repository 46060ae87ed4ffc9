"""Statement-text benchmark (``make bench-parse``): how long the SQL parser and the
admission token count take on the large inputs that the unit tests only check for their
result (tests/unit/sql/test_parser.py, tests/unit/rootservice/api/test_admission.py).

Cases (each the best and the median of ``--repeats`` runs, in this process, wall-clock
milliseconds by ``time.perf_counter``):

- ``parse_1mb_string``: ``ALTER SYSTEM ADD SERVER '<1 MiB of digits>' ZONE 'z1'`` parsed;
- ``parse_1mb_unterminated``: an unterminated 1 MiB string of backslashes and doubled quotes
  (where a naive string regex backtracks exponentially) refused with ER_PARSE_ERROR;
- ``tokens_4mb_refused``: :func:`rootservice.api.admission.check_tokens` of 2,000,000 tokens
  (4 MiB) with a limit of 100,000, refused after counting to the limit;
- ``tokens_limit_10k``: the same text with a limit of 10,000, to show that the
  time follows the limit, not the text's size;
- ``read_4mb_literal``: :func:`sql.reads.parse_read` of a SELECT comparing with a 4 MiB
  string literal (its canonical text written with :class:`sql.mysql_dialect.ObMySQL`);
- ``read_4mb_literal_stock_mysql``: the same parsed tree written out by sqlglot's own MySQL
  dialect, the reference (what each such read cost before ``ObMySQL``).

Prints a table and writes ``.bench/parse.json`` (``--out``). Nothing is asserted on time;
the exit status is 1 only when a case gives the wrong answer.

Usage::

    .venv/bin/python -m tests.bench.parse_bench              # 20 repeats
    .venv/bin/python -m tests.bench.parse_bench --quick      # 2 repeats (its smoke test)
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tabulate import tabulate

from obcommon.errors import ObError
from rootservice.api.admission import check_tokens
from sql import ast, reads
from sql.mysql_dialect import ObMySQL
from sql.parser import parse

ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024
TOKEN_TEXT = "x," * 2_000_000


def _parse_string() -> bool:
    address = "1" * MB
    stmt = parse(f"ALTER SYSTEM ADD SERVER '{address}' ZONE 'z1'")
    return stmt == ast.ServerOp(op="ADD", servers=(address,), zone="z1")


def _parse_unterminated() -> bool:
    try:
        parse("ALTER SYSTEM ADD SERVER '" + "a\\'b''" * (MB // 6))
    except ObError as e:
        return e.name == "ER_PARSE_ERROR"
    return False


def _tokens(limit: int) -> Callable[[], bool]:
    def run() -> bool:
        try:
            check_tokens(TOKEN_TEXT, limit)
        except ObError as e:
            return e.name == "OB_NOT_SUPPORTED"
        return False

    return run


LITERAL = "x" * (4 * MB - 100)
LITERAL_READ = f"SELECT svr_ip FROM __all_server WHERE svr_ip = '{LITERAL}'"


def _read_literal() -> bool:
    q = reads.parse_read(LITERAL_READ)
    return isinstance(q, ast.Query) and len(q.text) > len(LITERAL)


@functools.cache
def _literal_tree() -> Any:
    q = reads.parse_read(LITERAL_READ)
    assert isinstance(q, ast.Query)
    return q.tree


def _stock_mysql() -> bool:
    # Also writes it with ObMySQL, to check the two agree (a few ms of the figure).
    tree = _literal_tree()
    return tree.sql("mysql") == tree.sql(ObMySQL)


CASES: dict[str, Callable[[], bool]] = {
    "parse_1mb_string": _parse_string,
    "parse_1mb_unterminated": _parse_unterminated,
    "tokens_4mb_refused": _tokens(100_000),
    "tokens_limit_10k": _tokens(10_000),
    "read_4mb_literal": _read_literal,
    "read_4mb_literal_stock_mysql": _stock_mysql,
}


def run_case(fn: Callable[[], bool], repeats: int) -> dict[str, Any]:
    """``repeats`` timed runs of ``fn``: ``{"runs", "correct", "best_ms", "median_ms"}``
    (``correct``: how many runs gave the expected answer)."""
    took: list[float] = []
    correct = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        ok = fn()
        took.append((time.perf_counter() - t0) * 1000)
        correct += ok
    return {
        "runs": repeats,
        "correct": correct,
        "best_ms": min(took),
        "median_ms": statistics.median(took),
    }


def main(argv: list[str] | None = None) -> int:
    """Run every case; print a table and write ``--out``. Returns 1 when a run was wrong."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="2 repeats")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "parse.json")
    args = p.parse_args(argv)
    repeats = 2 if args.quick else max(1, args.repeats)
    _literal_tree()  # parsed before the timed runs
    results = {name: run_case(fn, repeats) for name, fn in CASES.items()}
    rows = [
        [name, r["runs"], r["correct"], f"{r['best_ms']:.1f}", f"{r['median_ms']:.1f}"]
        for name, r in results.items()
    ]
    print(tabulate(rows, headers=["case", "runs", "correct", "best ms", "median ms"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"repeats": repeats, "results": results}, indent=1))
    return 0 if all(r["correct"] == r["runs"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
