"""Fixtures of the tenant-layer tests: ``rs`` (a whole RootService,
:func:`tests.support.tenants.make_tenant_rs`) and ``layer`` (the tenant classes alone,
:func:`tests.support.tenant_parts.build_layer`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from rootservice.app import RootService
from tests.support.tenant_parts import Layer, build_layer
from tests.support.tenants import make_tenant_rs


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    """An RS with short tenant timings and servers A..D heartbeating; shut down after."""
    r = make_tenant_rs(db_url, tmp_path)
    yield r
    r.shutdown()


@pytest.fixture
def layer(engine: sa.Engine, tmp_path: Path) -> Layer:
    """The tenant layer in office on ``engine``, four alive servers, in-memory agents."""
    return build_layer(engine, tmp_path)
