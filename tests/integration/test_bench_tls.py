"""``make bench`` over mutual TLS ("Benchmark"), with real processes: the load
generator (tests/bench/loadgen.py, both clients) heartbeats the echo server over mutual TLS
with one node certificate per simulated agent, a node certificate of another CA gets no
answer, and one short heartbeat_bench run puts the RS over TLS beside the RS in plaintext.
No figure is asserted: only that the traffic flows (or is refused) and the report's shape."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.bench import heartbeat_bench as hb
from tests.bench.bench_pki import BenchPki
from tests.support.cluster import wait_until
from tests.support.ports import free_port
from tests.support.timescale import scaled

pytestmark = pytest.mark.integration

PORT_BASE = 20000
AGENTS = 3


def start_echo(children: hb.Children, tmp: Path, pki: BenchPki) -> str:
    addr = f"127.0.0.1:{free_port()}"
    certs = pki.server_dir(tmp / "echo-certs", addr)
    argv = [sys.executable, str(hb.ECHO), "--addr", addr, "--certs-dir", str(certs)]
    echo = children.start("echo", argv, tmp / "echo.log", True)
    line = echo.next_line(time.monotonic() + scaled(30))
    assert line is not None and line.startswith("READY "), echo.tail()
    return addr


def start_loadgen(
    children: hb.Children, tmp: Path, addr: str, client: str, node_certs: Path, ready_s: float
) -> hb.Child:
    argv = [
        sys.executable,
        str(hb.LOADGEN),
        "--target",
        addr,
        "--first",
        "0",
        "--count",
        str(AGENTS),
        "--port-base",
        str(PORT_BASE),
        "--period",
        "0.2",
        "--timeout",
        "2",
        "--client",
        client,
        "--ready-timeout",
        str(ready_s),
        "--connect-spread",
        "0.2",
        "--node-certs",
        str(node_certs),
    ]
    return children.start(f"loadgen-{client}", argv, tmp / f"loadgen-{client}.log", True)


@pytest.mark.parametrize("client", ["raw", "grpc"])
def test_every_agent_heartbeats_over_its_own_tls_connection(tmp_path: Path, client: str) -> None:
    pki = BenchPki.create(tmp_path / "pki")
    pki.add_nodes(range(PORT_BASE, PORT_BASE + AGENTS))
    children = hb.Children()
    try:
        addr = start_echo(children, tmp_path, pki)
        gen = start_loadgen(children, tmp_path, addr, client, pki.nodes_dir, 30)
        ready = gen.expect("ready", 60)
        assert ready["tls"] is True
        assert ready["answered"] == AGENTS, gen.tail()
        assert ready["channels"] == AGENTS  # one connection per agent
        assert ready["tls_load"]["contexts"] == AGENTS
        assert ready["connect_failures"] == 0
        gen.send("start")
        gen.send("mark")

        def every_agent_answered() -> bool:
            # Each agent's first accepted lease since "mark" (0 while it has none).
            gen.send("recovery")
            return all(t > 0 for t in gen.expect("recovery", 30)["recovered_at"])

        wait_until(every_agent_answered, 30, 0.1, message="every agent answered over TLS")
        gen.send("stop")
        window = gen.expect("window", 30)
        assert window["responses"] >= AGENTS
        assert window["errors"] == {}
        assert window["stream_failures"] == 0
    finally:
        children.close()


def test_a_node_certificate_of_another_ca_gets_no_answer(tmp_path: Path) -> None:
    pki = BenchPki.create(tmp_path / "pki")
    other = BenchPki.create(tmp_path / "other")
    other.add_nodes(range(PORT_BASE, PORT_BASE + AGENTS))
    # The agents trust the right CA but present certificates of another one.
    forged = tmp_path / "forged"
    shutil.copytree(other.nodes_dir, forged)
    for d in [forged, *(forged / str(p) for p in range(PORT_BASE, PORT_BASE + AGENTS))]:
        (d / "ca.crt").unlink()
        shutil.copyfile(pki.nodes_dir / "ca.crt", d / "ca.crt")
    children = hb.Children()
    try:
        addr = start_echo(children, tmp_path, pki)
        gen = start_loadgen(children, tmp_path, addr, "raw", forged, 2)
        ready = gen.expect("ready", 30)
        assert ready["answered"] == 0
        # The server's refusal reaches the client as a failed handshake or a lost connection.
        log = (tmp_path / "loadgen-raw.log").read_text()
        assert "failed" in log or "connection lost" in log, log
    finally:
        children.close()


def test_short_bench_runs_the_rs_over_tls_beside_plaintext(tmp_path: Path) -> None:
    out = tmp_path / "hb.json"
    status = hb.main(
        [
            "--agents",
            "20",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--servers",
            "rs-tls,rs",
            "--connect-spread",
            "0.5",
            "--out",
            str(out),
        ]
    )
    assert status == 0
    doc = json.loads(out.read_text())
    by = {r["config"]: r for r in doc["results"]}
    assert set(by) == {"rs-tls", "rs"}
    for r in by.values():
        # The RS took every agent's lease: over TLS only from node certificate X for X.
        assert r["rs_alive"] == 20
        assert r["errors"] == {} and r["stream_failures"] == 0
        assert r["connect"]["connections"] == 20
    assert by["rs-tls"]["connect"]["loadgen_tls_load"][0]["contexts"] == 10
    assert doc["certificates"]["node_certificates"] == 20
    assert set(doc["ratios"][0]) == {"agents", "round", "rs_tls/rs"}
