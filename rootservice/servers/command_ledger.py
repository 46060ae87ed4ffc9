"""The RS commands sent to each agent and not yet known applied.

Every ``ApplyReplicas`` and ``RequestHeartbeat`` the :class:`rootservice.servers.agent_client.AgentClient`
sends takes a sequence number from :meth:`CommandLedger.issue`: ``rs_epoch << 32 | n``, so the
commands of a new RS leader sort above the old one's on an agent that keeps the highest
applied. A command is settled when its call returns (the agent answers after applying), or
when a heartbeat reports an ``applied_command_seq`` at least its number; a call that failed
for any reason but its deadline (the agent is unreachable or refused it) never reached the
apply step and is dropped. What is left is what the lag detector
(:mod:`rootservice.servers.lag_detector`) judges: the send time of the oldest one.

Thread-safe (RPCs are sent from many threads); monotonic microseconds.
"""

from __future__ import annotations

import threading

#: Bits of the per-epoch counter in a sequence number.
SEQ_BITS = 32


class CommandLedger:
    """Per server: the next number and the unapplied commands ``{seq: sent_mono}``."""

    def __init__(self) -> None:
        """Empty."""
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}
        self._pending: dict[str, dict[int, int]] = {}
        self._last: dict[str, int] = {}

    def issue(self, server: str, epoch: int, mono: int) -> int:
        """A new sequence number for a command to ``server`` under RS ``epoch``, sent at
        ``mono``; pending until settled."""
        with self._lock:
            n = self._next.get(server, 0) + 1
            self._next[server] = n
            seq = (epoch << SEQ_BITS) | (n & ((1 << SEQ_BITS) - 1))
            self._pending.setdefault(server, {})[seq] = mono
            self._last[server] = mono
            return seq

    def settled(self, server: str, seq: int) -> None:
        """Command ``seq`` was applied (its call returned) or never arrived (its call failed
        short of its deadline)."""
        with self._lock:
            self._pending.get(server, {}).pop(seq, None)

    def applied(self, server: str, highest: int) -> None:
        """``server`` reports every command up to ``highest`` applied."""
        if not highest:
            return
        with self._lock:
            p = self._pending.get(server)
            if p:
                for seq in [s for s in p if s <= highest]:
                    del p[seq]

    def oldest_unapplied(self, server: str) -> int | None:
        """The send time (monotonic) of ``server``'s oldest unapplied command, None if none."""
        with self._lock:
            p = self._pending.get(server)
            return min(p.values()) if p else None

    def pending_servers(self) -> frozenset[str]:
        """The servers with at least one unapplied command, as of now (one lock for a round
        over every server rather than one per server)."""
        with self._lock:
            return frozenset(k for k, p in self._pending.items() if p)

    def last_issued(self, server: str) -> int | None:
        """When (monotonic) the last command to ``server`` was sent, None if never."""
        with self._lock:
            return self._last.get(server)

    def forget(self, server: str) -> None:
        """Drop ``server``'s unapplied commands (its lease expired, it left the whitelist)."""
        with self._lock:
            self._pending.pop(server, None)

    def clear(self) -> None:
        """Forget everything (step down)."""
        with self._lock:
            self._next.clear()
            self._pending.clear()
            self._last.clear()
