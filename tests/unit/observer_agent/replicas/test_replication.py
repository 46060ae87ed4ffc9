"""Log replication between real in-process agents over gRPC
(observer_agent.replicas.replication): the leader appends, followers catch up and switch
leader, a new leader catches up from its predecessor or answers OB_TIMEOUT."""

from __future__ import annotations

import asyncio
from pathlib import Path

from obcommon.proto import obrpc_pb2
from observer_agent.replicas.faults import FAULT_LOG_FREEZE_FILE, FAULT_REPLICATION_STOP_FILE
from tests.support.ports import free_port
from tests.unit.observer_agent.helpers import run, wait_until
from tests.unit.observer_agent.replicas.helpers import (
    KEY,
    LS,
    Node,
    T,
    drop,
    end_index,
    entries,
    nodes,
    spec,
    upsert,
)


def test_three_agents_leader_appends_followers_catch_up_and_switch(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with nodes(tmp_path, 3) as (a, b, c):
            members = sorted(n.addr for n in (a, b, c))
            for n in (a, b, c):
                resp = await n.apply(upsert(spec(members, a.addr, 1)))
                assert resp.error.code == 0, resp.error
            assert {n.report().data_checksum for n in (a, b, c)} == {a.report().data_checksum}
            assert a.report().role == obrpc_pb2.LEADER and b.report().role == obrpc_pb2.FOLLOWER

            await wait_until(lambda: min(end_index(b), end_index(c)) >= 10, "followers at 10")
            upto = min(end_index(b), end_index(c))
            assert entries(b, upto) == entries(c, upto) == entries(a, upto)
            assert [e[0] for e in entries(a, upto)] == list(range(1, upto + 1))
            assert {e[1] for e in entries(a, upto)} == {1}
            info = b.report()
            assert info.log_end_index == upto or info.log_end_index > upto
            assert info.log_end_ts == entries(b)[-1][2] and info.term == 1
            assert info.required_size == info.data_size + 24 * (1 + info.log_end_index)

            # The leader refuses followers that claim a newer term; a follower refuses all.
            r = await a.replica_stub.FetchLog(
                obrpc_pb2.FetchLogRequest(tenant_id=T, ls_id=LS, from_index=1, term=2), timeout=5
            )
            assert r.error.name == "OB_NOT_MASTER" and (r.term, r.leader) == (1, a.addr)
            r = await c.replica_stub.FetchLog(
                obrpc_pb2.FetchLogRequest(
                    tenant_id=T, ls_id=LS, from_index=1, term=1, follower=b.addr
                ),
                timeout=5,
            )
            assert r.error.name == "OB_NOT_MASTER"
            r = await a.replica_stub.FetchLog(
                obrpc_pb2.FetchLogRequest(
                    tenant_id=T, ls_id=LS, from_index=3, max_entries=2, term=1
                ),
                timeout=5,
            )
            assert r.error.code == 0 and [e.index for e in r.entries] == [3, 4]

            # b stops fetching and falls behind.
            (b.agent.data_dir / FAULT_REPLICATION_STOP_FILE).touch()
            await asyncio.sleep(0.3)  # > one poll: the switch file has been seen
            stuck = end_index(b)
            await wait_until(lambda: end_index(a) >= stuck + 8, "the leader to go on")
            assert end_index(b) == stuck
            assert a.report().log_end_ts - b.report().log_end_ts >= 7 * 50_000 * 0.9

            # Leader switch a -> b, demoting a first: a's answer tells its final end.
            demoted = await a.apply(upsert(spec(members, b.addr, 2)))
            assert demoted.error.code == 0
            final = demoted.replicas[0].log_end_index
            assert demoted.replicas[0].role == obrpc_pb2.FOLLOWER and final > stuck
            promoted = await b.apply(
                upsert(spec(members, b.addr, 2, catch_up_index=final, catch_up_from=a.addr))
            )
            assert promoted.error.code == 0, promoted.error
            p = promoted.replicas[0]
            assert (p.role, p.term, p.leader) == (obrpc_pb2.LEADER, 2, b.addr)
            assert p.log_end_index >= final
            assert entries(b, final) == entries(a, final)  # nothing acknowledged was lost
            assert (await c.apply(upsert(spec(members, b.addr, 2)))).error.code == 0
            (b.agent.data_dir / FAULT_REPLICATION_STOP_FILE).unlink()  # b is leader now anyway

            await wait_until(
                lambda: min(end_index(a), end_index(c)) >= final + 10, "everyone past the switch"
            )
            upto = min(end_index(a), end_index(c))
            assert entries(a, upto) == entries(b, upto) == entries(c, upto)
            terms = [e[1] for e in entries(b, upto)]
            assert terms == sorted(terms) and terms[-1] == 2 and terms[0] == 1
            assert all(n.report().term == 2 and n.report().leader == b.addr for n in (a, b, c))

            # A spec with a lower term is ignored.
            old = await b.apply(upsert(spec(members, a.addr, 1)))
            assert old.error.code == 0 and (old.replicas[0].term, old.replicas[0].leader) == (
                2,
                b.addr,
            )

            # Leaderless: nobody appends.
            for n in (a, b, c):
                assert (await n.apply(upsert(spec(members, "", 3)))).error.code == 0
            await asyncio.sleep(0.1)
            frozen = [end_index(n) for n in (a, b, c)]
            await asyncio.sleep(0.3)
            assert [end_index(n) for n in (a, b, c)] == frozen

            # Drop on c: its files go, the others keep theirs.
            gone = await c.apply(drop())
            assert gone.error.code == 0 and list(gone.replicas) == []
            assert not (c.agent.data_dir / "replicas" / f"{T}_{LS}").exists()
            assert not (c.agent.data_dir / "clog" / f"{T}_{LS}").exists()
            assert a.agent.replicas.keys() == [KEY]

    run(scenario())


async def _a_leads_then_b_takes_term_2(a: Node, b: Node, *, cut_a: bool = False) -> list[str]:
    """a leads term 1 with b following; then b is promoted to term 2, catching up from a,
    before a is told anything (``cut_a``: a also stops fetching). Returns the members."""
    members = sorted([a.addr, b.addr])
    for n in (a, b):
        assert (await n.apply(upsert(spec(members, a.addr, 1)))).error.code == 0
    await wait_until(lambda: end_index(b) >= 5, "b following a")
    if cut_a:
        (a.agent.data_dir / FAULT_REPLICATION_STOP_FILE).touch()  # a hears from nobody
    known = a.report().log_end_index
    promoted = await b.apply(
        upsert(spec(members, b.addr, 2, catch_up_index=known, catch_up_from=a.addr))
    )
    assert promoted.error.code == 0 and promoted.replicas[0].log_end_index >= known
    return members


def test_promoted_before_old_leader_is_told_old_leader_converges(tmp_path: Path) -> None:
    """The RS tells the new leader first: the old one appends a few more entries at the old
    term, which differ from the new leader's; once it follows, they are replaced."""

    async def scenario() -> None:
        async with nodes(tmp_path, 2) as (a, b):
            members = await _a_leads_then_b_takes_term_2(a, b)
            switch = end_index(b)
            await wait_until(lambda: end_index(a) >= switch + 4, "a diverging at term 1")
            await wait_until(lambda: end_index(b) >= switch + 2, "b appending at term 2")
            assert entries(a)[switch][1] == 1 and entries(b)[switch][1] == 2
            assert (await a.apply(upsert(spec(members, b.addr, 2)))).error.code == 0
            await wait_until(
                lambda: end_index(a) >= switch + 8 and entries(a)[switch][1] == 2,
                "a converging on b's log",
            )
            upto = min(end_index(a), end_index(b))
            assert entries(a, upto) == entries(b, upto)
            assert entries(a, switch) == entries(b, switch)

    run(scenario())


def test_a_deposed_leader_with_the_longer_log_promoted_again_drops_its_old_tail(
    tmp_path: Path,
) -> None:
    """a leads term 1; b takes term 2 while a, not told (cut off), appends on at term 1, more
    entries than b writes. Leadership comes back to a at term 3 with b's final index: a's
    log is longer than that index, yet its tail past the switch is term 1's, not b's. a must
    take b's entries (what b wrote at term 2 may have been acknowledged) and drop its own,
    not lead with them (found by the partition scenario of an isolated leading agent)."""

    async def scenario() -> None:
        async with nodes(tmp_path, 2) as (a, b):
            members = await _a_leads_then_b_takes_term_2(a, b, cut_a=True)
            switch = end_index(b)
            await wait_until(lambda: end_index(b) >= switch + 2, "b appending at term 2")
            (b.agent.data_dir / FAULT_LOG_FREEZE_FILE).touch()  # b writes no more
            await wait_until(lambda: end_index(a) >= end_index(b) + 4, "a's term-1 tail longer")
            assert entries(a)[switch][1] == 1 and entries(b)[switch][1] == 2
            demoted = await b.apply(upsert(spec(members, a.addr, 3)))
            assert demoted.error.code == 0
            final = demoted.replicas[0].log_end_index
            back = await a.apply(
                upsert(spec(members, a.addr, 3, catch_up_index=final, catch_up_from=b.addr))
            )
            assert back.error.code == 0, back.error
            # b's entries are a's now, up to b's last one; after it come a's term-3 ones.
            assert entries(a, final) == entries(b, final)
            assert all(e[1] == 3 for e in entries(a)[final:])

    run(scenario())


def test_catch_up_that_cannot_finish_answers_ob_timeout(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with nodes(tmp_path, 1, rpc_timeout="300ms") as (a,):
            dead = f"127.0.0.1:{free_port()}"
            members = sorted([a.addr, dead])
            assert (await a.apply(upsert(spec(members, dead, 1)))).error.code == 0
            resp = await a.apply(
                upsert(spec(members, a.addr, 2, catch_up_index=50, catch_up_from=dead))
            )
            assert resp.error.name == "OB_TIMEOUT"
            assert f"tenant {T} ls {LS}" in resp.error.message and dead in resp.error.message
            r = resp.replicas[0]
            assert (r.term, r.leader, r.role, r.log_end_index) == (
                1,
                dead,
                obrpc_pb2.FOLLOWER,
                0,
            )
            nosrc = await a.apply(upsert(spec(members, a.addr, 2, catch_up_index=50)))
            assert nosrc.error.name == "OB_TIMEOUT" and "no catch_up_from" in nosrc.error.message
            # Without anything to catch up it leads at once.
            lead = await a.apply(upsert(spec(members, a.addr, 2)))
            assert lead.error.code == 0 and lead.replicas[0].role == obrpc_pb2.LEADER
            await wait_until(lambda: end_index(a) >= 3, "the leader appending")
            # Its report is in every lease request.
            [hb] = a.agent.build_lease_request().replicas
            assert (hb.role, hb.term, hb.leader) == (obrpc_pb2.LEADER, 2, a.addr)
            assert hb.log_end_index >= 3 and hb.log_end_ts > 0

    run(scenario())
