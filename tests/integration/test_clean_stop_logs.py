"""A clean SIGTERM of a real ``rootservice`` and a real ``observer-agent``:
exit code 0, an INFO "stopping" / "stopped" line, nothing at ERROR and no traceback; the
agent run with ``--log-format json`` writes one JSON object per line in the shared format."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cluster import ProcSet, agent_cmd, rs_cmd, wait_until
from tests.support.ports import free_port


def _no_errors(text: str) -> None:
    assert "Traceback" not in text, text
    assert " ERROR " not in text and '"level": "ERROR"' not in text, text


def test_sigterm_is_a_clean_info_stop_for_rs_and_agent(procs: ProcSet, tmp_path: Path) -> None:
    rs_addr = f"127.0.0.1:{free_port()}"
    rs = procs.start(
        rs_cmd(f"sqlite:///{tmp_path}/rs.db", rs_addr, tmp_path / "rs", insecure=True), "rs"
    )
    rs.wait_healthy(rs_addr, timeout_s=60)
    agent_addr = f"127.0.0.1:{free_port()}"
    agent = procs.start(
        agent_cmd(
            rs_addr,
            agent_addr,
            free_port(),
            "z1",
            tmp_path / "agent",
            insecure=True,
            heartbeat_interval="200ms",
            log_format="json",
        ),
        "agent",
    )
    # The RS waits for BOOTSTRAP: the agent's lease is refused (NOT_MASTER), logged once.
    wait_until(lambda: "lease refused" in agent.log_text(), 60, message="a lease refusal")

    assert agent.stop(timeout_s=20) == 0
    lines = [json.loads(line) for line in agent.log_text().splitlines() if line.strip()]
    assert lines and all(
        {"time", "level", "component", "address", "logger", "message"} <= set(o) for o in lines
    )
    assert {o["component"] for o in lines} == {"agent"}
    assert {o["address"] for o in lines} == {agent_addr}
    assert [o for o in lines if o["level"] == "ERROR"] == []
    assert sum("lease refused" in o["message"] for o in lines) == 1  # rate-limited
    last = lines[-1]
    assert (last["level"], last["message"]) == ("INFO", f"observer agent {agent_addr} stopped")

    assert rs.stop(timeout_s=30) == 0
    text = rs.log_text()
    _no_errors(text)
    assert f" INFO rs {rs_addr} rootservice: stopping: signal received" in text
    assert text.rstrip().splitlines()[-1].endswith(f"root service {rs_addr} stopped")
