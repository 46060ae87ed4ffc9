"""Statement dispatch for the admin language (docs/design/statements.md).

:func:`execute_sql` parses a statement (``sql.parser``), checks that the caller has the
privilege it needs (:mod:`rootservice.auth.privileges`), passes the term's gate,
runs the executor registered for its AST class (:data:`rootservice.api.statements.EXECUTORS`),
turns the outcome into an ``SqlResponse`` and audits it (:mod:`rootservice.auth.audit`);
every refusal is an ``ObError`` and is returned in-band with its OceanBase (or MySQL) code.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from obcommon.errors import ObError, RemoteObError, error_to_proto
from obcommon.proto import obrpc_pb2
from rootservice.api.admission import check_tokens
from rootservice.api.statements import EXECUTORS, Result
from rootservice.app import RootService
from rootservice.auth.audit import log as audit_log
from rootservice.auth.audit import redact
from rootservice.auth.principal import Principal
from sql import ast
from sql.parser import parse
from sql.reads import is_read

log = logging.getLogger(__name__)


@dataclass
class ForwardedResult(Result):
    """A :class:`Result` the leader returned for a forwarded statement; ``leader`` is its
    ``ip:port``."""

    leader: str = ""


class LeaderRefusal(RemoteObError):
    """The leader's refusal of a forwarded statement, raised on the standby as its own
    answer (code, name, SQLSTATE and message as the leader sent them)."""


class Forwarder(Protocol):
    """Runs a statement on the leader for a standby (as Doris FE followers
    forward to the master); :class:`rootservice.api.forwarding.GrpcForwarder` is the one
    implementation."""

    def forward(self, leader: str, text: str, principal: Principal) -> ForwardedResult:
        """Run ``text`` on the RS at ``leader`` (``ip:port``) as ``principal`` and return its
        result. The leader's refusal is raised as :class:`LeaderRefusal`; a leader that
        cannot be reached raises ``ObError("OB_RS_NOT_MASTER")`` (nothing ran there), one that does
        not answer in time once reached ``ObError("OB_TIMEOUT")``."""
        ...


# What each statement needs of the term, the one gate (rootservice.ha.term.Term.check),
# asked once per statement here and nowhere below: the leader with its whitelist in service
# (every statement not listed), the leader only (BOOTSTRAP and SET run before there is a
# whitelist; the user statements need no whitelist), or nothing (SELECT and SHOW only read
# the database: standbys answer them).
LEADER_ONLY = frozenset(
    {
        ast.Bootstrap,
        ast.SetParameters,
        ast.CreateUser,
        ast.DropUser,
        ast.AlterUser,
        ast.Grant,
        ast.Revoke,
        # A revocation must work whatever state the servers are in.
        ast.RevokeCertificate,
    }
)
_READ_KINDS = (
    ast.Query,
    ast.ShowTables,
    ast.ShowDatabases,
    ast.Describe,
    ast.ShowParameters,
    ast.ShowGrants,
)
UNGATED = frozenset(_READ_KINDS)

READS = frozenset({*_READ_KINDS, ast.ExplainDeleteServer})
"""Statements not audited (unless refused for want of a login or a privilege): the reads,
and EXPLAIN ALTER SYSTEM DELETE SERVER, which changes nothing (not even the audit table) but,
reading the whitelist, is gated as DELETE SERVER is: the leader in service, or forwarded."""

UPGRADE_STAGES = (ast.BeginUpgrade, ast.BeginRollingUpgrade, ast.EndRollingUpgrade, ast.EndUpgrade)
"""The upgrade statements, whose events name the statement's user."""

ACCESS_REFUSALS = frozenset({"ER_ACCESS_DENIED_ERROR", "ER_SPECIFIC_ACCESS_DENIED_ERROR"})
"""Outcomes audited whatever the statement."""

_READ_WORD = re.compile(r"\s*(?:SELECT|SHOW)\b", re.IGNORECASE)


