"""The manual's reference pages, generated from the code at every `make docs` so that they
cannot drift: run by mkdocs-gen-files (mkdocs.yml), which adds the pages to the build without
writing them into docs/.

Each page imports the module that owns its facts and prints what the product itself uses:
obadmin's ``help`` table (sql/help.py), the parameters (rootservice/config.py), the tables and
views as ``DESC`` shows them after the migrations (rootservice/db/catalog.py on a fresh SQLite
database), the error table (obcommon/errors.py) and the metric families the collectors yield
(rootservice/metrics.py, observer_agent/metrics.py). tests/unit/test_docs_reference.py checks
that every one of them is on the built site.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import mkdocs_gen_files

GENERATED = "Generated from the code at build time by `docs/gen_ref.py`; do not edit."


def cell(text: object) -> str:
    """``text`` made safe for one Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: object) -> str:
    """``text`` as inline code in a table cell (empty stays empty)."""
    s = str(text)
    if not s:
        return ""
    return "`` " + s.replace("|", "\\|") + " ``" if "`" in s else f"`{cell(s)}`"


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    """A Markdown table."""
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def write(path: str, lines: list[str]) -> None:
    """Add the page ``path`` (under docs/) to the build."""
    with mkdocs_gen_files.open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# --- statements -------------------------------------------------------------------------


def statements_page() -> list[str]:
    """Every statement and obadmin command of sql/help.py, with the text ``help`` prints."""
    from sql.help import COMMANDS, STATEMENTS, help_text

    out = [
        "# Statements",
        "",
        GENERATED,
        "",
        "Every statement of the admin language and every command of `obadmin`, with the text",
        "obadmin's `help <statement>` prints (its source is `sql/help.py`; the grammar is",
        "`sql/grammar.lark`). The statements' rules are in [the admin language](../admin-language.md).",
        "",
        "## What `help` lists",
        "",
        "```text",
        help_text(""),
        "```",
        "",
        "## Statements",
        "",
    ]
    for t in STATEMENTS:
        out += [f"### {t.name}", "", t.summary, "", "```sql", t.syntax, "```", ""]
    out += ["## obadmin commands", ""]
    for t in COMMANDS:
        out += [f"### {t.name}", "", t.summary, "", "```text", t.syntax, "```", ""]
    return out


# --- parameters -------------------------------------------------------------------------


def _serve_flags() -> dict[str, str]:
    """``rootservice serve``'s flags by settings field name (``lease_time`` -> ``--lease-time``)."""
    import argparse

    from rootservice.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    return {
        a.dest: a.option_strings[0] for a in serve._actions if a.option_strings and a.dest != "help"
    }


def _bounds(field: Any) -> str:
    lo = hi = None
    for m in field.metadata:
        lo = getattr(m, "ge", lo)
        hi = getattr(m, "le", hi)
    if lo is None and hi is None:
        return ""
    return f"[{'' if lo is None else lo}, {'+inf' if hi is None else hi}]"


def parameters_page() -> list[str]:
    """The run-time parameters (ALTER SYSTEM SET) and the process settings (flags only)."""
    from rootservice.config import PARAMETERS, RsSettings, parameter_range

    fields = RsSettings.model_fields
    flags = _serve_flags()
    out = [
        "# Parameters",
        "",
        GENERATED,
        "",
        "Every setting of `rootservice serve`, from `rootservice/config.py`. Precedence, lowest",
        "first: the default, the `__all_sys_parameter` table (what `ALTER SYSTEM SET` wrote),",
        "the environment (`OB_RS_<NAME>`) and the command-line flag.",
        "",
        "## Run-time parameters",
        "",
        "Cluster-wide: `ALTER SYSTEM SET name = value` validates them, writes them to",
        "`__all_sys_parameter` (every root service loads them when it takes office) and applies",
        "them at once, without a restart; `SHOW PARAMETERS [LIKE 'p']` prints them.",
        "A duration is written `10s`, `100ms`, `1h`; a size `64M`, `4G` or bytes. The range",
        "in brackets is the one in force; `--allow-short-timings` (tests and demos) lowers",
        "the lower bound to the one in the last column.",
        "",
    ]
    rows = []
    for name, p in PARAMETERS.items():
        default = p.format(fields[name].default)
        rows.append(
            (
                f"`{name}`",
                p.kind,
                code(default),
                code(parameter_range(p, False)),
                "cluster",
                "no",
                code(flags.get(name, "")),
                cell(p.info),
                code(parameter_range(p, True).split(",")[0].lstrip("[{")),
            )
        )
    out += table(
        (
            "name",
            "type",
            "default",
            "range",
            "scope",
            "restart",
            "flag",
            "meaning",
            "short lower bound",
        ),
        rows,
    )
    out += [
        "",
        "## Process settings",
        "",
        "Per process: set by the command-line flag or the environment variable, read at",
        "start, so a change needs a restart of that root service. Durations are written as",
        "above and held in microseconds.",
        "",
    ]
    rows = []
    for name, f in fields.items():
        if name in PARAMETERS:
            continue
        default = f.default if f.default_factory is None else f.default_factory()  # type: ignore[call-arg]
        kind = getattr(f.annotation, "__name__", None) or str(f.annotation)
        kind = str(kind).replace("typing.", "").replace("pathlib.", "")
        if name.endswith(("_time", "_interval", "_timeout")) and isinstance(default, int):
            from obcommon.durations import format_duration

            kind, default = "duration", format_duration(default)
        rows.append(
            (
                f"`{name}`",
                cell(kind),
                code(default if default not in ("", None, []) else ""),
                code(_bounds(f)),
                "process",
                "yes",
                code(flags.get(name, "")),
                f"`OB_RS_{name.upper()}`",
            )
        )
    out += table(
        ("name", "type", "default", "range", "scope", "restart", "flag", "environment"), rows
    )
    return out


