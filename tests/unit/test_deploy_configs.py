"""The monitoring files of deploy/: the Prometheus scrape configuration and
recording rules, and the Grafana dashboard. Their structure is checked, and every metric
name they use must be in a real exposition of an in-process RS and agent (parsed with
prometheus_client's parser), so that renaming a metric cannot silently blank a panel.

The PromQL itself is checked by ``promtool``, and the configuration proved by a real
Prometheus scraping a real RS and agent with it, in tests/integration/test_prometheus.py;
here only the structure and the metric names are checked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from obcommon.clock import FakeClock
from rootservice.api.dispatch import run_statement
from rootservice.api.lease_servicer import LeaseServicer
from tests.support.harness import ROOT, SEEDED, hb, make_rs
from tests.unit.observer_agent.helpers import RS1, make_agent, ok_response

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
RULES = DEPLOY / "prometheus" / "rules.yml"
GRAFANA = DEPLOY / "grafana" / "oceanbase-rs.json"

#: A metric name in PromQL: ours (ob_rs_ / ob_agent_) or a recording rule's (level:name:op).
NAME = re.compile(r"(?<![\w:\"'])((?:ob_(?:rs|agent)_\w+)|(?:[a-z_]+:[a-z0-9_]+:[a-z0-9_]+))")


def exposed_names(text: str) -> set[str]:
    """Every sample name an exposition can hold: counters with ``_total``, histograms with
    ``_bucket`` / ``_sum`` / ``_count``, gauges as they are."""
    out: set[str] = set()
    for fam in text_string_to_metric_families(text):
        if fam.type == "counter":
            out.add(fam.name + "_total")
        elif fam.type == "histogram":
            out.update(fam.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            out.add(fam.name)
        out.update(s.name for s in fam.samples)
    return out


def real_exposition(db_url: str, tmp_path: Path) -> set[str]:
    """The names exposed by an RS and an agent after a few real events (heartbeats, a
    statement, a lease renewal), so the labelled families have samples too."""
    rs = make_rs(db_url, tmp_path / "rs")
    servicer = LeaseServicer(rs)
    for server, zone in SEEDED:
        servicer._handle(hb(server, zone))
    servicer._handle(hb("127.0.0.1:3999", SEEDED[0][1]))
    run_statement(rs, "SELECT zone FROM __all_zone", ROOT)
    rs.persist.run_once()
    clock = FakeClock()
    agent = make_agent(tmp_path / "agent", clock)
    agent.handle_response(ok_response(clock), RS1)
    agent.probe_disk_now()
    names = exposed_names(generate_latest(rs.metrics.registry).decode())
    return names | exposed_names(generate_latest(agent.metrics.registry).decode())


def grafana_exprs(dash: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def test_prometheus_scrapes_rs_and_agents_over_https_with_a_client_certificate() -> None:
    conf = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    assert set(jobs) == {"ob-rootservice", "ob-agent"}
    for job in jobs.values():
        assert job["scheme"] == "https"
        assert job["metrics_path"] == "/metrics"
        tls = job["tls_config"]
        assert {"ca_file", "cert_file", "key_file"} <= set(tls)
        assert tls["cert_file"].endswith("client.prometheus.crt")
        targets = [t for sc in job["static_configs"] for t in sc["targets"]]
        assert targets
    assert all(t.endswith(":8080") for t in jobs["ob-rootservice"]["static_configs"][0]["targets"])
    assert all(t.endswith(":8088") for t in jobs["ob-agent"]["static_configs"][0]["targets"])
    assert conf["rule_files"] == ["rules.yml"]
    assert "SELECT" in PROMETHEUS.read_text(encoding="utf-8")  # the privilege is documented


def test_grafana_dashboard_structure() -> None:
    dash = json.loads(GRAFANA.read_text(encoding="utf-8"))
    assert dash["uid"] and dash["title"] and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["targets"], p["title"]
        assert {"x", "y", "w", "h"} <= set(p["gridPos"])
        for t in p["targets"]:
            assert t["expr"] and t["refId"]


def test_every_metric_name_used_exists_in_a_real_exposition(db_url: str, tmp_path: Path) -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    recorded = {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    exposed = real_exposition(db_url, tmp_path)
    used = grafana_exprs(json.loads(GRAFANA.read_text(encoding="utf-8")))
    seen: set[str] = set()
    for expr in used + list(recorded.values()):
        for name in NAME.findall(expr):
            seen.add(name)
            if ":" in name:
                assert name in recorded, f"{name} used but not recorded in rules.yml"
            else:
                assert name in exposed, f"{name} in {expr!r} is not exposed"
    # The check looked at something: the heartbeat, servers, term and agent families.
    assert {"ob_rs_heartbeats_received_total", "ob_rs_servers", "ob_rs_leader"} <= seen
    assert {"ob_agent_lease_margin_seconds", "ob_agent_replicas"} <= seen
    # Every recording rule is used by the dashboard.
    assert set(recorded) <= seen


def test_the_name_check_catches_a_missing_metric() -> None:
    # Guards the test above: a renamed metric must be caught, not pass unnoticed.
    names = exposed_names(
        "# TYPE ob_rs_x counter\nob_rs_x_total 1\n# TYPE ob_rs_h histogram\n"
        'ob_rs_h_bucket{le="+Inf"} 1\nob_rs_h_sum 1\nob_rs_h_count 1\n'
    )
    found = NAME.findall('rate(ob_rs_x_total{job="a"}[1m]) + ob_rs_y + job:ob_rs_h:p99_5m')
    assert found == ["ob_rs_x_total", "ob_rs_y", "job:ob_rs_h:p99_5m"]
    assert "ob_rs_x_total" in names and "ob_rs_h_bucket" in names and "ob_rs_y" not in names
