"""A replica's files (observer_agent.replicas.storage): the data file is identical on every
member and distinct per LS."""

from __future__ import annotations

import os
import shutil
import zlib
from pathlib import Path
from typing import Any

import pytest

from observer_agent.replicas.storage import ReplicaPaths, build_data_file, file_checksum
from tests.unit.observer_agent.replicas.helpers import LS, SMALL, T


def test_data_file_identical_across_members_and_distinct_per_ls(tmp_path: Path) -> None:
    paths = [tmp_path / f"m{i}" for i in range(3)]
    crcs = []
    for p in paths:
        p.mkdir()
        crcs.append(build_data_file(p / "data", SMALL + 123, T, LS))
    assert len(set(crcs)) == 1
    assert paths[0].joinpath("data").read_bytes() == paths[2].joinpath("data").read_bytes()
    assert file_checksum(paths[1] / "data") == (SMALL + 123, crcs[0])
    assert crcs[0] == zlib.crc32(paths[1].joinpath("data").read_bytes())
    other = build_data_file(tmp_path / "other", SMALL + 123, T, LS + 1)
    assert other != crcs[0]
    assert not list(tmp_path.glob("m0/.*"))  # no temp file left behind


def test_removing_files_that_vanish_meanwhile_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drop removes a replica's directories while the copy it cancelled may still be
    removing its own temp file: a path gone between the check and the removal is what the
    drop wants, not ``OB_ERR_SYS`` (a CI run failed a drop with "No such file or directory"
    on the replica's directory). Any other error is still raised."""
    paths = ReplicaPaths(tmp_path)
    key = (T, LS)
    d = paths.replica_dir(key)
    d.mkdir(parents=True)
    (d / "data.tmp").write_bytes(b"x")
    real_rmtree = shutil.rmtree

    def another_remover_first(path: Any, *args: Any, **kwargs: Any) -> None:
        # The cancelled copy's cleanup wins the race: the directory is gone by the time
        # this removal walks it.
        real_rmtree(path)
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", another_remover_first)
    paths.remove_files([key])
    assert not d.exists()

    # Any other error still fails the removal (and so the drop).
    d.mkdir()

    def denied(path: Any, *args: Any, onerror: Any = None, **kwargs: Any) -> None:
        try:
            raise PermissionError(13, "Permission denied", str(path))
        except PermissionError as e:
            onerror(os.rmdir, str(path), (type(e), e, e.__traceback__))

    monkeypatch.setattr(shutil, "rmtree", denied)
    with pytest.raises(PermissionError):
        paths.remove_files([key])
