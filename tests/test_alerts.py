"""POST /api/alerts with real Alertmanager v4 webhook payloads: grouped, deduplicated incidents a person can act on."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agent.alerts.incidents import first_steps, incident_key
from agent.config.settings import Settings
from server import create_app

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "alertmanager-shared-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START = 3 * 3600 + 50 * 60


@pytest.fixture
def client(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, alert_webhook_token=TOKEN)
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False)
    with TestClient(app, base_url="http://localhost") as c:
        assert c.post("/api/sweeps").status_code == 200  # the steward's latest observation
        yield c


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def alert(status: str, node: str, gpu: str, starts: datetime, ends: datetime | None, name: str = "GpuXidError") -> dict:
    labels = {"alertname": name, "severity": "critical", "layer": "node", "node": node, "Hostname": node,
              "gpu": gpu, "instance": "dcgm:9400"}
    return {"status": status, "labels": labels,
            "annotations": {"runbook": "gpu-xid-errors", "summary": f"XID 79 on {node} GPU {gpu}",
                            "description": f"dcgm-exporter reports XID 79 on GPU {gpu}."},
            "startsAt": iso(starts), "endsAt": iso(ends) if ends else "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS",
            "fingerprint": f"{abs(hash((name, node, gpu))):016x}"}


def payload(*alerts: dict) -> dict:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    return {"version": "4", "groupKey": '{}:{alertname="GpuXidError"}', "truncatedAlerts": 0, "status": status,
            "receiver": "gpu-steward", "groupLabels": {"alertname": "GpuXidError"},
            "commonLabels": {"alertname": "GpuXidError"}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts)}


def busy_node(client: TestClient) -> tuple[str, list[str]]:
    obs = client.app.state.runtime.newest_observation()
    by_node: dict[str, list[str]] = {}
    for j in obs.jobs:
        if j.node and j.state == "running":
            by_node.setdefault(j.node, []).append(j.id)
    node = max(by_node, key=lambda n: len(by_node[n]))
    return node, by_node[node]


def test_xid_storm_is_one_grouped_deduped_incident_naming_the_jobs(client):
    rt = client.app.state.runtime
    now, inbox = rt.deps.clock.now(), rt.deps.notifier.sent
    before = len(inbox)
    node, jobs = busy_node(client)
    first = alert("firing", node, "3", now - timedelta(minutes=12), None)
    second = alert("firing", node, "5", now - timedelta(minutes=8), None)
    for body in (payload(first), payload(first, second), payload(first, second)):  # Alertmanager repeats
        resp = client.post("/api/alerts", json=body, headers=AUTH)
        assert resp.status_code == 200, resp.text
    incidents = resp.json()["incidents"]
    assert len(incidents) == 1 and incidents[0]["alerts"] == 2 and incidents[0]["outcome"] == "already_told"
    messages = inbox[before:]
    assert len(messages) == 1
    text = messages[0].body
    assert f"node/{node}" in messages[0].subject and "CRITICAL" in messages[0].subject
    assert all(job in text for job in jobs)
    assert "[rb:gpu-xid-errors]" in text and "Notify the owners of jobs on the node" in text
    assert "1 alert(s)" in text  # told when the first sustained alert came; the second joined the same incident
    resolved = client.post("/api/alerts", headers=AUTH, json=payload(
        alert("resolved", node, "3", now - timedelta(minutes=12), now), alert("resolved", node, "5", now - timedelta(minutes=8), now)))
    assert resolved.json()["incidents"][0]["outcome"] == "resolved"
    assert len(inbox) == before + 1
    entries = rt.deps.audit.entries(kind="alert_incident", limit=10)
    assert sorted(e.status for e in entries) == ["executed", "resolved"]
    assert {e.target for e in entries} == {f"node/{node}"}


def test_incidents_survive_a_restart_and_are_not_told_twice(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, alert_webhook_token=TOKEN)
    sent = []
    for _ in range(2):
        with TestClient(create_app(settings, speed=0, start_s=START, run_scheduler=False),
                        base_url="http://localhost") as c:
            rt = c.app.state.runtime
            now = rt.deps.clock.now()
            c.post("/api/alerts", headers=AUTH, json=payload(alert("firing", "gpu-a", "0", now - timedelta(hours=1), None)))
            sent.extend(rt.deps.notifier.sent)
    assert len([m for m in sent if "GpuXidError" in m.subject]) == 1


def test_a_transient_blip_produces_no_message(client):
    rt = client.app.state.runtime
    now, inbox = rt.deps.clock.now(), rt.deps.notifier.sent
    before = len(inbox)
    node, _ = busy_node(client)
    blip = alert("firing", node, "1", now - timedelta(minutes=1), None, name="GpuHighTemperature")
    resp = client.post("/api/alerts", headers=AUTH, json=payload(blip))
    assert resp.json()["incidents"][0]["outcome"] == "waiting"
    gone = alert("resolved", node, "1", now - timedelta(minutes=1), now + timedelta(minutes=1), name="GpuHighTemperature")
    resp = client.post("/api/alerts", headers=AUTH, json=payload(gone))
    assert resp.json()["incidents"][0]["outcome"] == "transient"
    assert len(inbox) == before
    [entry] = rt.deps.audit.entries(kind="alert_incident", limit=10)
    assert entry.status == "skipped" and "transient" in (entry.reason or "")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}])
def test_unauthenticated_is_401_without_parsing(client, headers):
    resp = client.post("/api/alerts", content=b"{not json at all", headers={**headers, "Content-Type": "application/json"})
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"


def test_not_configured_is_404(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none")
    with TestClient(create_app(settings, speed=0, run_scheduler=False), base_url="http://localhost") as c:
        assert c.post("/api/alerts", json={}, headers=AUTH).status_code == 404


def test_malformed_payload_is_422_naming_the_field(client):
    now = client.app.state.runtime.deps.clock.now()
    bad = payload(alert("firing", "n1", "0", now, None))
    bad["alerts"][0]["startsAt"] = "yesterday"
    resp = client.post("/api/alerts", headers=AUTH, json=bad)
    assert resp.status_code == 422 and "alerts.0.startsAt" in resp.json()["detail"]
    resp = client.post("/api/alerts", headers=AUTH, json={**payload(alert("firing", "n1", "0", now, None)), "version": "3"})
    assert resp.status_code == 422 and "'version'" in resp.json()["detail"]
    resp = client.post("/api/alerts", headers=AUTH, content=b"[1, 2")
    assert resp.status_code == 422


def test_grouping_key_and_runbook_steps():
    assert incident_key({"alertname": "GpuXidError", "Hostname": "n1", "gpu": "3"}) == \
        incident_key({"alertname": "GpuXidError", "node": "n1", "gpu": "5"})
    assert incident_key({"alertname": "GpuXidError", "node": "n1"}) != incident_key({"alertname": "GpuXidError", "node": "n2"})
    assert incident_key({"alertname": "X", "pool": "a100"}).endswith("pool/a100")
    assert first_steps("1. one\n   more\n2. two\n3. three") == ["one more", "two"]


def test_rules_load_in_promtool_and_the_xid_unit_test_fires():
    promtool = subprocess.run(["which", "promtool"], capture_output=True, text=True).stdout.strip()
    if not promtool:
        import os

        if os.environ.get("CI"):
            pytest.fail("promtool is missing under CI")
        pytest.skip("promtool not installed")
    rules = ROOT / "deploy/prometheus/steward-rules.yaml"
    for args in (["check", "rules", str(rules)], ["test", "rules", str(rules.with_suffix(".test.yaml"))]):
        done = subprocess.run([promtool, *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_rule_names_an_existing_runbook_and_its_layer():
    import yaml

    from agent.retrieval.runbooks import load_runbooks

    ids = {b.id for b in load_runbooks()}
    rules = [r for g in yaml.safe_load((ROOT / "deploy/prometheus/steward-rules.yaml").read_text())["groups"]
             for r in g["rules"]]
    assert {r["labels"]["layer"] for r in rules} == {"node", "scheduling", "service", "governance"}
    for r in rules:
        assert r["annotations"]["runbook"] in ids, r["alert"]
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
    assert json.dumps(rules)  # plain data


def test_no_byte_of_an_unauthenticated_alert_body_is_read(tmp_path):
    from tests.test_api_guard import asgi_request

    settings = Settings(data_dir=tmp_path, leader_lock="none", alert_webhook_token=TOKEN)
    app = create_app(settings, speed=0, run_scheduler=False)
    for headers in ((), (("authorization", "Bearer wrong"),)):
        status, _, pulled = asgi_request(app, "POST", "/api/alerts", headers=(("content-type", "application/json"),
                                                                              *headers), blocks=32)
        assert (status, pulled) == (401, 0)
