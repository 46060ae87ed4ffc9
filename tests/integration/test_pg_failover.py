"""The PostgreSQL HA recipe (docs/operations/ha.md, "PostgreSQL failover"), with real processes: a primary and
a streaming standby on loopback (tests/support/pg_ha.py), the RS given both in one libpq
multi-host URL with ``target_session_attrs=read-write``, an observer agent, and the failover
an operator (or Patroni) would run: kill -9 of the primary, ``pg_ctl promote`` of the standby.

- Synchronous standby: a leader writes again after the promotion, because the RS saw the
  change of primary (no duration is asserted: the time is recorded), no acknowledged
  statement is lost, epochs only go up, and the old primary restarted writable (listed first
  in the URL) receives no write from the RS.
- Asynchronous standby that missed the tail, two RS processes: the second RS's term (and a
  statement it acknowledged) lives only on the lost tail; the first, restarted without having
  heard the agent, takes office with that very epoch again (another incarnation). The agent
  itself refuses that token (asked directly while the RS is stopped, so that the RS's own
  check of the agent's report cannot be what refused it); then the agent's report of the
  lost term makes the RS refuse the agent and re-take the lease row above it, and only then
  does the agent obey it.

The agent logs every token it obeys other than the one it keeps (``obeying the root service
of epoch N (incarnation X)``), so "no two root services obeyed with one epoch" is read from
its log and would show a second incarnation of one epoch. Every wait is bounded.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from observer_agent.fence import TOKEN_FILE
from tests.integration.test_ha import LEASE_S, HaCluster, execute_on, metrics
from tests.support import pki
from tests.support.agent_probe import PROBE_RS, obeyed_token
from tests.support.cluster import ProcSet, wait_until
from tests.support.pg_ha import PgPair
from tests.support.timescale import scaled

pytestmark = pytest.mark.integration

DB = "ob"


class Writer:
    """Runs ``ALTER SYSTEM ADD ZONE 'w<n>'`` against the RS at ``addr``, one at a time, each
    name tried once, and records the acknowledged ones with their monotonic time."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.acked: list[tuple[str, float]] = []
        self.attempts = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # Bounded: two minutes of statements at most, whatever the test does.
        deadline = time.monotonic() + 120
        while not self._stop.is_set() and time.monotonic() < deadline:
            name = f"w{self.attempts}"
            self.attempts += 1
            try:
                resp = execute_on(self.addr, f"ALTER SYSTEM ADD ZONE '{name}'", timeout_s=3)
            except grpc.RpcError:
                resp = None
            if resp is not None and resp.error.code == 0:
                self.acked.append((name, time.monotonic()))
            # A load generator's pace, not a synchronisation.
            self._stop.wait(0.05)

    def acked_after(self, t: float) -> list[str]:
        return [n for n, at in self.acked if at > t]

    def __enter__(self) -> Writer:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(10)


def table(pair_server: Any, query: str) -> list[tuple[Any, ...]]:
    with pair_server.connect(DB) as c:
        return [tuple(r) for r in c.execute(query).fetchall()]


OBEYED = re.compile(r"obeying the root service of epoch (\d+) \(incarnation ([0-9a-f]+)\)")


def obeyed_tokens(log: str) -> list[tuple[int, int]]:
    """The ``(epoch, incarnation)`` tokens an agent obeyed, in order, from its log (one line
    per token obeyed other than the one it kept)."""
    return [(int(e), int(i, 16)) for e, i in OBEYED.findall(log)]


def obeyed_epochs(log: str) -> list[int]:
    """The epochs of :func:`obeyed_tokens`."""
    return [e for e, _ in obeyed_tokens(log)]


def assert_one_root_service_per_epoch(log: str) -> list[tuple[int, int]]:
    """No two incarnations of one epoch obeyed, and never a lower epoch after a higher one:
    the epochs of the obeyed tokens strictly increase. Returns the tokens."""
    tokens = obeyed_tokens(log)
    assert tokens, "the agent obeyed nothing"
    epochs = [e for e, _ in tokens]
    assert all(a < b for a, b in itertools.pairwise(epochs)), tokens
    return tokens


@pytest.fixture
def sync_pair() -> Iterator[PgPair]:
    pair = PgPair(synchronous=True)
    try:
        yield pair
    finally:
        pair.stop()


@pytest.fixture
def async_pair() -> Iterator[PgPair]:
    pair = PgPair(synchronous=False)
    try:
        yield pair
    finally:
        pair.stop()


