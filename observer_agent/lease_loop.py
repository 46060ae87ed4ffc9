"""The agent's lease loop: :class:`LeaseClient` carries the decisions of
:class:`observer_agent.lease.LeaseDecisions` over the network, one bidirectional
``RootService.LeaseStream`` at a time (:class:`observer_agent.lease_stream.LeaseStream`), a
registration busy loop, renewals every ``heartbeat_interval`` (docs/design/leases.md).
Times are microseconds.
"""

from __future__ import annotations

import asyncio
import logging

from observer_agent.background import (
    describe_exception,
    is_set,
    sleep_unless_stopped,
    sleep_unless_woken,
)
from observer_agent.lease import LeaseDecisions
from observer_agent.lease_stream import LateAnswer, LeaseStream

#: How many ``rpc_timeout`` periods the agent waits for a late answer on an open lease stream
#: before it gives the stream up, and only while its lease has more than an
#: ``rpc_timeout`` left. An overloaded RS answers late but in order; a new connection would
#: cost it a TLS handshake and put the agent at the back of its backlog. With the defaults
#: (2 s) that is 8 s of silence, inside the RS's 10 s lease_time, so an RS that really hangs
#: is still left in time for a standby.
MAX_LATE_ANSWER_TIMEOUTS = 4


class LeaseClient(LeaseDecisions):
    """:class:`LeaseDecisions` carried over lease streams: try the RSs one after the other,
    register, renew every ``heartbeat_interval`` on the same stream, back off after a
    refusal or a lost stream (docs/design/leases.md)."""

    def _check_lease_lapse(self) -> None:
        if (
            self.lease_expire_time
            and not self._lease_lapse_logged
            and self.clock.now_us() >= self.lease_expire_time
        ):
            self._lease_lapse_logged = True
            self.log.warning("lease expired at %d without renewal", self.lease_expire_time)

    stream = property(lambda self: self._conn, doc="The lease stream open now, if any.")

    async def close_stream(self) -> None:
        """Close the lease stream, if any (the next round opens a new one); never raises."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _refuse_rs_certificate(self, addr: str, timeout_s: float) -> bool:
        """True (the stream closed, the refusal logged and counted) when the RS at ``addr``
        serves a revoked certificate (:class:`observer_agent.rs_certificate.RsCertificateCheck`)."""
        why = await self.rs_cert.refusal(addr, timeout_s)
        if why is None:
            return False
        await self.close_stream()
        self.registered = False
        self.refusals["rs_certificate_revoked"] = self.refusals.get("rs_certificate_revoked", 0) + 1
        self.repeat_log.log(logging.ERROR, f"revoked {addr}", "%s", why, extra={"rs": addr})
        return True

    async def run(self, stop: asyncio.Event | None) -> None:
        """Try RSs one after the other until ``stop`` is set: register, renew on the same
        stream every ``heartbeat_interval``, move on after a failure or a refusal; the wait
        between rounds ends early on the leader's heartbeat request
        (:meth:`heartbeat_requested`). Catches every exception but ``CancelledError``; does
        not close the stream when it returns (:meth:`close_stream` does)."""
        self._stop = stop
        self._wake = wake = asyncio.Event()
        while not is_set(self._stop):
            # A request of the leader during this round still ends the wait after it.
            wake.clear()
            try:
                delay_s = await self._lease_round()
            except Exception:
                self.log.exception("unexpected error in the lease loop")
                await self.close_stream()
                self.registered = False
                delay_s = self.settings.heartbeat_interval / 1e6
            await sleep_unless_woken(self._stop, wake, delay_s)

    async def _lease_round(self) -> float:
        """Try one RS: register, then renew on the same stream until it fails or refuses.

        Returns the seconds to wait before the next round: :meth:`retry_delay_us` after a
        refusal (backing off while an RS keeps refusing); after an attempt without an answer
        the reconnect backoff's next wait (:class:`obcommon.backoff.Backoff`: full jitter,
        growing from 100 ms to at most 2 s by default); after losing a stream that was
        renewing, a random fraction of the backoff's base (then the same RS is tried first),
        so that agents that lost the same RS at the same instant do not reconnect together
        (10,000 TLS handshakes at once after an RS restart).
        """
        self._check_lease_lapse()
        hb_s = self.settings.heartbeat_interval / 1e6
        timeout_s = self.settings.rpc_timeout / 1e6
        addr = self.rs.next_address()
        conn = self._conn
        if conn is not None and (conn.addr != addr or conn.broken):
            await self.close_stream()
            conn = None
        if (conn is None or not self.rs_cert.current(addr)) and await self._refuse_rs_certificate(
            addr, timeout_s
        ):
            return self.reconnect.next_delay_us() / 1e6
        conn = self._conn
        if conn is None:
            conn = self._conn = LeaseStream(addr, self.security, self.reconnect.policy)
        loop = asyncio.get_running_loop()
        renewed = False
        while not is_set(self._stop):
            if (
                conn.outstanding is None
                and not self.rs_cert.current(addr)
                and await self._refuse_rs_certificate(addr, timeout_s)
            ):
                # The list that came with the last answer revokes this RS's own certificate.
                return self.reconnect.next_delay_us() / 1e6
            if conn.outstanding is None and conn.generation != self.security.generation():
                # Rotated certificates: renewing over the old connection would leave a bad
                # new certificate unnoticed until the next reconnect.
                self.log.info("certificates rotated: opening a new lease stream to %s", addr)
                await self.close_stream()
                conn = self._conn = LeaseStream(addr, self.security, self.reconnect.policy)
            started = loop.time()
            error: Exception | None = None
            try:
                if conn.outstanding is None:
                    resp = await conn.exchange(self.build_lease_request(), timeout_s)
                else:
                    resp = await conn.await_answer(timeout_s)
            except LateAnswer as e:
                # Waited on only while the lease the RS granted still has an rpc_timeout to
                # run: with a short lease_time the agent moves on as before (a standby may be
                # taking over), with the default 10 s it waits up to 8 s.
                if (
                    loop.time() - conn.sent_at < MAX_LATE_ANSWER_TIMEOUTS * timeout_s
                    and self.clock.now_us() < self.lease_expire_time - self.settings.rpc_timeout
                ):
                    # Keep the connection and the request: the answer is late, not lost.
                    self.refusals["late_answer"] = self.refusals.get("late_answer", 0) + 1
                    self.repeat_log.warning(
                        f"late {addr}",
                        "lease answer from %s is late (%s); waiting on the same stream",
                        addr,
                        describe_exception(e),
                        extra={"rs": addr},
                    )
                    continue
                error = e
            except Exception as e:
                error = e
            if error is not None:
                # No answer: counted as a refusal so a dashboard sees an agent cut off.
                self.refusals["rpc_failed"] = self.refusals.get("rpc_failed", 0) + 1
                await self.close_stream()
                self.registered = False
                if renewed:
                    delay_s = self.reconnect.first_delay_us() / 1e6
                    self.log.warning(
                        "lease stream to %s lost (%s); reconnecting in %.3fs",
                        addr,
                        describe_exception(error),
                        delay_s,
                    )
                    self.rs.prefer(addr)
                    return delay_s
                self.repeat_log.warning(
                    f"unreachable {addr}",
                    "cannot get a lease from %s: %s",
                    addr,
                    describe_exception(error),
                    extra={"rs": addr},
                )
                return self.reconnect.next_delay_us() / 1e6
            self.metrics.lease_renewal_seconds.observe(loop.time() - started)
            if not self.handle_response(resp, addr):
                # The stream stays open: with a single RS the next attempt reuses it.
                return self.retry_delay_us() / 1e6
            renewed = True
            if self.consume_heartbeat_now():
                continue
            await sleep_unless_stopped(self._stop, hb_s - (loop.time() - started))
        return 0.0
