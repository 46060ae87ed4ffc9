"""LoopStallWatch: one report per stall, with the stalled thread's stack, on both sides of
the threshold (a FakeClock stands in for time; a real thread stands in for the loop)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from obcommon.clock import FakeClock
from rootservice.api.loop_stall_watch import STALL_THRESHOLD_US, LoopStallWatch
from rootservice.config import RsSettings
from rootservice.metrics import Metrics
from rootservice.servers.intake_health import IntakeHealth


def _stuck_in_a_known_place(watch: LoopStallWatch, beaten: threading.Event, go: threading.Event):
    watch.beat()
    beaten.set()
    # Where the report must say the "loop" is.
    go.wait(10)


@pytest.fixture
def stalled_loop():
    """A thread that beat once and is now stuck in ``_stuck_in_a_known_place``."""
    clock = FakeClock()
    metrics = Metrics()
    watch = LoopStallWatch(clock, metrics)
    beaten, go = threading.Event(), threading.Event()
    t = threading.Thread(target=_stuck_in_a_known_place, args=(watch, beaten, go), name="loop")
    t.start()
    assert beaten.wait(10)
    yield clock, metrics, watch
    go.set()
    t.join(10)


def test_nothing_is_reported_before_the_first_beat():
    clock = FakeClock()
    watch = LoopStallWatch(clock, Metrics())
    clock.advance(10 * STALL_THRESHOLD_US)
    assert watch.check_once() == 0


def test_a_stall_at_the_threshold_is_not_reported(stalled_loop, caplog):
    clock, metrics, watch = stalled_loop
    clock.advance(STALL_THRESHOLD_US)
    assert watch.check_once() == 0
    assert metrics.get("event_loop_stalls_total") == 0
    assert "has not run" not in caplog.text


def test_a_stall_past_the_threshold_is_reported_once_with_the_loop_threads_stack(
    stalled_loop, caplog
):
    clock, metrics, watch = stalled_loop
    clock.advance(STALL_THRESHOLD_US + 1)
    with caplog.at_level(logging.WARNING, logger="rootservice.api.loop_stall_watch"):
        assert watch.check_once() == STALL_THRESHOLD_US + 1
        clock.advance(100_000)
        # Still the same stall: counted and logged once.
        assert watch.check_once() == STALL_THRESHOLD_US + 100_001
    assert metrics.get("event_loop_stalls_total") == 1
    reports = [r for r in caplog.records if "has not run for 300 ms" in r.getMessage()]
    assert len(reports) == 1
    assert "_stuck_in_a_known_place" in reports[0].getMessage()
    # The watcher's own thread (here the test's) is not among the "other threads".
    assert "test_a_stall_past_the_threshold" not in reports[0].getMessage()


def test_the_next_beat_ends_the_stall_and_records_its_length(stalled_loop, caplog):
    clock, metrics, watch = stalled_loop
    clock.advance(STALL_THRESHOLD_US + 50_000)
    watch.check_once()
    clock.advance(150_000)
    with caplog.at_level(logging.WARNING, logger="rootservice.api.loop_stall_watch"):
        watch.beat()
    assert metrics.window("event_loop_stall_us").summary()["max"] == STALL_THRESHOLD_US + 200_000
    assert "runs again after 500 ms" in caplog.text
    # A new stall after that beat is a new report.
    clock.advance(STALL_THRESHOLD_US + 1)
    watch.check_once()
    assert metrics.get("event_loop_stalls_total") == 2


def test_the_intake_probe_beats_and_keeps_a_live_loop_from_being_reported():
    # The probe's wakes are the watch's beats (one periodic task on the loop for both): while
    # it runs, a look after more than the threshold of (fake) time finds a fresh beat.
    clock = FakeClock()
    metrics = Metrics()
    watch = LoopStallWatch(clock, metrics)
    health = IntakeHealth(clock, RsSettings())

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(health.run_probe(stop, beat=watch.beat))
        for _ in range(3):
            before = watch._last_beat_us
            clock.advance(STALL_THRESHOLD_US + 1)
            # The next beat, waited for in bounded steps (the probe wakes every 100 ms).
            for _ in range(400):
                if watch._last_beat_us != before:
                    break
                await asyncio.sleep(0.005)
            assert watch._last_beat_us != before
            assert watch.check_once() == 0
        stop.set()
        await task

    asyncio.run(main())
    assert metrics.get("event_loop_stalls_total") == 0
    # Without beats the same look reports the stall.
    clock.advance(STALL_THRESHOLD_US + 1)
    assert watch.check_once() > STALL_THRESHOLD_US
    assert metrics.get("event_loop_stalls_total") == 1


class _SeenLock:
    """The watch's lock, telling when a thread tries to take it (before it blocks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tried = threading.Event()

    def __enter__(self) -> bool:
        if threading.current_thread().name == "beat":
            self.tried.set()
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


def test_a_beat_during_a_look_never_leaves_an_ended_stall_reported(stalled_loop, caplog):
    """The loop beats while the watcher is deciding (between reading the last beat and
    marking the stall reported). The look and the beat exclude each other, so the beat waits
    and ends the stall the look reported: nothing stays reported, and the stall's length is
    the time to that beat. (Without the exclusion the look marked a stall that had ended, and
    the next stall's report was swallowed or its length overstated.)"""
    clock, metrics, watch = stalled_loop
    lock = _SeenLock()
    watch._lock = lock  # type: ignore[assignment]
    beat_done = threading.Event()
    beater: list[threading.Thread] = []

    class BeatWhileLooking(FakeClock):
        def monotonic_us(self) -> int:
            # The look's own clock reading, taken while it decides: the loop beats now.
            if threading.current_thread().name != "beat" and not beater:
                t = threading.Thread(target=lambda: (watch.beat(), beat_done.set()), name="beat")
                beater.append(t)
                t.start()
                # Bounded wait on a condition: the beat is blocked on the lock, or done.
                for _ in range(1000):
                    if lock.tried.is_set() or beat_done.is_set():
                        break
                    beat_done.wait(0.01)
            return clock.monotonic_us()

    watch.clock = BeatWhileLooking()
    clock.advance(STALL_THRESHOLD_US + 1)
    with caplog.at_level(logging.WARNING, logger="rootservice.api.loop_stall_watch"):
        stalled = watch.check_once()
        beater[0].join(10)
    assert beat_done.is_set()
    assert stalled == STALL_THRESHOLD_US + 1  # the look saw the stall and reported it
    assert watch._reported is None  # and the beat that came during the look ended it
    assert metrics.window("event_loop_stall_us").summary()["count"] == 1
    assert "runs again after" in caplog.text
