"""Whether a benchmark window measured the server, or the machine it ran on.

``make bench`` (tests/bench/heartbeat_bench.py) runs the server under test and its load
generators on the same machine. When together they fill the cores the bench may use, every
process waits for a core: the latency then includes the scheduler's queue and the load
generators' own lag, the offered load falls short of what was asked, and a ratio between
two configurations compares two disturbed runs. :func:`verdict` judges one measured window
from the samples the bench already takes; :func:`withheld` says whether a ratio between two
windows may be shown.

Codes (one letter each, printed beside every figure; ``ok`` when none applies):

- ``M``: the machine was saturated: its usable cores (the process's CPU affinity, e.g.
  ``taskset -c 1``) were at least :data:`MACHINE_BUSY_SHARE` busy over the window, whoever
  used them.
- ``G``: a load generator was saturated: one of them used at least :data:`LOADGEN_CORE` of a
  core.
- ``S``: the server used at least :data:`SERVER_CORE` of one core: it is at its one-core
  capacity (its own queueing is in the latency, which is a finding about the server, not a
  disturbance of the bench).
- ``L``: the server did not keep up: it answered less than :data:`ANSWERED_SHARE` of the
  offered heartbeats per second, or its p99 latency was not below the heartbeat period.

``M`` and ``G`` make a window *saturated*: its figures describe the machine as much as the
server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Busy share of the usable cores from which the machine counts as saturated. The kernel
#: accounts CPU time in ticks and the bench's own parent process and psutil's sampling use a
#: few percent, so a share of 0.9 means the run queue was rarely empty: a process ready to
#: run (the server's event loop, a generator's send) waited for a core much of the time.
MACHINE_BUSY_SHARE = 0.90
#: CPU (cores) of one load generator from which it counts as saturated. Each generator is
#: one asyncio event loop on one thread: past ~85% of a core its timers fire late (the send
#: lag grows), so it offers less than the asked rate and its latency samples include its
#: own queueing.
LOADGEN_CORE = 0.85
#: CPU (cores) of the server from which it is at its one-core capacity. The RS and the echo
#: server handle every RPC on one Python event loop (one thread holding the GIL; gRPC's
#: C-core threads add a little): near one core the requests queue inside the server.
SERVER_CORE = 0.90
#: Share of the offered heartbeats per second that must be answered in the window for the
#: server to have kept up. The window's edges (requests in flight when it starts and stops)
#: and the jittered starts move a healthy run's share by a percent or two; missing one
#: heartbeat in twenty is more than that.
ANSWERED_SHARE = 0.95


@dataclass(frozen=True)
class Verdict:
    """The judgement of one measured window: ``busy_share`` (busy CPU of the usable cores
    over their number, 0..1), ``answered_share`` (answered / offered heartbeats per second),
    the four flags of the module's codes and ``reasons`` (one readable sentence per flag
    raised, with the figure and the threshold)."""

    busy_share: float
    usable_cores: int
    answered_share: float
    machine_saturated: bool
    loadgen_saturated: bool
    server_at_core: bool
    kept_up: bool
    reasons: tuple[str, ...]

    @property
    def saturated(self) -> bool:
        """The machine or a load generator was full: the figures are disturbed."""
        return self.machine_saturated or self.loadgen_saturated

    @property
    def codes(self) -> str:
        """``M,G,S,L`` (those that apply, in that order), or ``ok``."""
        flags = (
            ("M", self.machine_saturated),
            ("G", self.loadgen_saturated),
            ("S", self.server_at_core),
            ("L", not self.kept_up),
        )
        return ",".join(c for c, on in flags if on) or "ok"

    def as_json(self) -> dict[str, Any]:
        """The verdict as the bench's JSON keeps it (every field, plus ``saturated`` and
        ``codes``)."""
        return {
            "busy_share": self.busy_share,
            "usable_cores": self.usable_cores,
            "answered_share": self.answered_share,
            "machine_saturated": self.machine_saturated,
            "loadgen_saturated": self.loadgen_saturated,
            "server_at_core": self.server_at_core,
            "kept_up": self.kept_up,
            "saturated": self.saturated,
            "codes": self.codes,
            "reasons": list(self.reasons),
        }


def verdict(
    *,
    busy_cores: float,
    usable_cores: int,
    server_cpu_cores: float,
    loadgen_cpu_cores: Sequence[float],
    hb_per_s: float,
    offered_hb_per_s: float,
    p99_ms: float,
    period_s: float,
) -> Verdict:
    """Judge one window. ``busy_cores``: busy CPU seconds of the usable cores per wall
    second; ``usable_cores``: how many cores the bench may use (its CPU affinity);
    ``server_cpu_cores`` and ``loadgen_cpu_cores`` (one per generator): CPU seconds per wall
    second; ``hb_per_s``: heartbeats answered per second, ``offered_hb_per_s``: asked (agents
    / period); ``p99_ms``: the window's p99 latency; ``period_s``: the heartbeat period.
    Each threshold is the module's constant of that name; a figure equal to a threshold
    raises its flag. Raises ValueError when ``usable_cores``, ``offered_hb_per_s`` or
    ``period_s`` is not positive."""
    if usable_cores < 1:
        raise ValueError(f"usable_cores must be at least 1, not {usable_cores}")
    if offered_hb_per_s <= 0 or period_s <= 0:
        raise ValueError(
            f"offered_hb_per_s ({offered_hb_per_s}) and period_s ({period_s}) must be positive"
        )
    busy_share = busy_cores / usable_cores
    answered = hb_per_s / offered_hb_per_s
    reasons: list[str] = []
    machine = busy_share >= MACHINE_BUSY_SHARE
    if machine:
        # Who filled them: a run pinned to a core that other work shares is saturated by it.
        others = max(0.0, busy_cores - server_cpu_cores - sum(loadgen_cpu_cores))
        reasons.append(
            f"machine {busy_cores:.2f} of {usable_cores} usable "
            f"core{'s' if usable_cores > 1 else ''} busy "
            f"({busy_share:.0%} >= {MACHINE_BUSY_SHARE:.0%}: server {server_cpu_cores:.2f}, "
            f"load generators {sum(loadgen_cpu_cores):.2f}, others {others:.2f})"
        )
    full_gens = [(i, c) for i, c in enumerate(loadgen_cpu_cores) if c >= LOADGEN_CORE]
    reasons.extend(
        f"load generator {i} at {c:.2f} core (>= {LOADGEN_CORE:.2f})" for i, c in full_gens
    )
    server = server_cpu_cores >= SERVER_CORE
    if server:
        reasons.append(f"server at {server_cpu_cores:.2f} of one core (>= {SERVER_CORE:.2f})")
    short = answered < ANSWERED_SHARE
    if short:
        reasons.append(
            f"answered {hb_per_s:,.0f} of {offered_hb_per_s:,.0f} hb/s offered "
            f"({answered:.0%} < {ANSWERED_SHARE:.0%})"
        )
    late = p99_ms >= period_s * 1000
    if late:
        reasons.append(f"p99 {p99_ms:,.0f} ms >= the period ({period_s * 1000:,.0f} ms)")
    return Verdict(
        busy_share=busy_share,
        usable_cores=usable_cores,
        answered_share=answered,
        machine_saturated=machine,
        loadgen_saturated=bool(full_gens),
        server_at_core=server,
        kept_up=not (short or late),
        reasons=tuple(reasons),
    )


def withheld(
    config: str, sat: Mapping[str, Any], ref_config: str, ref_sat: Mapping[str, Any]
) -> str | None:
    """Why the ratio ``config`` / ``ref_config`` must not be shown, or None when it may be.
    ``sat`` and ``ref_sat`` are the windows' :meth:`Verdict.as_json`. A ratio is shown only
    where neither window was saturated (``M`` / ``G``: both sides must describe their
    server, not the machine) and the reference - the denominator, e.g. the echo server -
    kept up (a reference that lagged understates the cost the ratio divides by). The
    numerator's own lag or one-core capacity does not withhold it: that is what the ratio
    is there to show. The reason starts with ``saturated:`` when a window was saturated,
    else with ``<ref_config> did not keep up:``."""
    parts = []
    for name, s in ((config, sat), (ref_config, ref_sat)):
        if s["saturated"]:
            why = [r for r in s["reasons"] if r.startswith(("machine", "load generator"))]
            parts.append(f"{name}: {'; '.join(why)}")
    if parts:
        if not ref_sat["kept_up"]:
            parts.append(f"{ref_config} did not keep up")
        return "saturated: " + "; ".join(parts)
    if not ref_sat["kept_up"]:
        why = [r for r in ref_sat["reasons"] if r.startswith(("answered", "p99"))]
        return f"{ref_config} did not keep up: {'; '.join(why)}"
    return None