# --- tables and views -------------------------------------------------------------------


def _catalog() -> tuple[list[Any], list[Any]]:
    """The readable tables and views after every migration (on a throw-away SQLite file),
    and the internal tables (not readable by SELECT) from the table definitions."""

    from rootservice.db import engine as dbengine
    from rootservice.db.catalog import Catalog, _table_info
    from rootservice.db.tables import SYSTEM_TABLES, metadata

    with tempfile.TemporaryDirectory() as tmp:
        engine = dbengine.make_engine(f"sqlite:///{Path(tmp) / 'ref.db'}")
        try:
            dbengine.upgrade(engine)
            with engine.connect() as conn:
                readable = Catalog().tables(conn)
        finally:
            engine.dispose()
    internal = [
        _table_info(t, t.name, {c.name: c.name for c in t.columns})
        for t in metadata.sorted_tables
        if t.name not in SYSTEM_TABLES
    ]
    return readable, internal


def _columns(info: Any) -> list[str]:
    return table(
        ("column", "type", "null", "key", "default"),
        (
            (
                f"`{c.name}`",
                c.mysql_type,
                "YES" if c.nullable else "NO",
                c.key,
                code(c.default or ""),
            )
            for c in info.columns
        ),
    )


def tables_page() -> list[str]:
    """Every system table and view with its columns, as DESC shows them."""
    readable, internal = _catalog()
    out = [
        "# Tables and views",
        "",
        GENERATED,
        "",
        "The system tables and the `DBA_OB_*` views, with their columns as `DESC` shows them",
        "(MySQL column types, the same on SQLite and PostgreSQL), read from a database the",
        "migrations (`migrations/versions/`) just created. `SELECT` reads the tables and",
        "views of the first two sections; the internal tables are the RS's own.",
        "",
    ]
    for title, kind in (("Tables", "BASE TABLE"), ("Views", "VIEW")):
        out += [f"## {title}", ""]
        for info in readable:
            if info.kind == kind:
                out += [f"### {info.name}", "", *_columns(info), ""]
    out += ["## Internal tables", "", "Not readable with `SELECT` (credentials, membership).", ""]
    for info in internal:
        out += [f"### {info.name}", "", *_columns(info), ""]
    return out


# --- error codes ------------------------------------------------------------------------


def errors_page() -> list[str]:
    """Every error of obcommon/errors.py."""
    from obcommon.errors import ERRORS

    out = [
        "# Error codes",
        "",
        GENERATED,
        "",
        "Every error the product returns, from `obcommon/errors.py`: OceanBase's code, name,",
        "SQLSTATE and message (those of OceanBase's `ob_errno.def`; `%s` is filled with the",
        "details), the number a MySQL client sees where OceanBase sends another one, and the",
        "gRPC status of a unary call. `obadmin` prints `ERROR <code> (<sqlstate>): <name>:",
        "<message>`.",
        "",
    ]
    rows = []
    for e in sorted(ERRORS.values(), key=lambda e: (abs(e.code), e.name)):
        rows.append(
            (
                abs(e.code),
                f"`{e.name}`",
                e.sqlstate,
                cell(e.template),
                "" if e.mysql_errno is None else e.mysql_errno,
                e.grpc_code.name,
            )
        )
    out += table(("code", "name", "SQLSTATE", "message", "MySQL errno", "gRPC status"), rows)
    return out


# --- metrics ----------------------------------------------------------------------------


def _families(collect: Iterator[Any]) -> dict[str, tuple[str, list[str], str]]:
    out: dict[str, tuple[str, list[str], str]] = {}
    for fam in collect:
        labels = set(getattr(fam, "_labelnames", ()) or ())
        for s in fam.samples:
            labels.update(k for k in s.labels if k not in ("le", "quantile"))
        name = fam.name + ("_total" if fam.type == "counter" else "")
        out[name] = (fam.type, sorted(labels), fam.documentation)
    return out


