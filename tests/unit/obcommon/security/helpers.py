"""Shared helpers of the trust-boundary unit tests: a throw-away CA in a directory."""

from __future__ import annotations

import time
from pathlib import Path

from obcommon.security.certs import Validity, create_ca

NOW_S = int(time.time())
VALID = Validity.starting(NOW_S, 86400)


def make_ca(tmp: Path, name: str = "ca") -> tuple[Path, Path]:
    """A new CA: ``(certs_dir, ca_key)`` with ``certs_dir/ca.crt`` written."""
    certs_dir, key = tmp / name, tmp / f"{name}.key"
    create_ca(certs_dir, key, VALID)
    return certs_dir, key
