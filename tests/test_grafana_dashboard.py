"""The Grafana dashboard (deploy/grafana): well formed, its steward metrics exist in /metrics, and every panel's
query parses and evaluates in a real Prometheus."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest

from tests.test_prometheus_integration import _get, prometheus  # noqa: F401 - the real Prometheus fixture
from tests.test_server_api import client_for, settings_for, sweep_with_approval

DASHBOARD = Path(__file__).parent.parent / "deploy" / "grafana" / "gpu-steward-dashboard.json"


def exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


def test_the_dashboard_is_provisionable():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "gpu-steward" and doc["title"] and isinstance(doc["schemaVersion"], int)
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) >= 8
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "job"} <= variables
    for panel in doc["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])


def test_every_steward_metric_the_dashboard_reads_is_exported(tmp_path):
    with client_for(settings_for(tmp_path)) as client:
        sweep_with_approval(client)
        exported = set(re.findall(r"^(steward_[a-z_]+)", client.get("/metrics").text, re.M))
    used = {m for e in exprs() for m in re.findall(r"\b(steward_[a-z_]+)", e)}
    assert used and used <= exported, used - exported


@pytest.mark.integration
def test_every_panel_query_evaluates_in_a_real_prometheus(prometheus):  # noqa: F811
    url, _ = prometheus
    for expr in exprs():
        query = expr.replace("$job", ".*")
        answer = json.loads(_get(f"{url}/api/v1/query?query={urllib.parse.quote(query)}"))
        assert answer["status"] == "success", (expr, answer)