def execute(
    rs: RootService,
    statement: ast.Statement,
    principal: Principal,
    *,
    forward: Callable[[], Result | None] | None = None,
) -> Result:
    """Check ``principal``'s privilege (:meth:`rootservice.auth.users.Users.check`), pass the
    term's gate (see :data:`LEADER_ONLY`, :data:`UNGATED`), then run one parsed statement.

    When the gate answers OB_RS_NOT_MASTER and ``forward`` is given, its result (the
    leader's answer) is returned instead, unless it returns None (no leader known). Only a
    refusal by the gate is forwarded: nothing has run here then, so the leader runs the
    statement at most once. Raises ``ObError`` (ER_SPECIFIC_ACCESS_DENIED_ERROR from the
    check, OB_RS_NOT_MASTER from the gate, or what ``forward`` raises)."""
    rs.users.check(principal, statement)
    if isinstance(statement, ast.ShowGrants) and statement.user is None:
        statement = ast.ShowGrants(user=principal.user)
    elif isinstance(statement, ast.RevokeCertificate):
        statement = dataclasses.replace(statement, revoked_by=principal.user)
    elif isinstance(statement, UPGRADE_STAGES):
        # The event history names who ran each stage of an upgrade.
        statement = dataclasses.replace(statement, user=principal.user)
    kind = type(statement)
    if kind not in UNGATED:
        try:
            rs.term.check(need_service=kind not in LEADER_ONLY)
        except ObError as e:
            answer = forward() if forward is not None and e.name == "OB_RS_NOT_MASTER" else None
            if answer is None:
                raise
            return answer
    return EXECUTORS[kind](rs, statement)


def audited(statement: ast.Statement | None, text: str, outcome: str) -> bool:
    """Whether a statement gets an audit record: every one but the reads
    (:data:`READS`; a statement that did not parse counts as a read when it starts with
    SELECT or SHOW), and any refused for want of a login or a privilege."""
    if outcome in ACCESS_REFUSALS:
        return True
    if statement is None:
        return not (_READ_WORD.match(text) or is_read(text))
    return type(statement) not in READS


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def statement_kind(statement: ast.Statement | None) -> str:
    """The ``kind`` label of ``ob_rs_statements_total``: the statement class in
    upper snake case, ``ADD_SERVER`` / ``STOP_ZONE`` for the server and zone operations,
    ``SELECT`` for a query, ``UNPARSED`` for text that did not parse. A small fixed set, as
    a Prometheus label must be."""
    if statement is None:
        return "UNPARSED"
    if isinstance(statement, ast.ServerOp):
        return f"{statement.op}_SERVER"
    if isinstance(statement, ast.ZoneOp):
        return f"{statement.op}_ZONE"
    if isinstance(statement, ast.Query):
        return "SELECT"
    return _CAMEL.sub("_", type(statement).__name__).upper()


def _cell(value: Any) -> obrpc_pb2.Cell:
    if value is None:
        return obrpc_pb2.Cell(is_null=True)
    if isinstance(value, bool):
        return obrpc_pb2.Cell(int_value=int(value))
    if isinstance(value, int):
        return obrpc_pb2.Cell(int_value=value)
    if isinstance(value, float):
        return obrpc_pb2.Cell(double_value=value)
    return obrpc_pb2.Cell(string_value=str(value))


def to_response(result: Result) -> obrpc_pb2.SqlResponse:
    """``Result`` -> ``SqlResponse`` (values typed as int / double / string / NULL)."""
    resp = obrpc_pb2.SqlResponse(
        columns=result.columns,
        affected_rows=result.affected_rows,
        info=result.info,
        is_result_set=result.is_result_set,
    )
    for row in result.rows:
        resp.rows.append(obrpc_pb2.Row(cells=[_cell(v) for v in row]))
    return resp


def log_statement(
    principal: Principal,
    text: str,
    statement: ast.Statement | None,
    outcome: str,
    duration_us: int,
    *,
    front_end: str,
    forwarded_by: str = "",
    level: int = logging.INFO,
) -> None:
    """One log line for one statement on the ``rootservice.audit`` logger: ``statement
    user='root' client=10.0.0.9:5123 via=mysql kind=AlterSystemStopServer outcome=OK
    duration_ms=1.234 text="..."`` (``text`` masked by :func:`rootservice.auth.audit.redact`
    and cut to 512 characters; ``kind`` is ``unparsed`` for text that did not parse), with
    the same values as ``extra`` fields ``user``, ``client``, ``front_end``, ``kind``,
    ``outcome``, ``duration_us``, ``statement`` (and ``forwarded_by`` when set)."""
    kind = type(statement).__name__ if statement is not None else "unparsed"
    shown = redact(text)
    fields: dict[str, Any] = {
        "user": principal.user,
        "client": principal.client_addr,
        "front_end": front_end,
        "kind": kind,
        "outcome": outcome,
        "duration_us": duration_us,
        "statement": shown,
    }
    via = front_end
    if forwarded_by:
        fields["forwarded_by"] = forwarded_by
        via += f" forwarded_by={forwarded_by}"
    audit_log.log(
        level,
        "statement user=%r client=%s via=%s kind=%s outcome=%s duration_ms=%.3f text=%r",
        principal.user,
        principal.client_addr,
        via,
        kind,
        outcome,
        duration_us / 1000,
        shown,
        extra=fields,
    )