def rs_metric_families() -> dict[str, tuple[str, list[str], str]]:
    """The RS's families: the collector run on readings that fill every labelled family,
    every counter family of the module's tables, and the process collectors."""
    from prometheus_client import CollectorRegistry

    from rootservice import metrics as m

    class _Source:
        def readings(self) -> m.Readings:
            job = m.JobReading(1, "DELETE_SERVER", "10.0.0.1:2882", 50, 1, 2)
            return m.Readings(
                heartbeats_received=1,
                heartbeats_refused={"OB_SERVER_NOT_IN_WHITE_LIST": 1},
                servers_by_status={"ACTIVE": 1},
                servers_by_heartbeat={"alive": 1},
                persist_queue_depth=0,
                writes_rejected=0,
                epoch=1,
                leader=True,
                state="FULL_SERVICE",
                states=["FULL_SERVICE"],
                lease_time_us=10_000_000,
                jobs=[job],
                planner="local",
                planner_ready=True,
            )

    metrics = m.Metrics()
    for name, entry in m.COUNTERS.items():
        if entry is not None:
            metrics.inc(name)
    for key, (_family, label, _help) in m.HISTOGRAMS.items():
        metrics.window(key + ("x" if label else "")).record(1)
    metrics.window("task_run_us.x").record(1)
    for name in default_named_counters():
        metrics.inc(name)
    out = _families(m.RsCollector(metrics, _Source()).collect())
    registry = CollectorRegistry()
    m.register_process_collectors(registry)
    out.update(_families(registry.collect()))
    return out


def default_named_counters() -> list[str]:
    """The plain counters the RS increments by a literal name that no table of
    rootservice/metrics.py renames (exported as ``ob_rs_<name>``), found in the source."""
    import re

    from rootservice import metrics as m

    root = Path(m.__file__).parent
    names: set[str] = set()
    for path in root.rglob("*.py"):
        for match in re.finditer(r"\.inc\(\s*\"([a-z0-9_]+)\"", path.read_text(encoding="utf-8")):
            names.add(match.group(1))
    return sorted(
        n for n in names if n not in m.COUNTERS and not any(p.fullmatch(n) for p, *_ in m.PATTERNS)
    )


def agent_metric_families() -> dict[str, tuple[str, list[str], str]]:
    """The agent's families: its registry (histograms, process collectors) and its
    collector run on readings that fill every labelled family."""
    from observer_agent import metrics as am

    class _Source:
        def readings(self) -> am.AgentReadings:
            return am.AgentReadings(
                now_us=1,
                lease_expire_us=2,
                registered=True,
                lease_accepted=1,
                lease_refused={"OB_RS_NOT_MASTER": 1},
                replicas={"LEADER": 1},
                log_lags=[(1002, 1001, 0)],
                copied_bytes=0,
                copies_running=0,
                disk_healthy=True,
                resources={k: 1.0 for k in am.RESOURCES},
            )

    agent = am.AgentMetrics()
    out = _families(agent.registry.collect())
    out.update(_families(am.AgentCollector(_Source()).collect()))
    return out


def metrics_page() -> list[str]:
    """Every metric family of the RS and of the agent."""
    out = [
        "# Metrics",
        "",
        GENERATED,
        "",
        "The families of `/metrics` on the root service (port 8080) and on every agent",
        "(port 8088), in the Prometheus text format, from the collectors themselves",
        "(`rootservice/metrics.py`, `observer_agent/metrics.py`). A histogram also has its",
        "`_bucket` (label `le`), `_sum` and `_count` series. No series is per server on the RS.",
        "",
    ]
    for title, fams in (
        ("Root service", rs_metric_families()),
        ("Observer agent", agent_metric_families()),
    ):
        out += [f"## {title}", ""]
        out += table(
            ("name", "type", "labels", "help"),
            (
                (f"`{n}`", t, ", ".join(f"`{x}`" for x in labels), cell(h))
                for n, (t, labels, h) in sorted(fams.items())
            ),
        )
        out.append("")
    return out


def index_page() -> list[str]:
    """The reference section's front page."""
    return [
        "# Reference",
        "",
        "These pages are generated from the code at every build of the manual, so they say",
        "what the code does:",
        "",
        "- [Statements](statements.md): the admin language, with obadmin's `help` text.",
        "- [Parameters](parameters.md): every setting, its type, default, range and scope.",
        "- [Tables and views](tables.md): every system table and view with its columns.",
        "- [Error codes](errors.md): every error with its OceanBase name and message.",
        "- [Metrics](metrics.md): every metric family with its type, labels and help.",
    ]


PAGES = {
    "reference/index.md": index_page,
    "reference/statements.md": statements_page,
    "reference/parameters.md": parameters_page,
    "reference/tables.md": tables_page,
    "reference/errors.md": errors_page,
    "reference/metrics.md": metrics_page,
}

# mkdocs-gen-files runs this file as a script at every build.
for _path, _make in PAGES.items():
    write(_path, _make())
