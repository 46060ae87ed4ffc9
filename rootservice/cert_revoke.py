"""``rootservice cert revoke`` and the cluster half of ``cert list``.

::

    rootservice cert revoke (--serial HEX | FILE) [--reason TEXT]
                            --certs-dir D [--rs HOST:PORT[,...]] [-u USER] [--password-file F]
    rootservice cert list   --certs-dir D [--rs HOST:PORT[,...]] [-u USER] [--password-file F]

Both talk to the running cluster through the RS's admin API, as ``obadmin`` does
(:func:`sql.client.execute`, mutual TLS with ``client.USER.crt`` of ``--certs-dir``), rather
than to its database: the revocation is then a fenced write of the leader (a deposed RS
cannot write it), privilege-checked (ALTER SYSTEM) and audited as every admin statement,
the RS that runs it refuses the certificate at once, and the operator needs no database
credentials. ``revoke`` sends ``ALTER SYSTEM REVOKE CERTIFICATE SERIAL ... [SUBJECT ...]
[REASON ...]`` (by file: the serial and subject read with ``cryptography``); ``list`` reads
``DBA_OB_REVOKED_CERTIFICATES`` and marks the files of ``--certs-dir`` that are revoked.

Exit status: 0 done; 1 the RS refused (its error printed), could not be reached (the
addresses tried printed) or the file could not be read; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from obcommon.security.revocation import parse_serial, serial_text
from obcommon.security.tls import SecurityConfigError
from sql.client import (
    DEFAULT_TIMEOUT_S,
    Credentials,
    RsUnreachableError,
    client_security,
    execute,
    result_rows,
)
from sql.obadmin import DEFAULT_RS, PASSWORD_ENV, RS_ENV, USER_ENV, rs_addresses

#: The view ``cert list`` reads (migration 0007).
REVOKED_VIEW = "DBA_OB_REVOKED_CERTIFICATES"


class ClusterError(Exception):
    """The cluster could not be asked or refused: the message is what to print."""


def add_cluster_args(p: argparse.ArgumentParser, *, required: bool) -> None:
    """The flags that reach the cluster: ``--rs``, ``-u``, ``--password-file``,
    ``--timeout``. ``required`` False leaves ``--rs`` optional (``cert list`` without it
    lists the files only)."""
    p.add_argument(
        "--rs",
        metavar="HOST:PORT[,HOST:PORT...]",
        default=None if not required else os.environ.get(RS_ENV, DEFAULT_RS),
        help=f"the RootService addresses (env {RS_ENV}"
        + (f"; default {DEFAULT_RS})" if required else "; without it nothing is asked)"),
    )
    p.add_argument("-u", "--user", help=f"log in as USER (env {USER_ENV}; default root)")
    p.add_argument("--password-file", type=Path, help=f"the user's password (env {PASSWORD_ENV})")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds")


def _quote(text: str) -> str:
    # The grammar's strings are MySQL's: a backslash escapes, a doubled quote is a quote.
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _credentials(args: argparse.Namespace) -> Credentials:
    user = args.user or os.environ.get(USER_ENV) or None
    password = os.environ.get(PASSWORD_ENV) or None
    if args.password_file is not None:
        try:
            with args.password_file.open(encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise ClusterError(f"cannot read --password-file {args.password_file}: {e}") from None
    try:
        security = client_security(args.certs_dir, user)
    except SecurityConfigError as e:
        raise ClusterError(str(e)) from None
    return Credentials(user=user, password=password, security=security)


def run_statement(args: argparse.Namespace, statement: str) -> list[list[object]] | str:
    """Run ``statement`` on the cluster of ``args`` (``--rs``, ``--certs-dir``, ``-u``);
    the rows of a result set, else the OK's info. Raises :class:`ClusterError` with the RS's
    error or the addresses that could not be reached."""
    addrs = rs_addresses(args.rs, {})
    if not addrs:
        raise ClusterError("--rs needs at least one HOST:PORT")
    try:
        resp = execute(addrs, statement, args.timeout, _credentials(args))
    except RsUnreachableError as e:
        raise ClusterError(
            f"cannot reach the cluster (tried {', '.join(addrs)}): {e.detail}; nothing was revoked"
        ) from None
    if resp.error.code:
        raise ClusterError(f"ERROR {abs(resp.error.code)}: {resp.error.message}")
    if resp.columns:
        return [list(r) for r in result_rows(resp)]
    return resp.info


@dataclass(frozen=True)
class Target:
    """What to revoke: ``serial`` (hex) and ``subject`` (RFC 4514, "" when not known)."""

    serial: str
    subject: str


def target(args: argparse.Namespace) -> Target:
    """The certificate of ``--serial`` or of the FILE argument. Raises ``ValueError`` for
    a malformed serial or an unreadable file (the message names it)."""
    if args.serial:
        return Target(parse_serial(args.serial), "")
    try:
        cert = x509.load_pem_x509_certificate(Path(args.file).read_bytes())
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read a certificate from {args.file}: {e}") from None
    return Target(serial_text(cert.serial_number), cert.subject.rfc4514_string())


def revoke(args: argparse.Namespace) -> int:
    """``cert revoke``: exit status 0 revoked (or already), 1 refused / unreachable /
    unreadable, 2 neither or both of ``--serial`` and FILE."""
    if bool(args.serial) == bool(args.file):
        print("rootservice cert revoke: give --serial HEX or a certificate FILE", file=sys.stderr)
        return 2
    try:
        t = target(args)
    except ValueError as e:
        print(f"rootservice cert revoke: {e}", file=sys.stderr)
        return 1
    statement = f"ALTER SYSTEM REVOKE CERTIFICATE SERIAL {_quote(t.serial)}"
    if t.subject:
        statement += f" SUBJECT {_quote(t.subject)}"
    if args.reason:
        statement += f" REASON {_quote(args.reason)}"
    try:
        info = run_statement(args, statement)
    except ClusterError as e:
        print(f"rootservice cert revoke: {e}", file=sys.stderr)
        return 1
    print(info if isinstance(info, str) and info else f"certificate {t.serial} revoked")
    return 0


def revoked_in_cluster(args: argparse.Namespace) -> list[list[object]]:
    """The rows of :data:`REVOKED_VIEW` (serial, common name, revoked time, reason, revoked
    by), oldest first. Raises :class:`ClusterError`."""
    rows = run_statement(
        args,
        f"SELECT SERIAL, COMMON_NAME, REVOKED_TIME, REASON, REVOKED_BY FROM {REVOKED_VIEW} "
        "ORDER BY REVOKED_TIME, SERIAL",
    )
    return rows if isinstance(rows, list) else []
