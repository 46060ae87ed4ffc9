"""Parameters built from their collaborators, without a RootService (docs/design/index.md#configuration;
rootservice.parameters): the precedence of sources, ALTER SYSTEM SET and SHOW PARAMETERS."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.db import param_repo
from rootservice.parameters import Parameters, sql_like
from tests.support.tenant_parts import take_office

S = 1_000_000


class Listener:
    def __init__(self) -> None:
        self.heard: list[set[str]] = []

    def parameters_changed(self, names: set[str]) -> None:
        self.heard.append(set(names))


def make(engine: sa.Engine, tmp_path: Path, **flags: str) -> tuple[Parameters, Listener]:
    clock = FakeClock()
    term, store = take_office(engine, clock)
    settings = RsSettings(data_dir=tmp_path, db_url="sqlite://", **flags)  # type: ignore[arg-type]
    listener = Listener()
    return Parameters(settings, flags, term, store, clock, listener), listener


def test_flags_win_over_the_table_which_wins_over_defaults(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p, listener = make(engine, tmp_path, lease_time="20s")
    p.apply_table({"lease_time": "30s", "server_check_interval": "45s", "rpc_timeout": "soon"})
    assert p.settings.lease_time == 20 * S  # the flag
    assert p.settings.server_check_interval == 45 * S  # the table
    assert p.settings.rpc_timeout == 2 * S  # a bad table value is ignored: the default
    assert p.sources["lease_time"] == "command line"
    assert p.sources["server_check_interval"] == "__all_sys_parameter"
    assert p.sources["rpc_timeout"] == "default"
    assert listener.heard and "server_check_interval" in listener.heard[-1]


def test_a_table_that_breaks_an_invariant_changes_nothing(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p, _ = make(engine, tmp_path)
    with pytest.raises(ValueError, match="invalid"):
        p.apply_table({"lease_time": "1m", "server_permanent_offline_time": "30s"})
    assert p.settings.lease_time == 10 * S


def test_set_writes_applies_and_tells_the_listener(engine: sa.Engine, tmp_path: Path) -> None:
    p, listener = make(engine, tmp_path)
    p.set((("heartbeat_check_interval", "200ms"), ("LEASE_TIME", "12s")))
    assert (p.settings.heartbeat_check_interval, p.settings.lease_time) == (200_000, 12 * S)
    assert listener.heard[-1] == {"heartbeat_check_interval", "lease_time"}
    with engine.connect() as conn:
        params = param_repo.load_params(conn)
    assert (params["lease_time"], params["heartbeat_check_interval"]) == ("12s", "200ms")
    rows = {r[0]: r for r in p.show("%interval")}
    assert rows["heartbeat_check_interval"][1:5] == (
        "200ms",
        "100ms",
        "[10ms, 10s]",
        "__all_sys_parameter",
    )
    assert "lease_time" not in rows


def test_a_refused_set_changes_nothing(engine: sa.Engine, tmp_path: Path) -> None:
    p, listener = make(engine, tmp_path)
    for items, code in (
        ((("lease_time", "12s"), ("no_such", "1s")), "OB_ERR_SYS_CONFIG_UNKNOWN"),
        ((("lease_time", "1s"),), "OB_INVALID_CONFIG"),  # not > heartbeat_interval
        ((("lease_time", 1.5),), "OB_INVALID_CONFIG"),
    ):
        with pytest.raises(ObError) as e:
            p.set(items)
        assert e.value.name == code
    assert p.settings.lease_time == 10 * S and listener.heard == []
    with engine.connect() as conn:
        assert "lease_time" not in param_repo.load_params(conn)


def test_sql_like() -> None:
    assert sql_like("lease_time", "LEASE%") and sql_like("lease_time", "lease_tim_")
    assert not sql_like("lease_time", "lease") and sql_like("a*b", "a*b")
    assert not sql_like("axb", "a*b")


def test_a_choice_parameter_from_the_table_and_set(engine: sa.Engine, tmp_path: Path) -> None:
    p, listener = make(engine, tmp_path)
    p.apply_table({"balancer_planner": "LOCAL"})
    assert p.settings.balancer_planner == "local"
    assert p.sources["balancer_planner"] == "__all_sys_parameter"
    p.apply_table({"balancer_planner": "hadoop"})  # logged and ignored
    assert p.settings.balancer_planner == "local"
    with pytest.raises(ObError) as e:
        p.set([("balancer_planner", "yarn")])
    assert e.value.name == "OB_INVALID_CONFIG"
    p.set([("balancer_planner", "spark")])
    assert p.settings.balancer_planner == "spark" and listener.heard[-1] == {"balancer_planner"}
    [row] = p.show("balancer_planner")
    assert row[1:4] == ("spark", "spark", "{spark, local}")


def test_migration_max_bytes_per_second_is_a_size(engine: sa.Engine, tmp_path: Path) -> None:
    """Written as OceanBase's capacities ('64M', a plain byte count), kept
    and shown as a size, range [0, 10000G] (OceanBase's standby_fetch_log_bandwidth_limit),
    0 = unlimited (the default); malformed, negative, too large or fractional values are
    refused and change nothing."""
    p, listener = make(engine, tmp_path)
    assert p.settings.migration_max_bytes_per_second == 0
    [row] = p.show("migration_max%")
    assert row[:5] == ("migration_max_bytes_per_second", "0", "0", "[0, 10000G]", "default")
    p.set((("migration_max_bytes_per_second", "64M"),))
    assert p.settings.migration_max_bytes_per_second == 64 << 20
    assert listener.heard[-1] == {"migration_max_bytes_per_second"}
    with engine.connect() as conn:
        assert param_repo.load_params(conn)["migration_max_bytes_per_second"] == "64M"
    assert p.show("migration_max%")[0][1:5] == ("64M", "0", "[0, 10000G]", "__all_sys_parameter")
    p.set((("migration_max_bytes_per_second", 1000),))
    assert p.settings.migration_max_bytes_per_second == 1000
    p.set((("migration_max_bytes_per_second", "10000G"),))  # the upper bound itself
    p.set((("migration_max_bytes_per_second", 0),))
    assert p.settings.migration_max_bytes_per_second == 0
    for bad, why in (
        ("-1M", "must not be negative"),
        ("10001G", "out of range [0, 10000G]"),
        ("fast", "invalid size"),
        ("10s", "invalid size"),
        (1.5, "write a size such as '64M'"),
    ):
        with pytest.raises(ObError) as e:
            p.set((("migration_max_bytes_per_second", bad),))
        assert e.value.name == "OB_INVALID_CONFIG" and why in e.value.message, e.value.message
    assert p.settings.migration_max_bytes_per_second == 0

    # A value kept in the table is taken at start (and a bad one ignored).
    q, _ = make(engine, tmp_path)
    q.apply_table({"migration_max_bytes_per_second": "512K"})
    assert q.settings.migration_max_bytes_per_second == 512 << 10
    q.apply_table({"migration_max_bytes_per_second": "lots"})
    assert q.settings.migration_max_bytes_per_second == 512 << 10
