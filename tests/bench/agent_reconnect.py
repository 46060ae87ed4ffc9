"""Small reconnect-storm measurement (the agent side): one real RS on SQLite,
``N`` real agents, ``kill -9`` of the RS for ``outage`` seconds, then the RS restarted on the
same port and database. Reports, per agent, the time from the restarted RS answering its
health check to the agent's first granted lease (the ``lease granted by`` line of its JSON
log), as max / p50 / spread, and how many servers ``__all_server`` showed INACTIVE meanwhile.

A benchmark, not a test: nothing is asserted. Run from the repository root:

    python -m tests.bench.agent_reconnect --agents 20 --outage 80
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sql.client import execute, result_rows
from tests.support import pki
from tests.support.cluster import Proc, ProcSet, agent_cmd, rs_cmd, wait_until
from tests.support.ports import free_port

RS_FLAGS: dict[str, Any] = {"lease_time": "10s", "heartbeat_interval": "2s"}
AGENT_FLAGS: dict[str, Any] = {
    "heartbeat_interval": "2s",
    "rpc_timeout": "2s",
    "log_format": "json",
}


def _sql(rs_addr: str, statement: str) -> list[list[Any]]:
    resp = execute([rs_addr], statement, timeout_s=60, credentials=pki.credentials())
    if resp.error.code:
        raise RuntimeError(f"{statement}: {resp.error.name} {resp.error.message}")
    return result_rows(resp)


def _statuses(rs_addr: str) -> dict[str, str]:
    rows = _sql(rs_addr, "SELECT svr_ip, svr_port, status FROM __all_server")
    return {f"{ip}:{port}": st for ip, port, st in rows}


def _grants_after(proc: Proc, after_s: float) -> list[float]:
    """Times (seconds since the epoch) of the agent's ``lease granted`` lines after ``after_s``."""
    out = []
    for line in proc.log_text().splitlines():
        if "lease granted by" not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        t = dt.datetime.strptime(rec["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
        if t.timestamp() > after_s:
            out.append(t.timestamp())
    return out


def run(n_agents: int, outage_s: float, work: Path) -> dict[str, Any]:
    """Start the cluster in ``work``, kill and restart the RS, return the figures (seconds)."""
    procs = ProcSet(work / "logs")
    db_url = f"sqlite:///{work / 'rs.db'}"
    rs_addr = f"127.0.0.1:{free_port()}"
    try:
        rs = procs.start(rs_cmd(db_url, rs_addr, work / "rs", **RS_FLAGS), "rs")
        rs.wait_healthy(rs_addr, timeout_s=60)
        agents: dict[str, Proc] = {}
        for i in range(n_agents):
            addr = f"127.0.0.1:{free_port()}"
            agents[addr] = procs.start(
                agent_cmd(rs_addr, addr, free_port(), "z1", work / f"a{i}", **AGENT_FLAGS),
                f"agent-{i}",
            )
        for addr, p in agents.items():
            p.wait_healthy(addr, timeout_s=60)
        first, *rest = agents
        _sql(rs_addr, f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{first}'")
        for addr in rest:
            _sql(rs_addr, f"ALTER SYSTEM ADD SERVER '{addr}' ZONE 'z1'")
        wait_until(
            lambda: sum(s == "ACTIVE" for s in _statuses(rs_addr).values()) == n_agents,
            120,
            1.0,
            message="all ACTIVE",
        )
        time.sleep(3)
        rs.kill()
        time.sleep(outage_s)
        restarted = time.time()
        rs = procs.start(rs_cmd(db_url, rs_addr, work / "rs", **RS_FLAGS), "rs-again")
        rs.wait_healthy(rs_addr, timeout_s=60)
        healthy = time.time()
        inactive_seen: set[str] = set()
        deadline = time.monotonic() + 120
        back: dict[str, float] = {}
        while time.monotonic() < deadline and len(back) < n_agents:
            try:
                st = _statuses(rs_addr)
                inactive_seen |= {a for a, s in st.items() if s != "ACTIVE"}
            except Exception:
                pass
            for addr, p in agents.items():
                if addr not in back:
                    grants = _grants_after(p, restarted)
                    if grants:
                        back[addr] = grants[0]
            time.sleep(0.5)
        delays = sorted(t - healthy for t in back.values())
        return {
            "agents": n_agents,
            "outage_s": outage_s,
            "rs_restart_to_healthy_s": round(healthy - restarted, 3),
            "back": len(back),
            "max_s": round(max(delays), 3) if delays else None,
            "p50_s": round(statistics.median(delays), 3) if delays else None,
            "min_s": round(min(delays), 3) if delays else None,
            "spread_s": round(max(delays) - min(delays), 3) if delays else None,
            "inactive_seen": len(inactive_seen),
        }
    finally:
        procs.stop_all()


def main() -> None:
    """Parse ``--agents`` / ``--outage`` and print the figures as JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--outage", type=float, default=30.0, help="seconds the RS stays dead")
    ap.add_argument("--work", help="keep the logs in this directory (default: a temporary one)")
    args = ap.parse_args()
    if args.work:
        print(json.dumps(run(args.agents, args.outage, Path(args.work))))
        return
    with tempfile.TemporaryDirectory(prefix="agent-reconnect-") as d:
        print(json.dumps(run(args.agents, args.outage, Path(d))))


if __name__ == "__main__":
    main()
