"""A replica's files (observer_agent.replicas.storage): the data file is identical on every
member and distinct per LS."""

from __future__ import annotations

import zlib
from pathlib import Path

from observer_agent.replicas.storage import build_data_file, file_checksum
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
