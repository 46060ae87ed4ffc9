"""An explicit-state model of the lease row, the epoch and the agents' fencing tokens over a
PostgreSQL primary and standby (the failover recipe's promise), explored by Hypothesis.

The model: two database servers (a primary and a standby, replication synchronous or
asynchronous: with asynchronous replication the primary's last commits wait in a queue the
standby may not have applied when it is promoted), three root services and two agents. A
root service takes office on the primary's lease row, renews (stepping down when the row is
no longer its own), hears agents' reports and commands agents; deposed root services that
have not noticed yet keep commanding (a paused or partitioned RS). The failover promotes the
standby, losing whatever the queue held; a fresh standby follows the new primary.

The decisions are the product's own pure functions, not copies: the agent's check
(:func:`obcommon.fencing.refusal` / :func:`obcommon.fencing.after_obeying`), the RS's
conflict test (:func:`obcommon.fencing.reports_conflict`) and its epoch choice
(:func:`rootservice.ha.fence.choose_epoch`). Rule 1 disabled means the pre-issue product:
the agent remembers the epoch only (the incarnation is blinded before the same ``refusal``
is asked) and the RS takes ``row + 1`` ignoring what agents reported, with no re-take.

Invariants (per agent, the fencing-token guarantee): an agent never obeys two root services
with the same epoch, and never obeys an epoch lower than one it obeyed before. With rule 1
Hypothesis finds no counterexample, synchronous or not; without it, asynchronous
replication gives the epoch-reuse counterexample (an RS obeyed with epoch E, the bump lost
in the failover, another RS takes E again and is obeyed) - the test expects Hypothesis to
find it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from obcommon.fencing import NO_TOKEN, FenceToken, after_obeying, refusal, reports_conflict
from rootservice.ha.fence import choose_epoch

N_RS = 3
N_AGENTS = 2


@dataclass
class Server:
    """One PostgreSQL server's lease row: the token of its holder (``rs`` = who, -1 none)."""

    token: FenceToken = NO_TOKEN
    rs: int = -1


@dataclass
class Rs:
    """One root service: the token of the term it believes it holds (None: standby) and the
    highest epoch it knows was used (its own terms, agents' reports: the EpochFence)."""

    token: FenceToken | None = None
    highest_known: int = 0


@dataclass
class Agent:
    """One agent: the highest token obeyed (kept on disk) and every token it obeyed, in
    order, with the root service that sent it."""

    highest: FenceToken = NO_TOKEN
    obeyed: list[tuple[FenceToken, int]] = field(default_factory=list)


