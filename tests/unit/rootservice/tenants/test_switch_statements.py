"""SWITCH REPLICA {LEADER | FOLLOWER | DEFAULT} and SWITCH ROOTSERVICE LEADER through the
statement path of a whole RootService (parse, gate, executor), on both databases: what the
statements answer and record, and their refusals (nothing recorded)."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.servers.status import HeartbeatStatus
from tests.support.tenants import A, C, make_tenant, report_all, rows, sql

PREFS = (
    "SELECT tenant_id, ls_id, manual_leader_server, blacklist FROM __all_ls_election_reference_info"
)


def refused(rs: RootService, text: str) -> ObError:
    with pytest.raises(ObError) as e:
        sql(rs, text)
    return e.value


def test_switch_replica_records_and_refuses(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    resp = sql(rs, f"ALTER SYSTEM SWITCH REPLICA FOLLOWER LS = 1001 SERVER = '{C}' TENANT = t1")
    assert (resp.affected_rows, resp.info) == (1, "recorded")
    assert [tuple(r.values()) for r in rows(rs, PREFS)] == [(tid, 1001, "", C)]
    # TENANT left out: the one tenant with that log stream.
    resp = sql(rs, f"ALTER SYSTEM SWITCH REPLICA DEFAULT LS 1001 SERVER '{C}'")
    assert rows(rs, PREFS) == []
    for text, name, message in (
        (
            f"ALTER SYSTEM SWITCH REPLICA LEADER LS 1001 SERVER '{C}' TENANT nobody",
            "OB_TENANT_NOT_EXIST",
            "nobody",
        ),
        (
            "ALTER SYSTEM SWITCH REPLICA FOLLOWER LS 1001 SERVER '10.9.9.9:1' TENANT t1",
            "OB_ENTRY_NOT_EXIST",
            "server not in cluster",
        ),
        (
            f"ALTER SYSTEM SWITCH REPLICA LEADER LS 1002 SERVER '{C}' TENANT t1",
            "OB_ENTRY_NOT_EXIST",
            "log stream 1002",
        ),
        (
            f"ALTER SYSTEM SWITCH REPLICA LEADER LS 7 SERVER '{C}'",
            "OB_INVALID_ARGUMENT",
            "0 tenants have log stream 7",
        ),
    ):
        e = refused(rs, text)
        assert e.name == name and message in e.message, (text, e)
    rs.whitelist.with_server(C, lambda s: setattr(s, "hb_status", HeartbeatStatus.LEASE_EXPIRED))
    e = refused(rs, f"ALTER SYSTEM SWITCH REPLICA LEADER LS 1001 SERVER '{C}' TENANT t1")
    assert e.name == "OB_OP_NOT_ALLOW" and "server not active which is not allowed" in e.message
    assert rows(rs, PREFS) == []


def test_switch_rootservice_refusals(rs: RootService) -> None:
    e = refused(rs, f"ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER '{rs.rpc_addr}'")
    assert e.name == "OB_OP_NOT_ALLOW" and "the leader already" in e.message
    e = refused(rs, f"ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER = '{A}'")
    assert e.name == "OB_ENTRY_NOT_EXIST" and A in e.message
    assert rs.term.epoch != 0
