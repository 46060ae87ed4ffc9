"""The ``rs`` fixture of the tenant-layer tests: :func:`tests.support.tenants.make_tenant_rs`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rootservice.app import RootService
from tests.support.tenants import make_tenant_rs


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    """An RS with short tenant timings and servers A..D heartbeating; shut down after."""
    r = make_tenant_rs(db_url, tmp_path)
    yield r
    r.shutdown()
