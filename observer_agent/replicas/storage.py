"""A replica's files on disk: names and paths, the data file, its checksum and ``meta.json``
(docs/design/migration.md).

A replica is three things on disk:

- ``DATA_DIR/replicas/<tenant_id>_<ls_id>/data``: ``replica_size`` bytes of pseudo-random
  content seeded from ``(tenant_id, ls_id)``, so every member of an LS holds an identical file
  and reports the same ``data_checksum`` (crc32);
- ``DATA_DIR/replicas/<tenant_id>_<ls_id>/meta.json``: unit_id, member_list, leader, term,
  paxos_replica_number, replica_type (plus data_size and data_checksum), written atomically;
- ``DATA_DIR/clog/<tenant_id>_<ls_id>/log``: the applied log entries (see
  :mod:`observer_agent.replicas.log`), under ``clog`` so that ``log_disk_in_use`` counts them.

Everything here is blocking file I/O: callers on the event loop run it in a thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import shutil
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from observer_agent.identity import fsync_dir, write_atomic
from observer_agent.resources import CLOG_DIR

REPLICAS_DIR = "replicas"
DATA_FILE = "data"
META_FILE = "meta.json"
LOG_FILE = "log"

_CHUNK = 1 << 20

#: ``(tenant_id, ls_id)``.
Key = tuple[int, int]


def replica_name(tenant_id: int, ls_id: int) -> str:
    """``"<tenant_id>_<ls_id>"``: the directory name of a replica (data and clog)."""
    return f"{tenant_id}_{ls_id}"


def parse_name(name: str) -> Key | None:
    """The ``(tenant_id, ls_id)`` of a directory named by :func:`replica_name`, or None when
    ``name`` is not such a name."""
    tenant, sep, ls = name.partition("_")
    if not sep or not tenant.isdigit() or not ls.isdigit():
        return None
    return int(tenant), int(ls)


def describe_ls(key: Key) -> str:
    """``"tenant 1001 ls 1"``, for messages."""
    return f"tenant {key[0]} ls {key[1]}"


class ReplicaPaths:
    """Where the replicas of the agent whose data directory is ``data_dir`` keep their files."""

    def __init__(self, data_dir: Path) -> None:
        """Paths under ``data_dir``; nothing is read or created."""
        self.data_dir = Path(data_dir)

    @property
    def replicas_root(self) -> Path:
        """``DATA_DIR/replicas``."""
        return self.data_dir / REPLICAS_DIR

    @property
    def clog_root(self) -> Path:
        """``DATA_DIR/clog``: the replicas' logs (counted as ``log_disk_in_use``)."""
        return self.data_dir / CLOG_DIR

    def replica_dir(self, key: Key) -> Path:
        """``DATA_DIR/replicas/<tenant_id>_<ls_id>`` (data file and meta.json)."""
        return self.replicas_root / replica_name(*key)

    def log_path(self, key: Key) -> Path:
        """``DATA_DIR/clog/<tenant_id>_<ls_id>/log``."""
        return self.clog_root / replica_name(*key) / LOG_FILE

    def remove_files(self, keys: Iterable[Key]) -> None:
        """Remove the directories (data and clog) of ``keys``; blocking, raises ``OSError``
        except for what is already gone: a cancelled copy may still be removing its own
        temp file (or the whole directory) while this runs, and gone is what is wanted."""
        for key in keys:
            for d in (self.replica_dir(key), self.log_path(key).parent):
                if d.exists():
                    shutil.rmtree(d, onerror=_gone_is_fine)


def _gone_is_fine(func: object, path: str, exc_info: tuple[type[BaseException], Any, Any]) -> None:
    """``shutil.rmtree``'s error handler: a path removed meanwhile by someone else is not an
    error; anything else is raised."""
    if issubclass(exc_info[0], FileNotFoundError):
        return
    raise exc_info[1]


# ---------------------------------------------------------------------------- data file


def _data_rng(tenant_id: int, ls_id: int) -> random.Random:
    # A str seed is hashed with SHA-512 by random.seed: the same bytes in every process.
    return random.Random(f"ob-ls-replica:{tenant_id}:{ls_id}")


