"""Fixtures of the server-layer tests: ``rs``, an in-process RS with the SEEDED cluster loaded
(tests.support.harness.make_rs), shut down afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rootservice.app import RootService
from tests.support.harness import make_rs


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path)
    yield r
    r.shutdown()
