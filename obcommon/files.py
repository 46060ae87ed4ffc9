"""Durable file replacement, shared by the agent (identity, replicas, fencing token) and the
RS (the metadata server it last saw)."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def write_atomic(path: Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload``: temp file in the same directory, fsync, rename,
    fsync the directory. After a crash the file is the old or the new one, never half of
    one. Raises ``OSError`` (the temp file is removed)."""
    tmp = path.with_name(f".{path.name}.tmp.{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """fsync ``directory``: a rename is only durable once the directory entry is on disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