def build_data_file(path: Path, size: int, tenant_id: int, ls_id: int) -> int:
    """Write the data file of replica ``(tenant_id, ls_id)``: ``size`` bytes, identical on
    every member; returns its crc32. Blocking (run it in a thread).

    Written to a unique temp name and renamed, so two builds racing (a cancelled request and
    its retry) never mix their bytes. Raises ``OSError``.
    """
    rng = _data_rng(tenant_id, ls_id)
    crc = 0
    tmp = path.with_name(f".{path.name}.tmp.{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            left = size
            while left > 0:
                block = rng.randbytes(min(_CHUNK, left))
                crc = zlib.crc32(block, crc)
                f.write(block)
                left -= len(block)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
    return crc


def file_checksum(path: Path) -> tuple[int, int]:
    """``(size in bytes, crc32)`` of a file. Blocking; raises ``OSError``."""
    crc = 0
    size = 0
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            crc = zlib.crc32(block, crc)
            size += len(block)
    return size, crc


def checksum_or_missing(path: Path) -> tuple[int, int]:
    """:func:`file_checksum`, or ``(-1, 0)`` when the file does not exist. Blocking; raises
    ``OSError`` for other failures."""
    try:
        return file_checksum(path)
    except FileNotFoundError:
        return -1, 0


# ---------------------------------------------------------------------------- meta


@dataclass(frozen=True)
class ReplicaMeta:
    """What ``meta.json`` keeps of one replica.

    ``member_list`` is sorted ``ip:port`` strings; ``leader`` is "" when the LS has none;
    ``term`` only grows; ``data_size`` (bytes) and ``data_checksum`` (crc32) describe the
    data file as built. ``copy_from`` is non-empty while a replica built by copy has not
    caught up its log yet: it is the member copied, and ``catch_up_to`` the log index to
    reach before the replica is in service (the source's ``log_end_index`` at the copy).
    """

    tenant_id: int
    ls_id: int
    unit_id: int
    member_list: tuple[str, ...]
    leader: str
    term: int
    paxos_replica_number: int
    replica_type: str
    data_size: int
    data_checksum: int
    copy_from: str = ""
    catch_up_to: int = 0

    @property
    def key(self) -> Key:
        """``(tenant_id, ls_id)``."""
        return (self.tenant_id, self.ls_id)

    def to_json(self) -> str:
        """The file's content: one JSON object with every field."""
        d = dataclasses.asdict(self)
        d["member_list"] = list(self.member_list)
        return json.dumps(d, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, raw: str) -> ReplicaMeta:
        """Parse :meth:`to_json`'s output; raises ``ValueError`` / ``KeyError`` / ``TypeError``
        when it is malformed."""
        d = json.loads(raw)
        return cls(
            tenant_id=int(d["tenant_id"]),
            ls_id=int(d["ls_id"]),
            unit_id=int(d["unit_id"]),
            member_list=tuple(sorted(str(m) for m in d["member_list"])),
            leader=str(d["leader"]),
            term=int(d["term"]),
            paxos_replica_number=int(d["paxos_replica_number"]),
            replica_type=str(d["replica_type"]),
            data_size=int(d["data_size"]),
            data_checksum=int(d["data_checksum"]),
            # Absent from files written before replica migration existed.
            copy_from=str(d.get("copy_from", "")),
            catch_up_to=int(d.get("catch_up_to", 0)),
        )


def write_meta(directory: Path, meta: ReplicaMeta) -> None:
    """Write ``directory/meta.json`` atomically (blocking; raises ``OSError``)."""
    write_atomic(directory / META_FILE, meta.to_json().encode("utf-8"))


def read_meta(directory: Path) -> ReplicaMeta:
    """Read ``directory/meta.json``. Raises ``OSError`` (e.g. ``FileNotFoundError``) or
    ``ValueError`` when it is malformed."""
    raw = (directory / META_FILE).read_text(encoding="utf-8")
    try:
        return ReplicaMeta.from_json(raw)
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed {directory / META_FILE}: {e!r}") from e