def run_statement(
    rs: RootService,
    text: str,
    principal: Principal,
    *,
    forwarder: Forwarder | None = None,
    forwarded_by: str = "",
    front_end: str = "grpc",
) -> Result:
    """Bound, parse, check and execute ``text`` for ``principal``: the one path every front
    end (gRPC ``ExecuteSql``, the MySQL endpoint) runs a statement through. Counts the
    outcome (``statements_total`` / ``statements_refused_total``) and audits it
    (:func:`audited`; the audit never changes the outcome).

    Every statement is one line on the ``rootservice.audit`` logger (
    :func:`log_statement`): user, client address, ``front_end`` (``grpc``, ``mysql``,
    ``http``), statement kind, outcome and duration, the text with passwords masked. At INFO
    when :func:`audited` (changes, refusals of access); reads at DEBUG, since dashboards and
    ``obadmin`` poll SELECTs every second or two and they change nothing.

    Any RS answers: with a ``forwarder``, a statement this RS may not run
    because it is not the leader (the gate's OB_RS_NOT_MASTER) is sent to the leader it knows
    (:meth:`RootService.leader_hint`) with ``principal``, and the leader's answer, result or
    error, is returned or raised as this RS's own. The leader counts and audits it; here it
    counts as ``statements_forwarded_total``. ``forwarded_by`` is set on the leader: the
    address of the RS that forwarded ``text`` (recorded in the audit); such a statement is
    never forwarded again (the loop guard: an RS that is no longer the leader answers
    OB_RS_NOT_MASTER).

    Raises ``ObError`` for every refusal; an unexpected failure is logged and raised as
    ``OB_ERR_UNEXPECTED``."""
    statement: ast.Statement | None = None
    to_leader = None if forwarded_by else forwarder
    t0 = time.perf_counter_ns()

    def record(outcome: str) -> None:
        rs.metrics.inc_labelled(
            "statements", (statement_kind(statement), "ok" if outcome == "OK" else outcome)
        )
        audit = audited(statement, text, outcome)
        log_statement(
            principal,
            text,
            statement,
            outcome,
            (time.perf_counter_ns() - t0) // 1000,
            front_end=front_end,
            forwarded_by=forwarded_by,
            level=logging.INFO if audit else logging.DEBUG,
        )
        if audit:
            rs.audit.record(
                principal.user,
                principal.client_addr,
                text,
                outcome,
                forwarded_by=forwarded_by,
                log_line=False,
            )

    def forward() -> Result | None:
        leader = rs.leader_hint()
        if to_leader is None or not leader:
            return None
        return to_leader.forward(leader, text, principal)

    try:
        if len(text) <= rs.settings.max_statement_bytes:  # longer: parse refuses its size
            check_tokens(text, rs.settings.max_statement_tokens)  # before lark
        statement = parse(text, max_bytes=rs.settings.max_statement_bytes)
        result = execute(rs, statement, principal, forward=forward)
    except LeaderRefusal:
        # The leader's refusal of a forwarded statement: the leader counted and audited it.
        rs.metrics.inc("statements_forwarded_total")
        rs.metrics.inc_labelled("statements", (statement_kind(statement), "forwarded"))
        raise
    except ObError as e:
        rs.metrics.inc("statements_refused_total")
        record(e.name)
        raise
    except Exception:
        log.exception("statement failed unexpectedly: %s", redact(text, 200))
        rs.metrics.inc("statements_refused_total")
        record("OB_ERR_UNEXPECTED")
        raise ObError("OB_ERR_UNEXPECTED", detail="see the root service log") from None
    if isinstance(result, ForwardedResult):
        rs.metrics.inc("statements_forwarded_total")
        rs.metrics.inc_labelled("statements", (statement_kind(statement), "forwarded"))
        return result
    rs.metrics.inc("statements_total")
    record("OK")
    return result


def execute_sql(
    rs: RootService,
    text: str,
    principal: Principal,
    *,
    forwarder: Forwarder | None = None,
    forwarded_by: str = "",
) -> obrpc_pb2.SqlResponse:
    """:func:`run_statement` as gRPC's ``SqlResponse``: every outcome, including an internal
    error, becomes a response (never an exception), the error in-band."""
    try:
        return to_response(
            run_statement(
                rs,
                text,
                principal,
                forwarder=forwarder,
                forwarded_by=forwarded_by,
                front_end="grpc",
            )
        )
    except ObError as e:
        resp = obrpc_pb2.SqlResponse()
        error_to_proto(e, resp.error)
        return resp
