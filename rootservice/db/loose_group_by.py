"""MySQL's loose GROUP BY on PostgreSQL: a SELECT that groups by some columns and lists others
without an aggregate.

MySQL without ``ONLY_FULL_GROUP_BY`` (OceanBase's default SQL mode has it off) answers such a
column with its value in one row of the group; PostgreSQL refuses the statement ("must appear
in the GROUP BY clause or be used in an aggregate function"). OceanBase's tools send such
queries (ob-operator's ``ListParametersGroupByName``: ``select name, value, ... from
GV$OB_PARAMETERS group by name``). :func:`any_value_of_ungrouped` rewrites each such column
as ``(array_agg(col))[1]``: the column's value in the group's first row. Every aggregate of
one GROUP BY reads the group's rows in the same order, so all the rewritten columns of a
result row come from the same source row, as MySQL's do (``MIN`` per column would mix rows).
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp


def _is_grouped(e: exp.Expr, keys: set[str], key_columns: set[str]) -> bool:
    """Whether ``e`` is valid on PostgreSQL as it is: an aggregate, a grouping key, or made
    of grouping keys' columns and constants only."""
    if e.find(exp.AggFunc) is not None or e.find(exp.Subquery, exp.Select) is not None:
        return True
    if e.sql("postgres") in keys:
        return True
    return all(c.sql("postgres") in key_columns for c in e.find_all(exp.Column))


def any_value_of_ungrouped(select: exp.Select) -> bool:
    """Rewrite, in place, every projection of ``select`` that is neither an aggregate nor
    made of its GROUP BY keys as ``(array_agg(expr))[1]``, keeping its alias (and header).
    Returns whether anything was rewritten (nothing without a GROUP BY). ``select`` must be
    qualified (columns carry their table) so that keys and columns compare as written."""
    group = select.args.get("group")
    if group is None or not group.expressions:
        return False
    keys = {k.sql("postgres") for k in group.expressions}
    key_columns = {c.sql("postgres") for k in group.expressions for c in k.find_all(exp.Column)}
    changed = False
    for p in list(select.expressions):
        inner = p.this if isinstance(p, exp.Alias) else p
        if isinstance(inner, exp.Star) or _is_grouped(inner, keys, key_columns):
            continue
        first = sqlglot.parse_one(f"(array_agg({inner.sql('postgres')}))[1]", read="postgres")
        first.meta.update(inner.meta)
        inner.replace(first)
        changed = True
    return changed
