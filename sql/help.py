"""``obadmin``'s ``help``: the one table of the admin language's statements (a line each and
their syntax) and of obadmin's own commands, and the keywords the shell completes.

The statements are those of sql/grammar.lark (docs/design/statements.md) plus the browsing statements
the RS answers for the MySQL clients (SHOW TABLES / DATABASES / COLUMNS, DESC).
``help`` with no topic lists them, ``help <topic>`` (``help alter system``, ``help desc``)
shows the syntax of every statement whose name starts with the topic's words, as the mysql
client's ``help contents`` / ``help <item>`` do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

GRAMMAR_FILE = Path(__file__).with_name("grammar.lark")


@dataclass(frozen=True)
class HelpTopic:
    """One statement (or obadmin command): ``name`` as the operator types its leading words
    (upper case), ``summary`` one line, ``syntax`` the lines ``help <name>`` shows."""

    name: str
    summary: str
    syntax: str


STATEMENTS: tuple[HelpTopic, ...] = (
    HelpTopic(
        "ALTER SYSTEM BOOTSTRAP",
        "create the cluster: its first zones and one server in each",
        "ALTER SYSTEM BOOTSTRAP [REGION 'r'] ZONE 'z1' SERVER 'ip:port'\n"
        "    [, [REGION 'r'] ZONE 'z2' SERVER 'ip:port' ...]",
    ),
    HelpTopic(
        "ALTER SYSTEM ADD SERVER",
        "put servers on the white list of a zone",
        "ALTER SYSTEM ADD SERVER 'ip:port' [, 'ip:port' ...] [ZONE 'z']",
    ),
    HelpTopic(
        "ALTER SYSTEM DELETE SERVER",
        "drain servers and remove them (a job: obadmin --wait-job N follows it)",
        "ALTER SYSTEM DELETE SERVER 'ip:port' [, 'ip:port' ...] [ZONE 'z']",
    ),
    HelpTopic(
        "EXPLAIN ALTER SYSTEM DELETE SERVER",
        "dry run of DELETE SERVER: the units and replicas that would move, and the blockers",
        "EXPLAIN ALTER SYSTEM DELETE SERVER 'ip:port' [, 'ip:port' ...] [ZONE 'z']\n"
        "    rows: kind (UNIT | REPLICA | BLOCKER), tenant_id, unit_id, ls_id, from_svr,\n"
        "    to_svr, bytes, reason; refused as DELETE SERVER would be; changes nothing",
    ),
    HelpTopic(
        "ALTER SYSTEM CANCEL DELETE SERVER",
        "stop a DELETE SERVER in progress",
        "ALTER SYSTEM CANCEL DELETE SERVER 'ip:port' [, 'ip:port' ...] [ZONE 'z']",
    ),
    HelpTopic(
        "ALTER SYSTEM FORCE DELETE SERVER",
        "bury servers that are gone for good: out of every member list, never back",
        "ALTER SYSTEM FORCE DELETE SERVER 'ip:port' [, 'ip:port' ...] [ZONE 'z']\n"
        "    only servers that do not heartbeat; refused when an LS would lose its\n"
        "    majority (see RECOVER LS); their units move as after DELETE SERVER;\n"
        "    see DBA_OB_SERVER_TOMBSTONES",
    ),
    HelpTopic(
        "ALTER SYSTEM RECOVER LS",
        "give the log streams that lost their majority a leader again (can lose data)",
        "ALTER SYSTEM RECOVER LS [TENANT name] [LS n] FROM LOST SERVERS 'ip:port'\n"
        "    [, 'ip:port' ...] [DRY RUN]\n"
        "    rows: tenant_id, ls_id, plan_id, action, survivor, survivor_term,\n"
        "    survivor_log_end, highest_log_end, lost_entries, new_term, members_before,\n"
        "    members_after, removed, report_digest; DRY RUN changes nothing; the run is\n"
        "    a RECOVER_LS job (DBA_OB_ROOTSERVICE_JOBS) and buries the lost servers",
    ),
    HelpTopic(
        "ALTER SYSTEM START SERVER",
        "let stopped servers serve again",
        "ALTER SYSTEM START SERVER 'ip:port' [, 'ip:port' ...] [ZONE 'z']",
    ),
    HelpTopic(
        "ALTER SYSTEM STOP SERVER",
        "stop servers once their leaders have moved away",
        "ALTER SYSTEM [FORCE] STOP SERVER 'ip:port' [, 'ip:port' ...] [ZONE 'z']",
    ),
    HelpTopic(
        "ALTER SYSTEM ISOLATE SERVER",
        "take servers out of leader placement",
        "ALTER SYSTEM ISOLATE SERVER 'ip:port' [, 'ip:port' ...] [ZONE 'z']",
    ),
    HelpTopic(
        "ALTER SYSTEM RELOAD SERVER",
        "reload the server list from the tables",
        "ALTER SYSTEM RELOAD SERVER",
    ),
    HelpTopic(
        "ALTER SYSTEM END ROLLING UPGRADE",
        "finalize an upgrade: raise the cluster version once every process runs the release",
        "ALTER SYSTEM END ROLLING UPGRADE",
    ),
    HelpTopic(
        "ALTER SYSTEM BEGIN UPGRADE",
        "enter upgrade mode once the pre-checks pass (tenant DDL and re-replication held)",
        "ALTER SYSTEM BEGIN UPGRADE",
    ),
    HelpTopic(
        "ALTER SYSTEM BEGIN ROLLING UPGRADE",
        "the rolling stage of upgrade mode: replace the processes zone by zone",
        "ALTER SYSTEM BEGIN ROLLING UPGRADE",
    ),
    HelpTopic(
        "ALTER SYSTEM END UPGRADE",
        "leave upgrade mode (after END ROLLING UPGRADE when a rolling upgrade began)",
        "ALTER SYSTEM END UPGRADE",
    ),
    HelpTopic(
        "ALTER SYSTEM ZONE",
        "add, start, stop, alter or delete a zone",
        "ALTER SYSTEM ADD ZONE 'z' [IDC 'idc'] [REGION 'r']\n"
        "ALTER SYSTEM {ALTER | CHANGE | MODIFY} ZONE 'z' [SET] [IDC 'idc'] [REGION 'r']\n"
        "ALTER SYSTEM {START | STOP | FORCE STOP | DELETE} ZONE 'z'",
    ),
    HelpTopic(
        "ALTER SYSTEM SET",
        "change parameters, cluster-wide or for a zone or server",
        "ALTER SYSTEM [SET] name = value [COMMENT 'c'] [SCOPE = {MEMORY | SPFILE | BOTH}]\n"
        "    [SERVER [=] 'ip:port' | ZONE [=] 'z'] [TENANT [=] t] [, name = value ...]\n"
        "    value: 'string' | number | duration (10s, 500ms) | word",
    ),
    HelpTopic(
        "ALTER SYSTEM SWITCH REPLICA",
        "pin a log stream's leader to a server, keep it off one, or undo both",
        "ALTER SYSTEM SWITCH REPLICA {LEADER | FOLLOWER | DEFAULT} LS = n SERVER = 'ip:port'"
        " [TENANT = name]\n"
        "    LEADER stays until DEFAULT; FOLLOWER keeps leaders off the server",
    ),
    HelpTopic(
        "ALTER SYSTEM SWITCH ROOTSERVICE",
        "hand the root service office over to a standby root service now",
        "ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER = 'ip:port'",
    ),
    HelpTopic(
        "ALTER SYSTEM REVOKE CERTIFICATE",
        "refuse a certificate from now on (gRPC, MySQL, HTTP, agents); never undone",
        "ALTER SYSTEM REVOKE CERTIFICATE SERIAL 'hex' [SUBJECT 'dn'] [REASON 'text']\n"
        "    serial as 'rootservice cert list' or 'openssl x509 -serial' prints it;\n"
        "    open connections with it are closed; see DBA_OB_REVOKED_CERTIFICATES",
    ),
    HelpTopic(
        "SHOW PARAMETERS",
        "list the parameters in effect on each server",
        "SHOW PARAMETERS [LIKE 'pattern' | WHERE cond]",
    ),
    HelpTopic(
        "SHOW TABLES",
        "list the system tables and views",
        "SHOW [FULL] TABLES [LIKE 'pattern']",
    ),
    HelpTopic(
        "SHOW DATABASES",
        "list the databases (oceanbase)",
        "SHOW DATABASES",
    ),
    HelpTopic(
        "SHOW COLUMNS",
        "list a table's columns",
        "SHOW COLUMNS FROM table",
    ),
    HelpTopic(
        "DESC",
        "a table's columns (also DESCRIBE)",
        "{DESC | DESCRIBE} table",
    ),
    HelpTopic(
        "SELECT",
        "read the system tables and views (read-only)",
        "SELECT expr [, expr ...] FROM table [JOIN ...] [WHERE cond]\n"
        "    [GROUP BY ...] [HAVING cond] [ORDER BY col [ASC | DESC], ...] [LIMIT n [OFFSET m]]",
    ),
    HelpTopic(
        "CREATE RESOURCE UNIT",
        "define a resource unit config",
        "CREATE RESOURCE UNIT [IF NOT EXISTS] name MAX_CPU = n, MEMORY_SIZE = '4G'\n"
        "    [, MIN_CPU = n] [, LOG_DISK_SIZE = size] [, MAX_IOPS = n] [, MIN_IOPS = n]\n"
        "    [, IOPS_WEIGHT = n]",
    ),
    HelpTopic(
        "DROP RESOURCE UNIT",
        "remove a resource unit config",
        "DROP RESOURCE UNIT [IF EXISTS] name",
    ),
    HelpTopic(
        "CREATE RESOURCE POOL",
        "create a resource pool of units in zones",
        "CREATE RESOURCE POOL [IF NOT EXISTS] name UNIT = unit_name, UNIT_NUM = n,\n"
        "    ZONE_LIST = ('z1', 'z2' ...)",
    ),
    HelpTopic(
        "DROP RESOURCE POOL",
        "remove a resource pool",
        "DROP RESOURCE POOL [IF EXISTS] name",
    ),
    HelpTopic(
        "CREATE TENANT",
        "create a tenant on resource pools",
        "CREATE TENANT [IF NOT EXISTS] name RESOURCE_POOL_LIST = ('pool' ...)\n"
        "    [, PRIMARY_ZONE = 'z'] [, LS_COUNT = n]",
    ),
    HelpTopic(
        "DROP TENANT",
        "drop a tenant",
        "DROP TENANT [IF EXISTS] name [FORCE]",
    ),
    HelpTopic(
        "CREATE USER",
        "create a user with a password",
        "CREATE USER [IF NOT EXISTS] 'name'[@'host'] IDENTIFIED BY 'password'",
    ),
    HelpTopic(
        "DROP USER",
        "drop a user",
        "DROP USER [IF EXISTS] 'name'[@'host']",
    ),
    HelpTopic(
        "ALTER USER",
        "change a user's password",
        "ALTER USER 'name'[@'host'] IDENTIFIED BY 'password'",
    ),
    HelpTopic(
        "GRANT",
        "give privileges to a user",
        "GRANT privilege [, privilege ...] ON *.* TO 'name'[@'host']",
    ),
    HelpTopic(
        "REVOKE",
        "take privileges from a user",
        "REVOKE privilege [, privilege ...] ON *.* FROM 'name'[@'host']",
    ),
    HelpTopic(
        "SHOW GRANTS",
        "a user's privileges",
        "SHOW GRANTS [FOR 'name'[@'host']]",
    ),
)
"""Every statement of the admin language, in the order ``help`` lists them."""


COMMANDS: tuple[HelpTopic, ...] = (
    HelpTopic(
        "help",
        "this list; help <topic> shows a statement's syntax (also \\h, ?)",
        "help [topic]   \\h [topic]   ? [topic]",
    ),
    HelpTopic(
        "\\G",
        "end a statement and print its rows vertically (also in -e)",
        "statement\\G",
    ),
    HelpTopic(
        "exit",
        "leave obadmin (also quit, \\q, Ctrl-D)",
        "exit | quit | \\q",
    ),
)
"""obadmin's own commands (run by the client, never sent to the RS)."""


