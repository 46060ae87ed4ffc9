"""A real Prometheus scrapes a real RS and agent with the shipped deploy/prometheus files.

Debian's ``prometheus`` server (``make prometheus`` installs it as root) runs on loopback
with a private data directory. Its configuration is a copy of the shipped
``deploy/prometheus/prometheus.yml`` where only addresses change: the scrape targets become
this test's RS and agent, the certificate directory ``/etc/prometheus/ob`` becomes the test
PKI's directory of the ``prometheus`` client (``ca.crt``, ``client.prometheus.crt`` /
``.key``, the very file names the shipped file names), and the global intervals shrink from
15 s to 1 s so that the recording rules have two samples within seconds. Scheme, metrics
path, TLS settings and rules are the shipped ones, so a scrape that succeeds proves that
they work: HTTPS with the cluster CA, the ``prometheus`` user's client certificate, and that
user's ``SELECT`` privilege as the file's comments document. ``promtool`` checks the shipped
files as they are."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from obcommon.security.certs import Role
from sql.obadmin import main as obadmin
from tests.support import pki
from tests.support.cluster import ProcSet, rs_cmd, wait_until
from tests.support.ports import free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
#: Where the shipped file expects the CA and the client pair of the ``prometheus`` user.
SHIPPED_CERTS_DIR = "/etc/prometheus/ob"
USER = "prometheus"


def _need_prometheus() -> None:
    if not (PROMETHEUS.is_file() and PROMTOOL.is_file()):
        pytest.skip(
            f"{PROMETHEUS} or {PROMTOOL} missing: install Debian's prometheus "
            "('make prometheus' does it as root; 'make setup' runs it)"
        )


def localised(shipped: dict[str, Any], targets: dict[str, list[str]], certs: Path) -> dict:
    """A copy of the shipped configuration ``shipped`` (parsed YAML) with only addresses
    changed: each job's static targets replaced by ``targets[job_name]``, the directory of
    every ``tls_config`` file moved from :data:`SHIPPED_CERTS_DIR` to ``certs``, and the
    global scrape / evaluation intervals set to 1 s (the timeout to 1 s too: it may not
    exceed the interval). Raises ``KeyError`` when a shipped job has no entry in
    ``targets``, ``AssertionError`` when a certificate path is not under the shipped
    directory."""
    conf = copy.deepcopy(shipped)
    conf["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    for job in conf["scrape_configs"]:
        job["static_configs"] = [{"targets": targets[job["job_name"]]}]
        tls = job["tls_config"]
        for key in ("ca_file", "cert_file", "key_file"):
            path = Path(tls[key])
            assert str(path.parent) == SHIPPED_CERTS_DIR, tls[key]
            tls[key] = str(certs / path.name)
    return conf


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    """The instant vector of ``expr`` from Prometheus' query API (``/api/v1/query``)."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROMTOOL), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_accepts_the_shipped_rules() -> None:
    _need_prometheus()
    r = _promtool("check", "rules", str(DEPLOY / "rules.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 4 rules found" in r.stdout + r.stderr


def test_promtool_accepts_the_shipped_config(tmp_path: Path) -> None:
    _need_prometheus()
    # promtool checks that the certificate files exist: the shipped file as it is, with
    # only its certificate directory moved (check config also checks rules.yml beside it).
    shipped = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    targets = {
        j["job_name"]: [t for sc in j["static_configs"] for t in sc["targets"]]
        for j in shipped["scrape_configs"]
    }
    conf = localised(shipped, targets, pki.certs_dir(Role.CLIENT, USER))
    conf["global"] = shipped["global"]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf), encoding="utf-8")
    shutil.copy(DEPLOY / "rules.yml", tmp_path / "rules.yml")
    r = _promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


