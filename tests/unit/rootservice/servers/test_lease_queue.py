"""The RS's own lease queue: fair turns, the intake lag, and the lease checker's rule that a
request waiting in the queue keeps its server's lease (a request that reached the RS is a
sign of life). In-process RS with a FakeClock, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

from obcommon.clock import FakeClock
from obcommon.proto import obrpc_pb2
from rootservice.app import RootService
from rootservice.db.event_repo import Event
from rootservice.servers.lease_bounds import MAX_CLOCK_SKEW_US
from rootservice.servers.lease_queue import BEHIND_US, LeaseQueue
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import LEASE, ZA, ZB, ZC, A, B, C, events, flush, hb, hb_status

S = 1_000_000


def queue_hb(rs: RootService, server: str, zone: str) -> list[obrpc_pb2.LeaseResponse]:
    """A lease request of ``server`` made now and put in the RS's queue (unhandled); the
    returned list receives its answer."""
    req = hb(server, zone)
    answers: list[obrpc_pb2.LeaseResponse] = []

    def work(waited_us: int) -> obrpc_pb2.LeaseResponse:
        return rs.heartbeats.receive_hb(req, None, waited_us)

    rs.lease_queue.submit(server, work, answers.append, first=False)
    return answers


def check_interval(rs: RootService) -> int:
    return rs.settings.heartbeat_check_interval


def test_a_live_agent_whose_request_waits_past_lease_time_is_not_expired(rs: RootService) -> None:
    rs.clock.advance(LEASE)  # past the take-office grace
    rs.heartbeats.receive_hb(hb(A, ZA))
    rs.clock.advance(LEASE // 2)
    answers = queue_hb(rs, A, ZA)  # sent and received, not handled yet
    # Its lease would have ended LEASE / 2 ago; the checker ticks on and on while it waits.
    for _ in range(10):
        rs.clock.advance(LEASE // 10)
        assert rs.lease_checker.run_once() == 0
    assert hb_status(rs, A) is HeartbeatStatus.ALIVE
    assert rs.lease_queue.waiting(A) and rs.lease_queue.lag_us() == LEASE
    # Handled at last: renewed from now, nothing counted against it.
    rs.lease_queue.run_turn()
    assert len(answers) == 1 and not answers[0].HasField("error")
    assert not rs.lease_queue.waiting(A)
    rs.clock.advance(LEASE - 1)
    assert rs.lease_checker.run_once() == 0
    rs.clock.advance(1)
    assert rs.lease_checker.run_once() == 1
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    flush(rs)
    assert [e["value1"] for e in events(rs, "lease_expire")] == [A]
    assert rs.metrics.get("leases_expired_total") == 1


def test_a_silent_agent_expires_on_time_while_others_wait_in_the_queue(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    t0 = rs.clock.now_us()
    rs.heartbeats.receive_hb(hb(A, ZA))
    rs.heartbeats.receive_hb(hb(B, ZB))
    rs.clock.advance(LEASE // 2)
    queue_hb(rs, B, ZB)  # B is alive, its request waits; A sent nothing more
    rs.clock.advance(t0 + LEASE - 1 - rs.clock.now_us())
    assert rs.lease_checker.run_once() == 0
    # The first tick at or after lease_time expires A (B's request still waits, B stays).
    rs.clock.advance(check_interval(rs))
    assert rs.lease_checker.run_once() == 1
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    assert hb_status(rs, B) is HeartbeatStatus.ALIVE
    assert rs.lease_queue.lag_us() > 0


def test_renewals_go_before_first_requests_and_a_first_request_gets_each_turn() -> None:
    clock = FakeClock()
    q: LeaseQueue[str] = LeaseQueue(clock, lambda e: None)
    order: list[str] = []

    def work(name: str) -> Callable[[int], str]:
        return lambda waited_us: name

    for name, first in [("f1", True), ("r1", False), ("r2", False), ("f2", True)]:
        q.submit(name, work(name), order.append, first)
    assert q.run_turn() == 4
    assert order == ["r1", "r2", "f1", "f2"]
    # A turn with no budget: one renewal, then still one first request (admission never stops).
    q.turn_us = 0
    order.clear()
    for name, first in [("f3", True), ("r3", False), ("r4", False), ("f4", True)]:
        q.submit(name, work(name), order.append, first)
    assert q.run_turn() == 2
    assert order == ["r3", "f3"]
    assert q.run_turn() == 2
    assert order == ["r3", "f3", "r4", "f4"]
    assert q.depth() == 0 and q.lag_us() == 0


def test_falling_behind_and_catching_up_are_events_and_readiness_says_so(
    rs: RootService,
) -> None:
    rs.clock.advance(LEASE)
    rs.lease_queue.turn_us = 0  # one request per turn
    queue_hb(rs, A, ZA)
    queue_hb(rs, B, ZB)
    queue_hb(rs, C, ZC)
    rs.clock.advance(BEHIND_US - 1)
    rs.lease_queue.run_turn()  # B and C have waited just under the threshold
    assert not rs.lease_queue.behind
    assert rs.readiness.verdict().intake == ""
    rs.clock.advance(1)
    rs.lease_queue.run_turn()  # C has waited the threshold
    assert rs.lease_queue.behind
    rs.readiness.probe(force=True)
    verdict = rs.readiness.verdict()
    assert verdict.ready and "behind on lease intake" in verdict.intake
    readings = rs.readings()
    assert readings.intake_behind and readings.intake_waiting == 1
    assert readings.intake_lag_us == BEHIND_US
    rs.lease_queue.run_turn()
    assert not rs.lease_queue.behind and rs.readiness.verdict().intake == ""
    flush(rs)
    got = [(e["module"], e["event"]) for e in events(rs) if e["module"] == "lease_intake"]
    assert got == [("lease_intake", "behind"), ("lease_intake", "caught_up")]


def test_a_request_whose_stream_ended_is_still_handled() -> None:
    clock = FakeClock()
    seen: list[Event] = []
    q: LeaseQueue[str] = LeaseQueue(clock, seen.append)
    handled: list[int] = []

    def work(waited_us: int) -> str:
        handled.append(waited_us)
        return "answer"

    def gone(answer: str) -> None:
        import asyncio

        raise asyncio.InvalidStateError("cancelled")

    q.submit(A, work, gone, first=False)
    clock.advance(3 * S)
    assert q.run_turn() == 1
    assert handled == [3 * S] and not q.waiting(A)


def test_a_request_is_judged_as_of_its_arrival(rs: RootService) -> None:
    # The agent's clock field is checked against the RS's clock when the request arrived:
    # a wait in the RS's queue longer than the allowed clock skew refuses nothing.
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    answers = queue_hb(rs, A, ZA)
    rs.clock.advance(MAX_CLOCK_SKEW_US + S)
    assert rs.lease_checker.run_once() == 0
    rs.lease_queue.run_turn()
    assert not answers[0].HasField("error"), answers[0].error
    assert hb_status(rs, A) is HeartbeatStatus.ALIVE


def test_a_first_request_whose_stream_ended_is_dropped_unhandled() -> None:
    """Its agent gave up and sends another on a new stream: handling it would spend the
    admission budget on an answer nobody reads (under overload every first request then
    reached its turn too late). The first requests still awaited are handled; a renewal
    whose stream ended is still handled (test above)."""
    clock = FakeClock()
    q: LeaseQueue[str] = LeaseQueue(clock, lambda e: None)
    handled: list[str] = []
    answered: list[str] = []

    def work(name: str) -> Callable[[int], str]:
        def run(waited_us: int) -> str:
            handled.append(name)
            return name

        return run

    gone = {"f1", "f3"}
    for name in ("f1", "f2", "f3", "f4"):
        q.submit(name, work(name), answered.append, True, abandoned=lambda n=name: n in gone)
    assert q.waiting("f1")
    assert q.run_turn() == 2
    assert handled == answered == ["f2", "f4"]
    assert not any(q.waiting(n) for n in ("f1", "f2", "f3", "f4"))
    assert q.status()["abandoned_first"] == 2 and q.depth() == 0


def test_a_started_queue_runs_one_turn_per_loop_iteration_by_itself() -> None:
    """Once started on a loop the turns run without being called: one as soon as a request
    waits, then one per loop iteration while requests are left, the loop's other callbacks
    between them; nothing is scheduled while the queue is empty."""
    import asyncio

    q: LeaseQueue[str] = LeaseQueue(FakeClock(), lambda e: None, turn_us=0)
    order: list[str] = []
    q.submit("r0", lambda waited_us: "r0", order.append, first=False)  # before the start

    async def main() -> None:
        loop = asyncio.get_running_loop()
        q.start(loop)
        await asyncio.sleep(0)  # one iteration: the turn scheduled by the start ran
        assert order == ["r0"] and q.depth() == 0
        for name in ("r1", "r2", "r3"):
            q.submit(name, lambda waited_us, n=name: n, order.append, first=False)
        assert order == ["r0"]  # queued, not handled in the caller's step
        await asyncio.sleep(0)
        assert order == ["r0", "r1"]  # one request per turn (no budget), one turn per iteration
        await asyncio.sleep(0)
        assert order == ["r0", "r1", "r2"]
        await asyncio.sleep(0)
        assert order == ["r0", "r1", "r2", "r3"] and q.depth() == 0
        await asyncio.sleep(0)
        assert not q._scheduled  # idle: no turn keeps being scheduled

    asyncio.run(main())


PACE = 1_000_000


def test_a_renewal_sooner_than_the_pace_is_held_until_a_pace_after_the_last_answer() -> None:
    clock = FakeClock()
    q: LeaseQueue[int] = LeaseQueue(clock, lambda e: None, pace_us=lambda: PACE, pace_always=True)
    waited: list[int] = []

    def renew(server: str) -> None:
        q.submit(server, lambda w: w, waited.append, first=False)

    renew("a")  # never handled before: not paced
    assert q.run_turn() == 1 and waited == [0]
    clock.advance(PACE // 4)
    renew("a")  # a quarter of a pace after its answer: held, not refused
    assert q.held() == 1 and q.depth() == 0 and q.waiting("a") and q.lag_us() == 0
    assert q.status()["paced"] == 1 and q.paced_total == 1
    clock.advance(PACE - PACE // 4 - 1)  # one microsecond before its time
    assert q.run_turn() == 0 and q.held() == 1 and q.waiting("a")
    clock.advance(1)  # a pace after the last answer: handled; it waited since its arrival
    assert q.run_turn() == 1 and q.held() == 0 and not q.waiting("a")
    assert waited == [0, PACE - PACE // 4]
    clock.advance(PACE)
    renew("a")  # a whole pace after the last answer: not held
    assert q.held() == 0 and q.run_turn() == 1


def test_first_requests_news_and_other_servers_are_never_paced() -> None:
    clock = FakeClock()
    q: LeaseQueue[str] = LeaseQueue(clock, lambda e: None, pace_us=lambda: PACE, pace_always=True)
    order: list[str] = []
    q.submit("a", lambda w: "a1", order.append, first=False)
    assert q.run_turn() == 1
    q.submit("a", lambda w: "a-new-stream", order.append, first=True)  # a new stream
    q.submit("b", lambda w: "b1", order.append, first=False)
    assert q.held() == 0 and q.run_turn() == 2
    assert order == ["a1", "b1", "a-new-stream"]
    # A renewal that carries news (its status bits changed) is not held either.
    q.submit("a", lambda w: "a-disk-error", order.append, first=False, paced=False)
    assert q.held() == 0 and q.run_turn() == 1 and order[-1] == "a-disk-error"
    q.submit("a", lambda w: "a-same-again", order.append, first=False)
    assert q.held() == 1
    nothing: LeaseQueue[str] = LeaseQueue(clock, lambda e: None)  # no pace: nothing held
    nothing.submit("a", lambda w: "x", order.append, first=False)
    nothing.run_turn()
    nothing.submit("a", lambda w: "y", order.append, first=False)
    assert nothing.held() == 0 and nothing.run_turn() == 1


def test_the_pacing_is_on_only_after_a_saturated_round_of_the_loop() -> None:
    """A round of the loop (a turn's scheduling to its start) of BUSY_ROUND_US turns the
    pacing on for BUSY_HOLD_US; one microsecond shorter does not (the round clock is a
    fake advanced between the scheduling and the turn)."""
    import asyncio

    from rootservice.servers.lease_queue import BUSY_HOLD_US, BUSY_ROUND_US

    ns = [0]
    clock = FakeClock()
    q: LeaseQueue[str] = LeaseQueue(
        clock, lambda e: None, pace_us=lambda: PACE, round_clock_ns=lambda: ns[0]
    )
    answers: list[str] = []

    async def round_of(us: int) -> None:
        # One renewal of a new server, its turn scheduled now and run ``us`` later.
        q.submit(f"s{len(answers)}", lambda w: "x", answers.append, first=False)
        ns[0] += us * 1000
        await asyncio.sleep(0)

    async def main() -> None:
        q.start(asyncio.get_running_loop())
        await round_of(BUSY_ROUND_US - 1)
        assert not q.saturated
        q.submit("s0", lambda w: "again", answers.append, first=False)
        assert q.held() == 0  # a loop that keeps up paces nothing
        await asyncio.sleep(0)
        await round_of(BUSY_ROUND_US)
        assert q.saturated and q.status()["saturated"]
        q.submit("s2", lambda w: "too soon", answers.append, first=False)
        assert q.held() == 1  # handled a moment ago: held
        ns[0] += BUSY_HOLD_US * 1000 - 1
        assert q.saturated
        ns[0] += 1
        assert not q.saturated

    asyncio.run(main())


def test_a_started_queue_releases_held_renewals_on_its_own() -> None:
    """On a loop the held renewals are released by a timer of the loop (real time here: a
    pace of 20 ms, waited for by condition)."""
    import asyncio

    from obcommon.clock import SystemClock

    q: LeaseQueue[str] = LeaseQueue(
        SystemClock(), lambda e: None, pace_us=lambda: 20_000, pace_always=True
    )
    answers: list[str] = []

    async def main() -> None:
        q.start(asyncio.get_running_loop())
        q.submit("a", lambda w: "first", answers.append, first=False)
        for _ in range(100):
            if answers:
                break
            await asyncio.sleep(0)
        q.submit("a", lambda w: "held", answers.append, first=False)
        assert q.held() == 1
        for _ in range(500):  # bounded: 500 x 10 ms
            if len(answers) == 2:
                break
            await asyncio.sleep(0.01)
        assert answers == ["first", "held"] and q.held() == 0 and not q.waiting("a")

    asyncio.run(main())


def test_the_servicer_drops_a_first_request_whose_call_was_cancelled(rs: RootService) -> None:
    """The lease servicer's wiring: a first request whose call is cancelled before the
    queue's turn (the agent's deadline passed) changes nothing; a renewal cancelled the same
    way is still handled (it reached the RS: a sign of life)."""
    import asyncio

    from rootservice.api.lease_servicer import LeaseServicer

    servicer = LeaseServicer(rs)
    before = rs.whitelist.get(A)
    assert before is not None and before.hb_status is not HeartbeatStatus.ALIVE

    async def cancelled(first: bool) -> None:
        call = asyncio.create_task(servicer._answer(hb(A, ZA), None, first))
        await asyncio.sleep(0)  # the request is queued; the worker has not had a turn
        call.cancel()
        # Bounded: the worker's turn runs within a few loop iterations.
        for _ in range(100):
            if rs.lease_queue.depth() == 0:
                break
            await asyncio.sleep(0)
        assert rs.lease_queue.depth() == 0

    async def both() -> None:
        await cancelled(True)
        assert rs.lease_queue.abandoned_total == 1
        assert hb_status(rs, A) is not HeartbeatStatus.ALIVE  # never handled
        await cancelled(False)
        assert hb_status(rs, A) is HeartbeatStatus.ALIVE  # the renewal was handled
        assert rs.lease_queue.started

    asyncio.run(both())


def test_a_renewal_skips_the_queue_only_when_it_would_be_alone_in_the_next_turn() -> None:
    """``take_now``: a renewal, on a started queue, no renewal waiting before it, the loop
    not saturated; each condition broken on its own says no (and counts nothing)."""
    import asyncio

    q: LeaseQueue[str] = LeaseQueue(FakeClock(), lambda e: None, pace_us=lambda: PACE)
    answers: list[str] = []
    assert not q.take_now("a", False)  # not started: only run_turn handles (unit tests)

    async def main() -> None:
        q.start(asyncio.get_running_loop())
        assert q.take_now("a", False) and q.handled_total == 1
        assert not q.take_now("b", True)  # a first request always waits its turn
        q.submit("c", lambda w: "x", answers.append, first=False)
        assert not q.take_now("a", False)  # first come, first served among renewals
        await asyncio.sleep(0)
        assert answers == ["x"] and q.take_now("a", False)
        q.pace_always = True
        assert not q.take_now("a", False)  # saturated: the queue paces
        assert q.handled_total == 3  # the two taken and "c"

    asyncio.run(main())


def test_a_renewal_handled_at_once_is_dated_for_the_pacing_and_the_loop_still_timed() -> None:
    """A renewal taken at once is counted and dated (a renewal of the same server right
    after, once the loop is saturated, is held for the pace), and an empty turn is scheduled
    at most every PROBE_NS to time the loop's round: that turn is what turns the pacing on."""
    import asyncio

    from rootservice.servers.lease_queue import BUSY_ROUND_US, PROBE_NS

    ns = [0]
    q: LeaseQueue[str] = LeaseQueue(
        FakeClock(), lambda e: None, pace_us=lambda: PACE, round_clock_ns=lambda: ns[0]
    )
    answers: list[str] = []

    async def main() -> None:
        q.start(asyncio.get_running_loop())
        ns[0] = PROBE_NS  # the first probe is due
        assert q.take_now("a", False)
        assert q.handled_total == 1 and q._scheduled  # an empty turn to time the round
        await asyncio.sleep(0)
        assert not q._scheduled and not q.saturated
        assert q.take_now("b", False)
        assert not q._scheduled  # the next probe only PROBE_NS after the last one
        ns[0] += PROBE_NS - 1
        assert q.take_now("b", False)
        assert not q._scheduled
        ns[0] += 1
        assert q.take_now("a", False)
        assert q._scheduled and q.handled_total == 4
        ns[0] += BUSY_ROUND_US * 1000  # this round of the loop is a saturated one
        await asyncio.sleep(0)
        assert q.saturated and not q.take_now("b", False)
        q.submit("a", lambda w: "too soon", answers.append, first=False)
        assert q.held() == 1 and answers == []  # answered at once a moment ago: paced

    asyncio.run(main())


