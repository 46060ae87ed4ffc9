"""``obadmin``: the operators' SQL client for the RootService, in the manner of the mysql client.

::

    obadmin [--rs HOST:PORT[,HOST:PORT...]] (--certs-dir DIR | --insecure)
            [-u USER] [-p PASSWORD | --password-file F] [-e STATEMENT] [--format table|json|csv] [--timeout S]
            [--wait-job N [--interval S] [--wait-timeout S]]

Statements travel verbatim through ``AdminService.ExecuteSql`` (obcommon/proto/obrpc.proto);
the RS parses and executes them, the client only splits its input at ``;`` and prints the
answer. With ``-e`` it runs the given statements; otherwise it reads stdin: an interactive
shell on a terminal (:mod:`sql.shell`: completion, history, ``help``), a script (stopping at
the first error, like ``mysql < file``) when not. A statement ended by ``\\G`` prints its
rows vertically. ``--rs`` defaults to ``OB_RS`` (then 127.0.0.1:2882) and ``-u`` to
``OB_USER``.

Output follows the mysql client: a ``+---+`` bordered table and ``N rows in set`` / ``Empty set``
for result sets, ``Query OK, N rows affected`` otherwise, and ``ERROR <code> (<state>): ...`` on
stderr with exit status 1 for errors (docs/design/statements.md and docs/design/index.md).

The user is ``-u``; its password ``-p PASSWORD``, else the first line of
``--password-file F``, else the environment variable ``OB_PASSWORD``; both travel as gRPC
metadata on every call and the password is never printed. Every call is mutual TLS with
``DIR/ca.crt`` and ``DIR/client.USER.crt`` (USER default root; the only client certificate
in DIR when that one is missing); with no password, the certificate names the user.
``--insecure`` talks plaintext to a cluster run with ``--insecure``.

The parts: :mod:`sql.client` (talking to the RS), :mod:`sql.shell` (input),
:mod:`sql.formatting` (output), :mod:`sql.wait_job` (``--wait-job``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from obcommon.security.tls import SecurityConfigError
from sql.client import DEFAULT_TIMEOUT_S, Credentials, client_security
from sql.formatting import FORMATS
from sql.shell import Shell
from sql.wait_job import DEFAULT_INTERVAL_S, wait_job


def _build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="obadmin",
        description="Send admin SQL (ALTER SYSTEM ..., SHOW PARAMETERS, SELECT) to the RootService.",
    )
    parser.add_argument(
        "--rs",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="RootService addresses, tried in order until the leader answers "
        f"(env {RS_ENV}; default {DEFAULT_RS})",
    )
    parser.add_argument(
        "--certs-dir",
        type=Path,
        metavar="DIR",
        help=f"ca.crt and client.USER.crt / .key: mutual TLS (env {CERTS_DIR_ENV})",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, for a cluster run with --insecure (no authentication)",
    )
    parser.add_argument("-u", "--user", metavar="USER", help=f"log in as USER (env {USER_ENV})")
    parser.add_argument(
        "-p",
        "--password",
        metavar="PASSWORD",
        help="the user's password (visible to other local users in the process list: "
        "prefer --password-file or OB_PASSWORD)",
    )
    parser.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help="read the password from the first line of FILE",
    )
    parser.add_argument(
        "-e", "--execute", metavar="STATEMENT", help="run these statements and exit"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="output format; json: one JSON document per statement, errors included",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="deadline of each statement (default: %(default)s)",
    )
    parser.add_argument(
        "--wait-job",
        type=int,
        metavar="JOB_ID",
        help="follow a rootservice job (e.g. DELETE_SERVER) with a progress bar until it ends",
    )
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="give up --wait-job after this long (exit 3; default: %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help="--wait-job refreshes this often (default: %(default)s)",
    )
    return parser


RS_ENV = "OB_RS"
DEFAULT_RS = "127.0.0.1:2882"
"""Where ``obadmin`` looks without ``--rs`` or ``OB_RS``: the RS's default ``--rpc-addr``
(as the mysql client defaults to localhost)."""
USER_ENV = "OB_USER"
PASSWORD_ENV = "OB_PASSWORD"
CERTS_DIR_ENV = "OB_CERTS_DIR"


def rs_addresses(flag: str | None, environ: dict[str, str]) -> list[str]:
    """The RS addresses to try, in order: ``--rs`` when given, else ``OB_RS``, else
    :data:`DEFAULT_RS`; a comma list, blanks dropped (empty when the value holds none)."""
    value = flag if flag is not None else environ.get(RS_ENV, DEFAULT_RS)
    return [a.strip() for a in value.split(",") if a.strip()]


def credentials(
    args: argparse.Namespace, parser: argparse.ArgumentParser, environ: dict[str, str]
) -> Credentials:
    """The user and password of the command line: the password from ``-p``, else the first
    line of ``--password-file`` (its line end removed), else ``OB_PASSWORD`` (an empty value
    counts as none). The user is ``-u``, else ``OB_USER``. An unreadable password file is a
    usage error (exit 2)."""
    user: str | None = args.user or environ.get(USER_ENV) or None
    password: str | None = args.password
    if password is None and args.password_file is not None:
        try:
            with args.password_file.open(encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            parser.error(f"cannot read --password-file {args.password_file}: {e}")
    if password is None:
        password = environ.get(PASSWORD_ENV) or None
    certs_dir = args.certs_dir or (
        Path(environ[CERTS_DIR_ENV]) if environ.get(CERTS_DIR_ENV) else None
    )
    if args.insecure and args.certs_dir:
        parser.error("--certs-dir and --insecure exclude each other")
    security = None
    if not args.insecure:
        if certs_dir is None:
            parser.error(
                f"pass --certs-dir DIR (or {CERTS_DIR_ENV}) with ca.crt and a client certificate, "
                "or --insecure for a cluster run without TLS"
            )
        try:
            security = client_security(certs_dir, user)
        except SecurityConfigError as e:
            parser.error(str(e))
    return Credentials(user=user, password=password, security=security)


def main(argv: list[str] | None = None) -> int:
    """The ``obadmin`` console script. Returns the exit status: 0 when every statement
    succeeded, 1 after an error (printed on stderr as ``ERROR <code> (<state>): ...``), 2 for
    bad command-line arguments (argparse). ``--rs`` defaults to ``OB_RS``, then
    :data:`DEFAULT_RS`."""
    parser = _build_arg_parser()
    args = parser.parse_args(argv)
    environ = dict(os.environ)
    rs_addrs = rs_addresses(args.rs, environ)
    if not rs_addrs:
        parser.error(f"--rs (or {RS_ENV}) needs at least one HOST:PORT")
    if not args.timeout > 0:
        parser.error("--timeout must be positive")
    if not args.interval > 0:
        parser.error("--interval must be positive")
    creds = credentials(args, parser, environ)
    if args.wait_job is not None:
        return wait_job(
            rs_addrs,
            args.wait_job,
            args.timeout,
            sys.stdout,
            interval_s=args.interval,
            deadline_s=args.wait_timeout,
            credentials=creds,
        )
    client = Shell(rs_addrs, args.format, args.timeout, sys.stdout, sys.stderr, creds)
    if args.execute is not None:
        return client.run_script(args.execute)
    if sys.stdin.isatty():
        return client.interactive()
    return client.run_script(sys.stdin.read())


if __name__ == "__main__":
    sys.exit(main())
