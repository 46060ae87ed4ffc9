"""The cluster identity file of a data directory (docs/design/leases.md and docs/design/statements.md, ADD SERVER).

A server is *empty* until an RS has accepted it: then ``DATA_DIR/identity.json`` records
which cluster it belongs to and the id the RS gave it. The file is what ``CheckServerEmpty``
reports to ADD SERVER / BOOTSTRAP, and what stops an agent from ever joining another cluster
(OceanBase keeps the same facts in the server's ``super block``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

# Re-exported: the replicas' files use them from here.
from obcommon.files import fsync_dir as fsync_dir
from obcommon.files import write_atomic as write_atomic

IDENTITY_FILE = "identity.json"


class IdentityError(Exception):
    """The identity file exists but cannot be read or is malformed."""


@dataclass(frozen=True)
class ClusterIdentity:
    """What an accepted server keeps: ``cluster_id`` (non-empty), ``server_id`` (> 0, the
    ``id`` of ``__all_server``), and the ``zone`` and ``server`` ("ip:port") it joined with."""

    cluster_id: str
    server_id: int
    zone: str
    server: str

    def to_json(self) -> str:
        """The file's content: one JSON object with the four fields."""
        return json.dumps(asdict(self), sort_keys=True) + "\n"


def identity_path(data_dir: Path) -> Path:
    """``data_dir / "identity.json"``."""
    return Path(data_dir) / IDENTITY_FILE


def load_identity(data_dir: Path) -> ClusterIdentity | None:
    """The identity kept in ``data_dir``, or None when the server is empty (no file).

    Raises :class:`IdentityError` when the file exists but is unreadable or malformed: such a
    server is not empty, and guessing which cluster it belongs to would be unsafe.
    """
    path = identity_path(data_dir)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise IdentityError(f"cannot read {path}: {e}") from e
    try:
        data = json.loads(raw)
        ident = ClusterIdentity(
            cluster_id=str(data["cluster_id"]),
            server_id=int(data["server_id"]),
            zone=str(data["zone"]),
            server=str(data["server"]),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise IdentityError(f"malformed identity file {path}: {e}") from e
    if not ident.cluster_id or ident.server_id <= 0:
        raise IdentityError(f"malformed identity file {path}: empty cluster_id or server_id")
    return ident


def write_identity(data_dir: Path, ident: ClusterIdentity) -> Path:
    """Write ``ident`` to ``data_dir/identity.json`` atomically; returns the path.

    Temp file in the same directory, fsync, rename over the target, fsync the directory:
    after a crash the file is either absent or complete, never half written. Raises
    ``OSError`` on failure (the temp file is removed) and ``ValueError`` for an identity
    without cluster_id or server_id.
    """
    if not ident.cluster_id or ident.server_id <= 0:
        raise ValueError(f"refusing to write an incomplete identity: {ident}")
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = identity_path(directory)
    write_atomic(target, ident.to_json().encode("utf-8"))
    return target