def test_the_stream_answers_a_renewal_in_its_own_step_and_news_past_the_pacing(
    rs: RootService,
) -> None:
    """Through ``LeaseStream`` (plaintext gate): the first request waits for the queue's
    turn; a renewal on a loop that keeps up is answered within the stream's own step (the
    coroutine never suspends); on a saturated loop a renewal too soon after the last answer
    is held, but one whose ``server_status`` changed on the stream is not."""
    import asyncio

    from rootservice.api.lease_servicer import LeaseServicer

    servicer = LeaseServicer(rs)
    queue = rs.lease_queue
    inbox: asyncio.Queue[obrpc_pb2.LeaseRequest] = asyncio.Queue()

    async def requests():  # type: ignore[no-untyped-def]
        while True:
            yield await inbox.get()

    async def main() -> None:
        stream = servicer.LeaseStream(requests(), None)  # type: ignore[arg-type]
        inbox.put_nowait(hb(A, ZA, server_status=0))
        first = await asyncio.wait_for(stream.__anext__(), 5)
        assert first.error.code == 0 and queue.firsts_total == 1
        inbox.put_nowait(hb(A, ZA, server_status=0))
        step = stream.__anext__()
        with_answer = None
        try:
            step.send(None)  # type: ignore[attr-defined]
        except StopIteration as done:
            with_answer = done.value
        assert with_answer is not None, "the renewal waited for a turn of the queue"
        assert with_answer.error.code == 0 and queue.handled_total == 2
        queue.pace_always = True
        inbox.put_nowait(hb(A, ZA, server_status=0))
        same = asyncio.ensure_future(stream.__anext__())
        for _ in range(100):  # bounded: a few loop iterations
            if queue.held():
                break
            await asyncio.sleep(0)
        assert queue.held() == 1 and not same.done()  # held for the pace
        same.cancel()
        stream2 = servicer.LeaseStream(requests(), None)  # type: ignore[arg-type]
        inbox.put_nowait(hb(A, ZA, server_status=0))
        await asyncio.wait_for(stream2.__anext__(), 5)
        inbox.put_nowait(hb(A, ZA, server_status=1))  # news: the disk-error bit
        news = await asyncio.wait_for(stream2.__anext__(), 5)
        assert news.error.code == 0 and queue.held() == 1  # answered, not held

    asyncio.run(main())


