"""The RS's own lease path without gRPC (``make bench-lease-path``): CPU time per heartbeat
of ``LeaseServicer.LeaseStream`` -> ``HeartbeatIntake.receive_hb`` -> the lease response,
in this process, for N lease streams of N whitelisted servers.

``make bench`` gives the RS's CPU per heartbeat beside the bare gRPC echo's; the difference
is the RS's own Python, spread over gRPC's callbacks, and a profile of the server cannot
separate the two well. This measures the RS's part alone: an in-process RS (SQLite, a fake
clock, the test harness of tests/support/harness.py) with ``--agents`` servers seeded as
``make bench`` seeds them, one ``LeaseStream`` per server fed by an iterator that returns
the server's next request at once, every stream's first request answered (the online
transition, through the lease queue), the pacing those make the queue turn on left to end,
then ``--rounds`` rounds of one renewal per stream,
timed with ``time.process_time``. Each renewal takes the path a renewal takes on an RS that
keeps up (answered at once in its stream's task, ``LeaseQueue.take_now``). Nothing is
asserted on time; the exit status is 1 only when a request was refused.

Usage::

    .venv/bin/python -m tests.bench.lease_path_bench                 # 5,000 streams, 20 rounds
    .venv/bin/python -m tests.bench.lease_path_bench --agents 50 --rounds 2 --profile

``--profile`` adds cProfile's top functions by own time (which inflates every call: read its
shares, not its times). ``--cold`` evicts the caches before each renewal (8 MiB copied, more
than this machine's L2 and most of its last-level cache) and gives the median and mean time
of one renewal so handled: in the server, gRPC's and TLS's work and the kernel's between two
heartbeats evict the lease path's code and data the same way, and its handling time there
(``hb_handle_us``) matches this figure, not the warm one. Writes ``.bench/lease_path.json``
(``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from obcommon.proto import obrpc_pb2
from rootservice.api.lease_servicer import LeaseServicer
from tests.bench.heartbeat_bench import PORT_BASE, SQL_PORT, ZONES, seed_database
from tests.support.harness import hb, make_rs


class _Requests:
    """A lease stream's requests: the same request, its ``seq`` raised, returned at once."""

    def __init__(self, req: obrpc_pb2.LeaseRequest) -> None:
        self.req = req

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> obrpc_pb2.LeaseRequest:
        self.req.seq += 1
        return self.req


#: Bytes copied before each renewal with ``--cold``.
EVICT_BYTES = 8 << 20


async def _run(
    servicer: LeaseServicer, n: int, rounds: int, profile: bool, cold: bool = False
) -> dict[str, Any]:
    reqs = [hb(f"127.0.0.1:{PORT_BASE + i}", ZONES[i % 3], sql_port=SQL_PORT) for i in range(n)]
    streams: list[AsyncIterator[obrpc_pb2.LeaseResponse]] = [
        servicer.LeaseStream(_Requests(r), None)  # type: ignore[arg-type]
        for r in reqs
    ]
    firsts = await asyncio.gather(*(s.__anext__() for s in streams))
    refused = [f.error.name for f in firsts if f.error.code]
    # Thousands of first requests at once make the loop's rounds long enough to turn the
    # pacing on (for BUSY_HOLD_US of real time), and the harness's clock stands still, so a
    # paced renewal would wait forever: wait until the pacing is off (bounded: 100 x 0.1 s).
    queue = servicer.rs.lease_queue
    for _ in range(100):
        if not queue.saturated:
            break
        await asyncio.sleep(0.1)
    if queue.saturated:
        raise RuntimeError("the lease queue's pacing stayed on for 10 s")
    for s in streams:  # one renewal each before the clock starts
        refused += [a.error.name for a in [await s.__anext__()] if a.error.code]
    if cold:
        return {**await _run_cold(streams, rounds), "agents": n, "refused": len(refused)}
    prof = cProfile.Profile() if profile else None
    t0 = time.process_time()
    if prof is not None:
        prof.enable()
    for _ in range(rounds):
        for s in streams:
            resp = await s.__anext__()
            if resp.error.code:
                refused.append(resp.error.name)
    if prof is not None:
        prof.disable()
    cpu_s = time.process_time() - t0
    out: dict[str, Any] = {
        "agents": n,
        "heartbeats": n * rounds,
        "cpu_us_per_heartbeat": cpu_s / (n * rounds) * 1e6,
        "refused": len(refused),
        "refusals": sorted(set(refused)),
    }
    if prof is not None:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(20)
        out["profile"] = text.getvalue()
    return out


async def _run_cold(
    streams: list[AsyncIterator[obrpc_pb2.LeaseResponse]], rounds: int
) -> dict[str, Any]:
    """``rounds`` renewals of each stream, each after evicting the caches; the wall time of
    each renewal alone (the eviction is outside it), in microseconds."""
    src, dst = bytearray(EVICT_BYTES), bytearray(EVICT_BYTES)
    times: list[float] = []
    refused: list[str] = []
    for _ in range(rounds):
        for s in streams:
            dst[:] = src
            t0 = time.perf_counter_ns()
            resp = await s.__anext__()
            times.append((time.perf_counter_ns() - t0) / 1000)
            if resp.error.code:
                refused.append(resp.error.name)
    return {
        "heartbeats": len(times),
        "cold_us_p50": statistics.median(times),
        "cold_us_mean": statistics.fmean(times),
        "cold_refused": refused,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints the figure and writes ``--out``. Returns 1 when any request
    was refused, else 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--cold", action="store_true", help="evict the caches before each renewal")
    p.add_argument("--out", default=".bench/lease_path.json")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lease-path-") as d:
        tmp = Path(d)
        url = f"sqlite:///{tmp}/rootservice.db"
        seed_database(url, args.agents)
        rs = make_rs(url, tmp, seed=False)
        try:
            res = asyncio.run(
                _run(LeaseServicer(rs), args.agents, args.rounds, args.profile, args.cold)
            )
        finally:
            rs.shutdown()
    if args.cold:
        res["refused"] += len(res.pop("cold_refused"))
        print(
            f"{res['agents']:,} streams, {res['heartbeats']:,} renewals, caches evicted before "
            f"each: {res['cold_us_p50']:.2f} us per renewal at the median "
            f"(mean {res['cold_us_mean']:.2f}); {res['refused']} refused"
        )
    else:
        print(
            f"{res['agents']:,} streams, {res['heartbeats']:,} renewals: "
            f"{res['cpu_us_per_heartbeat']:.2f} us of CPU per heartbeat; "
            f"{res['refused']} refused"
        )
    if "profile" in res:
        print(res["profile"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    return 1 if res["refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