def start(pair: PgPair, procs: ProcSet, tmp_path: Path) -> tuple[HaCluster, str, str]:
    wait_until(pair.streaming, 30, message="the standby streams")
    pair.primary.create_database(DB)
    c = HaCluster(procs, tmp_path, pair.url(DB), n_rs=1)
    c.start_all_rs()
    leader = c.wait_leader()
    (agent,) = c.bootstrap(1)
    c.wait_full_service(leader)
    return c, leader, agent


def test_sync_standby_failover_loses_nothing_and_fences_the_old_primary(
    sync_pair: PgPair,
    procs: ProcSet,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    pair = sync_pair
    c, rs, agent = start(pair, procs, tmp_path)
    try:
        # (c.lease() and c.db() read through the multi-host URL: the old primary once it is
        # back. The servers are read one by one below.)
        epoch_before = c.lease()[0]
        with Writer(rs) as w:
            wait_until(lambda: len(w.acked) >= 5, 20, message="statements acknowledged")
            pair.kill_primary()
            pair.promote()
            promoted = time.monotonic()
            # A leader writes again (the time is recorded, not asserted) ...
            wait_until(lambda: w.acked_after(promoted), 60, 0.02, message="a write")
            took = min(at for _, at in w.acked if at > promoted) - promoted
            record_property("write_after_promotion_s", round(took, 3))
            print(f"first acknowledged write {took:.3f}s after the promotion")
            # ... through the promoted server, which the RS saw as a change of primary.
            m = metrics(rs)
            assert m is not None and m.get("rs_primary_changes_total", 0) >= 1, m
            assert "the metadata server changed from" in c.rs[rs].log_text()

            # The old primary comes back writable, first in the URL; the RS restarted must
            # reconnect (it remembers the timeline it saw) and still write only to the new one.
            pair.restart_old_primary()
            c.rs[rs].kill()
            c.spawn_rs(rs).wait_healthy(rs, timeout_s=30)
            c.wait_full_service(rs)
            restarted = time.monotonic()
            wait_until(lambda: len(w.acked_after(restarted)) >= 3, 20, message="more writes")
        acked = {n for n, _ in w.acked}
        zones = {z for (z,) in table(pair.standby, "SELECT zone FROM __all_zone")}
        assert acked - zones == set(), "acknowledged statements lost"
        # Not one row written to the old primary since its restart (its statistics restart
        # at 0 after crash recovery), and none of the later statements are there.
        (writes,) = table(
            pair.primary,
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables",
        )[0]
        assert writes == 0
        old_zones = {z for (z,) in table(pair.primary, "SELECT zone FROM __all_zone")}
        assert not set(w.acked_after(restarted)) & old_zones
        assert "below timeline 2" in c.rs[rs].log_text()
        # Epochs strictly increase: in the new primary's history and as the agent obeyed them.
        takes = [
            int(e)
            for (e,) in table(
                pair.standby,
                "SELECT value1 FROM __all_rootservice_event_history "
                "WHERE event = 'rs_take_office' ORDER BY id",
            )
        ]
        assert takes == sorted(set(takes)) and takes[-1] > epoch_before
        ((lease_epoch,),) = table(
            pair.standby, "SELECT value FROM __all_service_epoch WHERE name = 'rootservice_epoch'"
        )
        assert lease_epoch == takes[-1]
        wait_until(
            lambda: obeyed_epochs(c.agents[agent].log_text())[-1] == lease_epoch,
            30,
            message=f"the agent obeyed epoch {lease_epoch}",
        )
        assert_one_root_service_per_epoch(c.agents[agent].log_text())
        record_property("acknowledged", len(acked))
        record_property("attempted", w.attempts)
    finally:
        c.close()


def refused_by_agent(
    c: HaCluster, agent: str, rs: str, offered: FenceToken, kept: FenceToken
) -> float:
    """With the RS at ``rs`` stopped (SIGSTOP) and the paused ``agent`` resumed, ask the
    agent as a root service with ``offered`` (an epoch it obeyed, another incarnation):
    an empty ``ApplyReplicas`` (the command path) and ``RequestHeartbeat`` (the answered
    path). Asserts both are refused with ``OB_RS_NOT_MASTER`` by the agent itself (its
    message names the reuse; ``RequestHeartbeat``'s gRPC status and trailers), and that the
    agent still keeps ``kept`` (the trailers and its token file). The RS is resumed before
    returning, the agent left running. Returns how long the RS was stopped (seconds: it
    must stay below the lease it trusts, or it steps down instead of re-taking)."""
    why = f"{offered} reuses the epoch of {kept} already obeyed"
    # The RS certificate is made and the channel built before the RS stops: its pause is
    # the probe alone.
    with pki.channel(agent, Role.RS, PROBE_RS) as ch:
        stub = obrpc_pb2_grpc.ObserverServiceStub(ch)
        c.rs[rs].pause()
        stopped = time.monotonic()
        try:
            c.agents[agent].resume()
            applied = stub.ApplyReplicas(
                obrpc_pb2.ApplyReplicasRequest(
                    rs_epoch=offered.epoch, rs_incarnation=offered.incarnation
                ),
                timeout=scaled(5),
            )
            answered: obrpc_pb2.LeaseRequest | None = None
            refused: grpc.RpcError | None = None
            try:
                answered = stub.RequestHeartbeat(
                    obrpc_pb2.RequestHeartbeatRequest(
                        rs_epoch=offered.epoch, rs_incarnation=offered.incarnation
                    ),
                    timeout=scaled(5),
                )
            except grpc.RpcError as e:
                refused = e
            # Read before the RS runs again: its re-take makes the agent keep a new token.
            kept_file = json.loads(
                (c.tmp / f"agent-{agent.rsplit(':', 1)[1]}" / TOKEN_FILE).read_text()
            )
        finally:
            c.rs[rs].resume()
            paused = time.monotonic() - stopped
    assert (applied.error.name, applied.error.code) == ("OB_RS_NOT_MASTER", -4638), (
        f"ApplyReplicas with {offered} (the agent keeps {kept}) answered "
        f"{applied.error.name or 'no error'}"
    )
    assert why in applied.error.message, applied.error.message
    assert isinstance(refused, grpc.Call), f"RequestHeartbeat with {offered} answered: {answered}"
    meta = dict(refused.trailing_metadata() or ())
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, (refused.code(), refused.details())
    assert meta.get("ob-name") == "OB_RS_NOT_MASTER", meta
    assert why in (refused.details() or ""), refused.details()
    assert obeyed_token(refused) == kept, meta
    assert FenceToken(kept_file["epoch"], kept_file["incarnation"]) == kept, kept_file
    return paused


def test_async_standby_failover_epoch_reused_refused_and_retaken(
    async_pair: PgPair,
    procs: ProcSet,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    pair = async_pair
    wait_until(pair.streaming, 30, message="the standby streams")
    pair.primary.create_database(DB)
    c = HaCluster(procs, tmp_path, pair.url(DB), n_rs=2)
    try:
        c.start_all_rs()
        first = c.wait_leader()
        (second,) = [a for a in c.rs_addrs if a != first]
        (agent,) = c.bootstrap(1)
        c.wait_full_service(first)
        log = c.agents[agent].log_text
        wait_until(pair.replayed, 20, message="the standby caught up")
        row_epoch = c.lease()[0]

        # From here on nothing reaches the standby. The second RS's term lives on the
        # primary only: the first killed, the second takes office, the agent obeys it, and
        # a statement is acknowledged.
        pair.pause_replication()
        c.rs[first].kill()
        assert c.wait_leader([second], timeout_s=LEASE_S + 30) == second
        c.wait_full_service(second)
        lost = wait_until(
            lambda: [t for t in obeyed_tokens(log()) if t[0] > row_epoch],
            30,
            message="the agent obeyed the second RS",
        )[-1]
        assert lost[0] == row_epoch + 1, (lost, row_epoch)
        c.ok("ALTER SYSTEM ADD ZONE 'lost1'", [second])

        # The agent is paused (it tells nobody what it obeyed), the second RS dies, and the
        # primary with it: the promoted standby holds the first RS's term, below the lost one.
        c.agents[agent].pause()
        c.rs[second].kill()
        pair.kill_primary()
        pair.promote()
        ((standby_epoch,),) = table(
            pair.standby, "SELECT value FROM __all_service_epoch WHERE name = 'rootservice_epoch'"
        )
        assert standby_epoch == row_epoch < lost[0]  # the tail is really lost

        # The first RS, restarted, has heard no agent: it takes office with the lost epoch
        # again, as another incarnation (reports that never arrived cannot prevent it; the
        # re-take repairs it).
        c.spawn_rs(first).wait_healthy(first, timeout_s=30)
        reused = re.compile(rf"won the RS lease with epoch {lost[0]} \(incarnation ([0-9a-f]+)\)")
        m_won = wait_until(
            lambda: reused.search(c.rs[first].log_text()),
            LEASE_S + 60,
            message=f"the first RS takes office with epoch {lost[0]} again",
        )
        assert m_won is not None
        assert int(m_won.group(1), 16) != lost[1]
        c.wait_full_service(first, timeout_s=60)

        # The agent's own fence, apart from the RS's: with the first RS stopped (it cannot
        # hear the agent's report and re-take first), the agent, running again, is asked
        # with the reused token and refuses it, keeping the lost term's token.
        reused_token = FenceToken(lost[0], int(m_won.group(1), 16))
        paused_s = refused_by_agent(c, agent, first, reused_token, FenceToken(*lost))
        record_property("rs_paused_for_the_agent_probe_s", round(paused_s, 3))

        # The agent reports the lost term to the first RS, running again: refused, and the
        # RS re-takes the lease row above it before the agent obeys it.
        retaken = re.compile(
            rf"raised the epoch from epoch {lost[0]} \(incarnation {m_won.group(1)}\) to "
            rf"epoch (\d+) \(incarnation ([0-9a-f]+)\): server {re.escape(agent)} had obeyed "
            rf"epoch {lost[0]} \(incarnation {lost[1]:x}\)"
        )
        m_re = wait_until(
            lambda: retaken.search(c.rs[first].log_text()),
            60,
            message="the first RS re-takes the lease row above the agent's token",
        )
        assert m_re is not None
        new = (int(m_re.group(1)), int(m_re.group(2), 16))
        assert new[0] == lost[0] + 1
        wait_until(lambda: new in obeyed_tokens(log()), 30, message=f"the agent obeys {new}")
        c.wait_full_service(first, timeout_s=60)
        # The agent's report refused by the first RS (the heartbeat it asked for, in its
        # log; or the agent's own lease request, in the agent's log: whichever came first),
        # the epoch reported gone back, then the re-take; the agent obeys the lost term, then
        # the new one, never the reused epoch.
        rs_log, text = c.rs[first].log_text(), log()
        by_rs = re.search(
            rf"request heartbeat failed for [^\n]*{re.escape(agent)} \(OB_RS_NOT_MASTER\)", rs_log
        )
        by_agent = re.search(rf"lease refused by {re.escape(first)}: [^\n]*raising the epoch", text)
        assert by_rs is not None or by_agent is not None, (rs_log, text)
        if by_rs is not None:
            assert m_won.start() < by_rs.start() < m_re.start()
        went_back = rs_log.find(
            f"epoch went back from {lost[0]} to {lost[0]} (reported by {agent})"
        )
        assert m_won.start() < went_back < m_re.start()
        obeyed_lost = text.index(f"epoch {lost[0]} (incarnation {lost[1]:x})")
        obeyed_new = text.index(f"epoch {new[0]} (incarnation {new[1]:x})")
        assert obeyed_lost < obeyed_new
        if by_agent is not None:
            assert obeyed_lost < by_agent.start() < obeyed_new
        tokens = assert_one_root_service_per_epoch(text)
        assert (lost[0], int(m_won.group(1), 16)) not in tokens
        assert tokens[-1] == new

        m = metrics(first)
        assert m is not None, "metrics of the first RS"
        assert m.get("rs_epoch_conflicts_total", 0) >= 1 and m.get("rs_epoch_raised_total") == 1
        events = table(
            pair.standby,
            "SELECT value1, value2, value3 FROM __all_rootservice_event_history "
            "WHERE event = 'epoch_went_back'",
        )
        assert (str(lost[0]), str(lost[0]), f"reported by {agent}") in events, events
        c.ok("ALTER SYSTEM ADD ZONE 'after'", [first])
        zones = {z for (z,) in table(pair.standby, "SELECT zone FROM __all_zone")}
        lost_statements = sorted({"lost1"} - zones)
        record_property("lost_acknowledged_statements", ",".join(lost_statements))
        print(f"lost tail: epoch {lost} -> {standby_epoch}, re-taken as {new}")
        assert lost_statements == ["lost1"] and "after" in zones
    finally:
        for p in (*c.rs.values(), *c.agents.values()):
            p.resume()
        c.close()