def test_last_answer_times_that_can_hold_nothing_are_pruned() -> None:
    """A server's last-answer time is kept while it can still hold a renewal (younger than
    a pace) and dropped at the next prune after that (every PRUNE_US), so a deleted
    server's name does not stay in memory."""
    from rootservice.servers.lease_queue import PRUNE_US

    clock = FakeClock()
    q: LeaseQueue[str] = LeaseQueue(clock, lambda e: None, pace_us=lambda: PACE)
    q.submit("gone", lambda w: "x", lambda r: None, first=False)
    q.run_turn()
    clock.advance(PRUNE_US - PACE + 1)
    q.submit("live", lambda w: "x", lambda r: None, first=False)
    q.run_turn()
    clock.advance(PACE - 2)
    q._drain()  # "gone" can hold nothing any more, but a prune is not due yet
    assert set(q._handled_mono) == {"gone", "live"}
    clock.advance(1)
    q._drain()
    assert set(q._handled_mono) == {"live"}  # "live": one microsecond short of a pace old
    clock.advance(PRUNE_US)
    q._drain()
    assert q._handled_mono == {}


def test_a_queued_request_is_judged_by_the_rs_clock_at_its_arrival(rs: RootService) -> None:
    """Through the lease servicer: the RS's wall clock stepped an hour once (the agent's
    clock agrees with the new time, the RS's start-anchored steady time does not), then
    again while the agent's first request waited in the lease queue. The request agreed
    with the RS's clock when it arrived, so it is accepted: judged against "now less the
    wait", it would agree with neither of the RS's clocks and be refused."""
    import asyncio

    from rootservice.api.lease_servicer import LeaseServicer

    assert isinstance(rs.clock, FakeClock)
    servicer = LeaseServicer(rs)
    rs.clock.jump(3600 * S)

    async def main() -> obrpc_pb2.LeaseResponse:
        call = asyncio.create_task(servicer._answer(hb(A, ZA), None, True))
        await asyncio.sleep(0)  # queued; the worker has not had its turn
        assert rs.lease_queue.depth() == 1
        rs.clock.jump(3600 * S)  # a second step while it waits
        return await asyncio.wait_for(call, 5)

    resp = asyncio.run(main())
    assert resp.error.code == 0, resp.error.message
    assert hb_status(rs, A) is HeartbeatStatus.ALIVE