class FencingModel(RuleBasedStateMachine):
    """The model; subclasses set :attr:`synchronous` and :attr:`rule1`."""

    synchronous = False
    rule1 = True

    def __init__(self) -> None:
        super().__init__()
        self.primary = Server()
        self.standby = Server()
        # Asynchronous replication: row states committed on the primary, not yet applied
        # on the standby, oldest first.
        self.in_flight: list[Server] = []
        self.rss = [Rs() for _ in range(N_RS)]
        self.agents = [Agent() for _ in range(N_AGENTS)]
        self._incarnations = 0

    # --- the metadata store ---------------------------------------------------------------

    def _commit(self, row: Server) -> None:
        self.primary = row
        if self.synchronous:
            self.standby = Server(row.token, row.rs)
        else:
            self.in_flight.append(Server(row.token, row.rs))

    @precondition(lambda self: bool(self.in_flight))
    @rule()
    def replicate(self) -> None:
        """The standby applies the oldest commit it has not applied."""
        self.standby = self.in_flight.pop(0)

    @rule()
    def failover(self) -> None:
        """kill -9 of the primary, promote the standby (what it had not applied is lost);
        a new standby is made from the new primary (pg_basebackup)."""
        self.primary = self.standby
        self.standby = Server(self.primary.token, self.primary.rs)
        self.in_flight = []

    # --- root services --------------------------------------------------------------------

    def _new_incarnation(self) -> int:
        self._incarnations += 1
        return self._incarnations

    @rule(r=st.integers(0, N_RS - 1))
    def take_office(self, r: int) -> None:
        """RS ``r`` finds the lease run out and takes office on the primary's row."""
        rs = self.rss[r]
        if rs.token is not None:
            return
        row = self.primary.token
        reported = [rs.highest_known] if self.rule1 else []
        token = FenceToken(choose_epoch(row.epoch, reported), self._new_incarnation())
        self._commit(Server(token, r))
        rs.token = token
        rs.highest_known = max(rs.highest_known, token.epoch)

    @rule(r=st.integers(0, N_RS - 1))
    def renew(self, r: int) -> None:
        """RS ``r`` renews: deposed (steps down) when the primary's row is not its term."""
        rs = self.rss[r]
        if rs.token is not None and self.primary.token != rs.token:
            rs.token = None

    @rule(a=st.integers(0, N_AGENTS - 1), r=st.integers(0, N_RS - 1))
    def report(self, a: int, r: int) -> None:
        """Agent ``a``'s lease request reaches RS ``r`` (standby or leader)."""
        rs, reported = self.rss[r], self.agents[a].highest
        rs.highest_known = max(rs.highest_known, reported.epoch)
        if not self.rule1 or rs.token is None or not reports_conflict(rs.token, reported):
            return
        # The re-take: the row must still be ours; then an epoch above every one known.
        if self.primary.token != rs.token:
            rs.token = None
            return
        epoch = choose_epoch(self.primary.token.epoch, [reported.epoch, rs.highest_known])
        token = FenceToken(epoch, self._new_incarnation())
        self._commit(Server(token, r))
        rs.token = token
        rs.highest_known = epoch

    @rule(r=st.integers(0, N_RS - 1), a=st.integers(0, N_AGENTS - 1))
    def command(self, r: int, a: int) -> None:
        """RS ``r`` (leader or deposed without knowing) sends agent ``a`` a command or a
        lease answer with its token; the agent obeys it or refuses."""
        rs, agent = self.rss[r], self.agents[a]
        if rs.token is None:
            return
        highest = agent.highest
        if not self.rule1:
            # The pre-issue agent kept the epoch only: blind the incarnation.
            highest = FenceToken(highest.epoch, rs.token.incarnation)
        if refusal(highest, rs.token) is not None:
            return
        agent.highest = after_obeying(agent.highest, rs.token)
        agent.obeyed.append((rs.token, r))

    @rule(a=st.integers(0, N_AGENTS - 1))
    def restart_agent(self, a: int) -> None:
        """An agent restarts: it keeps its token (DATA_DIR/rs_token.json)."""
        self.agents[a] = Agent(self.agents[a].highest, self.agents[a].obeyed)

    # --- what must always hold -----------------------------------------------------------

    @invariant()
    def one_root_service_per_epoch_and_never_lower(self) -> None:
        for i, agent in enumerate(self.agents):
            by_epoch: dict[int, set[int]] = {}
            last = 0
            for token, _ in agent.obeyed:
                by_epoch.setdefault(token.epoch, set()).add(token.incarnation)
                assert len(by_epoch[token.epoch]) == 1, (
                    f"agent {i} obeyed two root services with epoch {token.epoch}: {agent.obeyed}"
                )
                assert token.epoch >= last, f"agent {i} obeyed a lower epoch: {agent.obeyed}"
                last = token.epoch


def machine(*, synchronous: bool, rule1: bool) -> type[FencingModel]:
    """The model with that replication and rule 1 on or off."""
    return type(
        f"FencingModel_{'sync' if synchronous else 'async'}_{'rule1' if rule1 else 'norule'}",
        (FencingModel,),
        {"synchronous": synchronous, "rule1": rule1},
    )


SETTINGS = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize("synchronous", [True, False], ids=["sync", "async"])
def test_no_counterexample_with_rule_1(synchronous: bool) -> None:
    run_state_machine_as_test(machine(synchronous=synchronous, rule1=True), settings=SETTINGS)


def test_synchronous_replication_needs_no_rule_1() -> None:
    # A synchronous standby never loses an epoch bump: epochs are unique without the rule.
    run_state_machine_as_test(machine(synchronous=True, rule1=False), settings=SETTINGS)


def test_hypothesis_finds_the_epoch_reuse_without_rule_1() -> None:
    with pytest.raises((AssertionError, Flaky)) as found:
        run_state_machine_as_test(machine(synchronous=False, rule1=False), settings=SETTINGS)
    assert "obeyed two root services with epoch" in str(found.value)
    # The shrunk counterexample (take office, failover losing the bump, take office again
    # with the same epoch, both obeyed), shown with -s / in the report.
    print("\n".join(getattr(found.value, "__notes__", [])))
