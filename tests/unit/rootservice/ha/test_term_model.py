"""The term (lease and epoch state machine, docs/design/ha.md) checked against a
small pure model with Hypothesis: any sequence of elections won, renewals (current or
stale), step-down requests (current, stale or unscoped), clean-ups, clock steps, supervision
and service-window changes must leave :class:`rootservice.ha.term.Term` answering exactly as
the model does. A refactor that changes what "may I act" means fails here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from rootservice.ha.term import RsState, Term, lease_timings

S = 1_000_000
LEASE = 10 * S
_, MARGIN = lease_timings(LEASE)


@dataclass
class Model:
    """What the term should say, computed from first principles."""

    now: int = 0
    epoch: int = 0
    last_epoch: int = 0
    renewed: int = 0
    supervised: bool = False
    pending: str | None = None
    state: RsState = RsState.INIT
    in_service: bool = False

    def guard_ok(self) -> bool:
        if self.epoch == 0:
            return False
        return not self.supervised or self.now - self.renewed < LEASE - MARGIN

    def may_act(self) -> bool:
        return (
            self.state not in (RsState.NOT_MASTER, RsState.STOPPED)
            and self.guard_ok()
            and self.in_service
        )


class TermMachine(RuleBasedStateMachine):
    """Drives one Term and one Model side by side."""

    @initialize()
    def start(self) -> None:
        self.clock = FakeClock()
        self.woken = 0

        def wake() -> None:
            self.woken += 1

        self.term = Term(
            self.clock,
            address=lambda: "127.0.0.1:2882",
            lease_time=lambda: LEASE,
            wake_election=wake,
        )
        self.model = Model(now=self.clock.monotonic_us())

    @rule(us=st.integers(min_value=0, max_value=2 * LEASE))
    def advance(self, us: int) -> None:
        self.clock.advance(us)
        self.model.now = self.clock.monotonic_us()

    @rule(offset=st.sampled_from([-1, 0, 1]))
    def to_the_margin(self, offset: int) -> None:
        # Both sides of the boundary: the lease is trusted until exactly lease - margin.
        target = self.model.renewed + LEASE - MARGIN + offset
        if target > self.model.now:
            self.advance(target - self.model.now)

    @precondition(lambda self: self.model.epoch == 0)
    @rule()
    def win_election(self) -> None:
        # The election only takes office as a standby, always with a higher epoch.
        epoch = self.model.last_epoch + 1
        self.term.begin(epoch, self.clock.monotonic_us())
        self.model.epoch = self.model.last_epoch = epoch
        self.model.renewed = self.model.now
        assert self.term.leader == "127.0.0.1:2882"

    @rule(stale=st.booleans())
    def renewal_succeeds(self, stale: bool) -> None:
        epoch = self.model.last_epoch - 1 if stale else self.model.epoch
        self.term.renewed(epoch, self.clock.monotonic_us())
        if epoch != 0 and epoch == self.model.epoch:
            self.model.renewed = self.model.now

    @rule(scope=st.sampled_from(["current", "stale", "any"]))
    def request_step_down(self, scope: str) -> None:
        epoch = {"current": self.model.epoch, "stale": self.model.last_epoch - 1, "any": None}[
            scope
        ]
        woken = self.woken
        done = self.term.request_step_down(f"test {scope}", epoch)
        expected = self.model.epoch != 0 and (epoch is None or epoch == self.model.epoch)
        assert done == expected
        if expected:
            self.model.epoch = 0
            self.model.pending = f"test {scope}"
            self.model.state = RsState.NOT_MASTER
            self.model.in_service = False
            # Outside an election round, the election is woken to finish the step-down.
            assert self.woken == woken + 1
        else:
            assert self.woken == woken

    @rule()
    def finish_step_down(self) -> None:
        assert self.term.take_step_down() == self.model.pending
        self.model.pending = None

    @rule()
    def supervise(self) -> None:
        self.term.supervise()
        self.model.supervised = True

    @rule(state=st.sampled_from(list(RsState)))
    def set_state(self, state: RsState) -> None:
        self.term.state = state
        self.model.state = state

    @rule(open_=st.booleans())
    def service_window(self, open_: bool) -> None:
        if open_:
            self.term.open_service()
        else:
            self.term.close_service()
        self.model.in_service = open_

    @invariant()
    def agrees_with_the_model(self) -> None:
        m = self.model
        assert self.term.epoch == m.epoch
        assert self.term.in_service == m.in_service
        assert (self.term.guard() is None) == m.guard_ok()
        assert self.term.holds_lease() == m.guard_ok()
        assert self.term.may_act() == m.may_act()
        if m.may_act():
            assert self.term.check() == m.epoch
        else:
            with pytest.raises(ObError) as e:
                self.term.check()
            assert e.value.name == "OB_RS_NOT_MASTER"
        # BOOTSTRAP, SET and SELECT need a leader but not an open whitelist.
        leader_ok = m.state not in (RsState.NOT_MASTER, RsState.STOPPED) and m.guard_ok()
        assert (self.term.refusal(need_service=False) is None) == leader_ok


TermMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_term_matches_its_model = TermMachine.TestCase
