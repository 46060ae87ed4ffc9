"""``rootservice cert ...``: write the cluster's certificates, in the manner
of ``cockroach cert``.

::

    rootservice cert create-ca     --certs-dir D --ca-key K [--lifetime 3660d] [--overwrite]
    rootservice cert create-rs     IP:PORT [HOST ...] --certs-dir D --ca-key K [...]
    rootservice cert create-node   IP:PORT [HOST ...] --certs-dir D --ca-key K [...]
    rootservice cert create-client USER               --certs-dir D --ca-key K [...]
    rootservice cert list          --certs-dir D [--rs HOST:PORT [-u USER]]
    rootservice cert revoke        (--serial HEX | FILE) [--reason TEXT] --certs-dir D [...]

The files are described in :mod:`obcommon.security.certs`. ``revoke`` and ``list --rs`` ask
the running cluster (:mod:`rootservice.cert_revoke`): ``list`` then marks the revoked files
``REVOKED`` and lists every revoked certificate. Exit status 0 on success, 1 when a file
cannot be written or the CA cannot be read (or the cluster refused or could not be
reached), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from cryptography import x509

from obcommon.clock import Clock, SystemClock
from obcommon.durations import parse_duration
from obcommon.security.certs import (
    DEFAULT_CA_LIFETIME_S,
    DEFAULT_CERT_LIFETIME_S,
    CertError,
    Role,
    Validity,
    create_ca,
    create_cert,
)
from obcommon.security.identity import identity_of_pem
from obcommon.security.revocation import serial_text
from rootservice import cert_revoke

_CREATE = {"create-rs": Role.RS, "create-node": Role.NODE, "create-client": Role.CLIENT}


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``cert`` command and its sub-commands to ``rootservice``'s parser."""
    cert = sub.add_parser("cert", help="create the cluster's TLS certificates")
    csub = cert.add_subparsers(dest="cert_command", required=True)

    def common(p: argparse.ArgumentParser, default_lifetime_s: int) -> None:
        p.add_argument(
            "--certs-dir", required=True, type=Path, help="where ca.crt and the pairs live"
        )
        p.add_argument("--ca-key", required=True, type=Path, help="the CA's private key")
        p.add_argument(
            "--lifetime",
            default=f"{default_lifetime_s // 86400}d",
            help="validity, e.g. 365d or 12h (default: %(default)s)",
        )
        p.add_argument("--overwrite", action="store_true", help="replace existing files")

    common(
        csub.add_parser("create-ca", help="a new CA (ca.crt and its key)"), DEFAULT_CA_LIFETIME_S
    )
    for command, role in _CREATE.items():
        p = csub.add_parser(command, help=f"a {role.value} certificate and key")
        if role is Role.CLIENT:
            p.add_argument("name", metavar="USER", help="the user the certificate logs in as")
        else:
            p.add_argument(
                "name", metavar="IP:PORT", help=f"the {role.value}'s RPC address, its identity"
            )
            p.add_argument(
                "hosts", nargs="*", metavar="HOST", help="more names for the subjectAltName"
            )
        common(p, DEFAULT_CERT_LIFETIME_S)
    ls = csub.add_parser(
        "list", help="the certificates in a directory (and, with --rs, the revoked ones)"
    )
    ls.add_argument("--certs-dir", required=True, type=Path)
    cert_revoke.add_cluster_args(ls, required=False)
    rv = csub.add_parser("revoke", help="refuse a certificate in the running cluster from now on")
    rv.add_argument("file", nargs="?", metavar="FILE", help="the certificate (PEM) to revoke")
    rv.add_argument("--serial", help="or its serial in hex, as 'cert list' prints it")
    rv.add_argument("--reason", default="", help="why, kept with the revocation")
    rv.add_argument(
        "--certs-dir", required=True, type=Path, help="ca.crt and client.USER.crt / .key"
    )
    cert_revoke.add_cluster_args(rv, required=True)


def run(args: argparse.Namespace, clock: Clock | None = None) -> int:
    """Run one ``cert`` sub-command; returns the exit status and prints what was written."""
    now_s = (clock or SystemClock()).now_us() // 1_000_000
    if args.cert_command == "list":
        return _list(args, now_s)
    if args.cert_command == "revoke":
        return cert_revoke.revoke(args)
    try:
        lifetime_s = parse_duration(args.lifetime) // 1_000_000
        validity = Validity.starting(now_s, lifetime_s)
    except (ValueError, CertError) as e:
        print(f"rootservice cert: --lifetime: {e}", file=sys.stderr)
        return 2
    try:
        if args.cert_command == "create-ca":
            create_ca(args.certs_dir, args.ca_key, validity, overwrite=args.overwrite)
            print(f"wrote {args.certs_dir / 'ca.crt'} and {args.ca_key}")
            return 0
        role = _CREATE[args.cert_command]
        hosts = list(getattr(args, "hosts", []) or [])
        cert = create_cert(
            args.certs_dir,
            args.ca_key,
            role,
            args.name,
            validity,
            hosts=hosts,
            overwrite=args.overwrite,
        )
    except CertError as e:
        print(f"rootservice cert: {e}", file=sys.stderr)
        return 1
    print(
        f"wrote {role.value} certificate for '{args.name}' in {args.certs_dir}, valid until {_until(cert)}"
    )
    return 0


def _until(cert: x509.Certificate) -> str:
    return cert.not_valid_after_utc.strftime("%Y-%m-%d %H:%M:%S UTC")


def _list(args: argparse.Namespace, now_s: int) -> int:
    certs_dir: Path = args.certs_dir
    files = sorted(certs_dir.glob("*.crt"))
    if not files:
        print(f"rootservice cert: no certificates in {certs_dir}", file=sys.stderr)
        return 1
    revoked: list[list[object]] = []
    if getattr(args, "rs", None):
        try:
            revoked = cert_revoke.revoked_in_cluster(args)
        except cert_revoke.ClusterError as e:
            print(f"rootservice cert list: {e}", file=sys.stderr)
            return 1
    serials = {str(r[0]) for r in revoked}
    now = dt.datetime.fromtimestamp(now_s, tz=dt.UTC)
    for f in files:
        pem = f.read_bytes()
        try:
            cert = x509.load_pem_x509_certificate(pem)
        except ValueError as e:
            print(f"{f.name}\tunreadable: {e}")
            continue
        ident = identity_of_pem(pem)
        who = (
            f"{ident.role.value}\t{ident.name}" if ident else f"ca\t{cert.subject.rfc4514_string()}"
        )
        serial = serial_text(cert.serial_number)
        state = "EXPIRED" if cert.not_valid_after_utc < now else "valid"
        if serial in serials:
            state = "REVOKED"
        print(f"{f.name}\t{who}\t{state} until {_until(cert)}\tserial {serial}")
    if getattr(args, "rs", None):
        print(f"revoked in the cluster: {len(revoked)}")
        for rserial, cn, when, reason, by in revoked:
            print(f"REVOKED\tserial {rserial}\t{cn or '-'}\tat {when}\tby {by}\t{reason}")
    return 0