HELP_COMMANDS = ("help", "\\h", "?")
"""The words that start a help request, as in the mysql client."""


def _words(text: str) -> list[str]:
    return text.upper().split()


def help_topic_of(statement: str) -> str | None:
    """The topic of a help request (``"alter system"`` for ``help alter system;``; ``""`` for a
    bare ``help``), or None when ``statement`` is not one. The mysql client's rule: the first
    word is ``help``, ``\\h`` or ``?``; a trailing ``;`` is dropped."""
    text = statement.strip().rstrip(";").strip()
    first, _, rest = text.partition(" ")
    if first.lower() in HELP_COMMANDS:
        return rest.strip()
    # `\hALTER` and `?SELECT` without a blank, as mysql accepts for its one-character commands.
    for prefix in ("\\h", "?"):
        if first.lower().startswith(prefix) and len(first) > len(prefix):
            return text[len(prefix) :].strip()
    return None


def help_text(topic: str = "") -> str:
    """What ``help [topic]`` prints. No topic: every statement with its one line, then
    obadmin's commands. A topic: the syntax of every statement (or command) whose name starts
    with the topic's words (case-insensitive), or a line saying nothing matched."""
    wanted = _words(topic)
    if not wanted:
        width = max(len(t.name) for t in (*STATEMENTS, *COMMANDS))
        lines = ["Statements (help <statement> shows its syntax):"]
        lines += [f"  {t.name.ljust(width)}  {t.summary}" for t in STATEMENTS]
        lines += ["", "obadmin commands:"]
        lines += [f"  {t.name.ljust(width)}  {t.summary}" for t in COMMANDS]
        return "\n".join(lines)
    found = [t for t in (*STATEMENTS, *COMMANDS) if _words(t.name)[: len(wanted)] == wanted]
    if not found:
        return f"Nothing found for '{topic.strip()}'. Type 'help' for the list of statements."
    return "\n\n".join(f"{t.name}: {t.summary}\n  " + t.syntax.replace("\n", "\n  ") for t in found)


_QUOTED_KEYWORD = re.compile(r'"([A-Za-z_][A-Za-z_]*)"i')


def keywords(grammar: str | None = None) -> list[str]:
    """The keywords to complete, upper case and sorted: every case-insensitive literal of the
    grammar (``"ALTER"i``; ``grammar`` default sql/grammar.lark) and every word of the
    statement names above (SHOW TABLES, DESC: statements answered by the RS outside the
    grammar)."""
    text = GRAMMAR_FILE.read_text(encoding="utf-8") if grammar is None else grammar
    words = {m.group(1).upper() for m in _QUOTED_KEYWORD.finditer(text)}
    for t in STATEMENTS:
        words.update(w for w in _words(t.name) if w.isalpha() or "_" in w)
    return sorted(words)
