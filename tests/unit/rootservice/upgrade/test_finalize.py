"""ALTER SYSTEM END ROLLING UPGRADE and the cluster version as a parameter: refused (with what
blocks named, nothing changed) until every server and root service reports this release, then
raised once, never lowered; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from obcommon.releases import Release
from rootservice.app import RootService
from rootservice.db import cluster_version_repo
from rootservice.db.schema_upgrade import contract, contract_level, upgrade_at_start
from rootservice.upgrade.finalize import Finalize
from tests.support.harness import SEEDED, A, events, hb, make_rs
from tests.support.tenants import sql
from tests.unit.rootservice.db.test_schema_upgrade import newer_migrations

NEW = "0.2.0_ob-rootservice-py"


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def stored(rs: RootService) -> Release:
    with rs.store.engine.connect() as conn:
        return cluster_version_repo.get(conn)


def heartbeat(rs: RootService, build_version: str, servers: list[tuple[str, str]]) -> None:
    for server, zone in servers:
        rs.heartbeats.receive_hb(hb(server, zone, build_version=build_version))


def refused(rs: RootService, statement: str) -> ObError:
    with pytest.raises(ObError) as e:
        sql(rs, statement)
    return e.value


END = "ALTER SYSTEM END ROLLING UPGRADE"


def test_refused_while_a_server_runs_the_old_release_or_never_reported(rs: RootService) -> None:
    heartbeat(rs, NEW, SEEDED[1:])
    err = refused(rs, END)
    assert err.name == "OB_OP_NOT_ALLOW"
    assert f"server '{A}' has not reported its release" in err.message
    heartbeat(rs, "4.2.0.0-ob-rootservice-py", SEEDED[:1])
    err = refused(rs, END)
    assert f"server '{A}' reports release 0.1.0" in err.message
    assert "must report release 0.2.0" in err.message
    assert stored(rs) == Release(0, 1, 0) and rs.versions.cluster == Release(0, 1, 0)
    assert events(rs, "end_rolling_upgrade") == []


def test_refused_while_an_old_root_service_runs(rs: RootService) -> None:
    heartbeat(rs, NEW, SEEDED)
    now = rs.clock.now_us()
    with rs.store.engine.begin() as conn:
        # A 0.1.0 standby: its rounds write no build version.
        conn.execute(
            sa.text(
                "INSERT INTO __all_rootservice_member (svr_ip, svr_port, last_seen_time) "
                "VALUES ('127.0.0.9', 2882, :t)"
            ),
            {"t": now},
        )
    err = refused(rs, END)
    assert "root service 127.0.0.9:2882 reports release 0.1.0" in err.message
    assert stored(rs) == Release(0, 1, 0)
    # Gone for longer than a lease: no longer running, no longer blocking.
    rs.clock.advance(rs.settings.lease_time + 1)
    heartbeat(rs, NEW, SEEDED)
    assert "raised from 0.1.0 to 0.2.0" in sql(rs, END).info


def test_raises_once_then_is_shown_and_carried_to_agents(rs: RootService) -> None:
    heartbeat(rs, NEW, SEEDED)
    before = sql(rs, "SHOW PARAMETERS LIKE 'min_observer_version'").rows
    cells = [c.string_value for c in before[0].cells]
    # OceanBase's SHOW PARAMETERS columns: name 5th, value 7th.
    # In OceanBase's four numbers, as GV$OB_PARAMETERS shows it.
    assert [cells[4], cells[6]] == ["min_observer_version", "0.1.0.0"]
    resp = sql(rs, END)
    assert resp.affected_rows == 1 and "raised from 0.1.0 to 0.2.0" in resp.info
    assert stored(rs) == Release(0, 2, 0) and rs.versions.cluster == Release(0, 2, 0)
    [ev] = events(rs, "end_rolling_upgrade")
    assert (ev["value1"], ev["value2"], ev["value3"]) == ("0.2.0", "0.1.0", "0.2.0")
    after = sql(rs, "SHOW PARAMETERS LIKE 'min_observer%'").rows
    cells = [c.string_value for c in after[0].cells]
    assert [cells[4], cells[6]] == ["min_observer_version", "0.2.0.0"]
    assert rs.heartbeats.receive_hb(hb(A, "z1", build_version=NEW)).cluster_version == "0.2.0"
    again = sql(rs, END)
    assert again.affected_rows == 0 and "0.2.0 already" in again.info
    assert len(events(rs, "end_rolling_upgrade")) == 1


def test_the_cluster_version_is_not_a_settable_parameter(rs: RootService) -> None:
    err = refused(rs, "ALTER SYSTEM SET min_observer_version = '0.2.0'")
    assert err.name == "OB_OP_NOT_ALLOW" and "END ROLLING UPGRADE" in err.message
    assert stored(rs) == Release(0, 1, 0)


def test_an_older_leader_never_lowers_it(rs: RootService) -> None:
    heartbeat(rs, NEW, SEEDED)
    with rs.store.engine.begin() as conn:
        cluster_version_repo.raise_to(conn, Release(0, 3, 0), 1)
    err = refused(rs, END)
    assert "above this root service's release 0.2.0" in err.message
    assert stored(rs) == Release(0, 3, 0)


def test_the_contract_migrations_run_once_the_version_rose(rs: RootService, tmp_path: Path) -> None:
    """A newer release's contract migration waits for END ROLLING UPGRADE (its starting RS
    only expanded the schema), runs then, and a failed one is run again by the statement."""
    loc = newer_migrations(tmp_path)
    engine = rs.store.engine
    assert upgrade_at_start(engine, loc) == "9001"  # the newer release started
    calls: list[list[str]] = []

    def contract_newer() -> list[str]:
        if not calls:
            calls.append([])
            raise sa.exc.OperationalError("ALTER TABLE", {}, Exception("database went away"))
        calls.append(contract(engine, loc))
        return calls[-1]

    f = Finalize(
        rs.versions,
        rs.whitelist,
        rs.store,
        rs.clock,
        lambda: rs.settings.lease_time,
        contract=contract_newer,
    )
    heartbeat(rs, NEW, SEEDED)
    with pytest.raises(ObError) as e:
        f.end_rolling_upgrade()
    assert e.value.name == "OB_ERR_SYS" and "contract migrations failed" in e.value.message
    assert stored(rs) == Release(0, 2, 0)  # the version rose; the contract did not run
    with engine.connect() as conn:
        assert contract_level(conn) == 0
    assert f.end_rolling_upgrade() == (Release(0, 2, 0), Release(0, 2, 0))
    assert calls[-1] == ["9002", "9003"]
    with engine.connect() as conn:
        assert contract_level(conn) == 1