def test_prometheus_scrapes_rs_and_agent_with_the_shipped_config(
    procs: ProcSet, tmp_path: Path
) -> None:
    _need_prometheus()
    rs_addr = f"127.0.0.1:{free_port()}"
    rs_http = f"127.0.0.1:{free_port()}"
    rs = procs.start(
        rs_cmd(f"sqlite:///{tmp_path}/rs.db", rs_addr, tmp_path / "rs", http_addr=rs_http), "rs"
    )
    rs.wait_healthy(rs_addr, timeout_s=30)
    node, agent_http = procs.start_agent_with_http(rs_addr, tmp_path / "n1")
    root = [*pki.obadmin_flags(), "--rs", rs_addr, "-e"]
    assert obadmin([*root, f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{node}'"]) == 0
    # The user the shipped file's comments tell the operator to create.
    assert obadmin([*root, f"CREATE USER {USER} IDENTIFIED BY 'p-Secret-1'"]) == 0
    assert obadmin([*root, f"GRANT SELECT ON *.* TO {USER}"]) == 0

    shipped = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    conf = localised(
        shipped,
        {"ob-rootservice": [rs_http], "ob-agent": [agent_http]},
        pki.certs_dir(Role.CLIENT, USER),
    )
    # What is not an address is the shipped file's own: scheme, path, TLS, rules.
    for mine, theirs in zip(conf["scrape_configs"], shipped["scrape_configs"], strict=True):
        for key in set(theirs) - {"static_configs", "tls_config"}:
            assert mine[key] == theirs[key]
        assert set(mine["tls_config"]) == set(theirs["tls_config"])
    conf_dir = tmp_path / "prometheus"
    conf_dir.mkdir()
    (conf_dir / "prometheus.yml").write_text(yaml.safe_dump(conf), encoding="utf-8")
    shutil.copy(DEPLOY / "rules.yml", conf_dir / "rules.yml")

    web = f"127.0.0.1:{free_port()}"
    prom = procs.start(
        [
            str(PROMETHEUS),
            f"--config.file={conf_dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={web}",
            "--log.level=warn",
        ],
        "prometheus",
    )
    base = f"http://{web}"

    seen: list[Any] = []

    def up() -> dict[str, str] | None:
        # Every target's health as Prometheus saw it (lastError says why one is down).
        try:
            with urllib.request.urlopen(f"{base}/api/v1/targets", timeout=5) as r:
                active = json.loads(r.read())["data"]["activeTargets"]
        except OSError:
            return None
        seen[:] = [(t["labels"]["job"], t["health"], t["lastError"]) for t in active]
        health = {t["labels"]["job"]: t["health"] for t in active}
        if set(health.values()) == {"up"} and set(health) == {"ob-rootservice", "ob-agent"}:
            return health
        return None

    try:
        try:
            wait_until(up, 60, message="both targets up in Prometheus")
        except AssertionError as e:
            raise AssertionError(f"{e}\ntargets: {seen}\n{procs.log_tails()}") from None
        servers = wait_until(
            lambda: _query(base, 'ob_rs_servers{job="ob-rootservice",status="ACTIVE"}') or None,
            30,
            message="ob_rs_servers{status=ACTIVE} in Prometheus",
        )
        assert servers[0]["value"][1] == "1" and servers[0]["metric"]["instance"] == rs_http
        # Every recording rule of the shipped rules.yml has a series (two scrapes needed for
        # a rate); the refusal rate has one per reason the RS counted before BOOTSTRAP.
        rules = yaml.safe_load((DEPLOY / "rules.yml").read_text(encoding="utf-8"))
        for record in [r["record"] for g in rules["groups"] for r in g["rules"]]:
            # 60 s: a loaded run (6 xdist workers on 2 cores) missed 30 s for the refusal rate.
            wait_until(lambda rec=record: _query(base, rec) or None, 60, message=record)
        agent_rate = _query(base, "instance:ob_agent_copied_bytes:rate1m")
        assert [s["metric"]["instance"] for s in agent_rate] == [agent_http]
    finally:
        prom.stop()
    assert not prom.alive
