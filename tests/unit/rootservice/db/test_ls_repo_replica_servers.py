"""ls_repo.replica_servers on both databases: the servers holding replica rows (the
lost-replica checker's cheap pre-check, docs/design/migration.md)."""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db import ls_repo

NOW = 1_767_225_600_000_000


def meta(unit_id: int) -> dict[str, object]:
    return {
        "sql_port": 4001,
        "role": ls_repo.ROLE_FOLLOWER,
        "member_list": "",
        "proposal_id": 1,
        "replica_status": "NORMAL",
        "unit_id": unit_id,
        "zone": "z1",
        "paxos_replica_number": 3,
        "data_size": 0,
        "required_size": 0,
    }


def test_each_server_once(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert ls_repo.replica_servers(conn) == set()
    with engine.begin() as conn:
        ls_repo.upsert_ls_meta(
            conn,
            {
                (1001, 1001, "127.0.0.1", 3001): meta(1),
                (1001, 1002, "127.0.0.1", 3001): meta(1),
                (1001, 1001, "127.0.0.1", 3002): meta(2),
            },
            {},
            NOW,
        )
    with engine.connect() as conn:
        assert ls_repo.replica_servers(conn) == {("127.0.0.1", 3001), ("127.0.0.1", 3002)}
