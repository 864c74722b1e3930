"""Incident investigation: jobs on a failing node, their progress, and the runbook's cordon through the guardrail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.guardrail.decide import Facts, decide
from agent.guardrail.runbook_limits import limit_by_runbook
from core.actions import Decision, Finding, History, ProposedAction
from server import create_app
from tests.k8s_fake_api import FakeKubernetesApi
from tests.k8s_fake_cluster import gpu_node, kubeconfig
from tools.kubernetes import kubernetes_scheduler_from_settings

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "alertmanager-shared-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


# -- the Kubernetes adapter: cordon ----------------------------------------------------------------------------
@pytest.fixture
def kube(tmp_path):
    server = FakeKubernetesApi().start()
    server.store.put("nodes", gpu_node("gpu-0", 8, pool="a100"))
    sched = kubernetes_scheduler_from_settings(Settings(kubeconfig=kubeconfig(server, tmp_path), data_dir=tmp_path))
    yield server, sched
    server.stop()


def test_cordon_is_keyed_on_the_node_uid_and_idempotent(kube):
    server, sched = kube
    node = next(n for n in sched.list_nodes() if n.name == "gpu-0")
    assert node.uid and not node.unschedulable
    assert sched.cordon_node("gpu-0", uid="some-other-uid").status == "refused"
    assert not server.store.get("nodes", "", "gpu-0")["spec"].get("unschedulable")  # a namesake is never touched
    first = sched.cordon_node("gpu-0", uid=node.uid)
    assert first.status == "cordoned", first
    assert server.store.get("nodes", "", "gpu-0")["spec"]["unschedulable"] is True
    assert sched.cordon_node("gpu-0", uid=node.uid).status == "unchanged"
    assert len(server.calls("PATCH", "/nodes/gpu-0")) == 1
    assert next(n for n in sched.list_nodes() if n.name == "gpu-0").unschedulable


def test_cordon_of_a_node_that_changed_or_vanished_is_refused(kube):
    server, sched = kube
    uid = server.store.get("nodes", "", "gpu-0")["metadata"]["uid"]
    server.store.delete("nodes", "", "gpu-0")
    assert sched.cordon_node("gpu-0", uid=uid).status == "refused"
    server.store.put("nodes", gpu_node("gpu-0", 8))  # re-registered under the same name: a new uid
    out = sched.cordon_node("gpu-0", uid=uid)
    assert out.status == "refused" and "not the same node" in out.detail


# -- the guardrail ---------------------------------------------------------------------------------------------
def _health(node: str = "gpu-0", runbook: str | None = "gpu-xid-errors") -> Finding:
    return Finding(kind="node_health", target=node, target_type="node", since=NOW, detected_at=NOW,
                   evidence=f"node {node}: GPU 3 XID 79 (GPU has fallen off the bus)", gpus=1, runbook=runbook)


CORDON = ProposedAction(action="cordon", target="gpu-0", finding_kind="node_health", proposed_by="investigation",
                        target_uid="uid-1")


def test_cordon_needs_a_node_finding_and_a_human():
    policy = Policy()
    asked = decide(CORDON, Facts(now=NOW, findings=[_health()]), policy, History())
    assert asked.verdict == "needs_approval" and asked.level == 4
    alone = decide(CORDON, Facts(now=NOW, findings=[]), policy, History())
    assert alone.verdict == "deny" and "alert alone" in alone.reason
    other = decide(CORDON, Facts(now=NOW, findings=[_health("gpu-9")]), policy, History())
    assert other.verdict == "deny"
    waiting = decide(CORDON, Facts(now=NOW, findings=[_health()]), policy,
                     History(pending_approvals=[CORDON.key()]))
    assert waiting.verdict == "deny" and waiting.rule == "duplicate"
    observe = decide(CORDON, Facts(now=NOW, findings=[_health()]), Policy(mode="observe"), History())
    assert observe.verdict == "deny"


def test_a_runbook_that_proposes_cordon_keeps_it_for_a_human():
    allow = Decision(verdict="allow", rule="allow", reason="ok", level=4)
    asked = Decision(verdict="needs_approval", rule="approval", reason="level 4", level=4)
    findings = [_health()]
    for d in (allow, asked):
        kept = limit_by_runbook(d, CORDON, findings, lambda rid: 1, frozenset({"cordon"}))
        assert kept.verdict == "needs_approval" and "gpu-xid-errors" in kept.reason
        assert limit_by_runbook(d, CORDON, findings, lambda rid: 1).verdict == "deny"


# -- the scenario: an XID storm on one node --------------------------------------------------------------------
def _alert(node: str, gpu: str, starts: datetime) -> dict:
    return {"status": "firing",
            "labels": {"alertname": "GpuFallenOffBus", "severity": "critical", "layer": "node", "node": node,
                       "Hostname": node, "gpu": gpu, "xid": "79"},
            "annotations": {"runbook": "gpu-xid-errors", "summary": f"XID 79 on {node} GPU {gpu}"},
            "startsAt": starts.isoformat().replace("+00:00", "Z"), "endsAt": "0001-01-01T00:00:00Z",
            "fingerprint": f"fp-{node}-{gpu}"}


def _payload(*alerts: dict) -> dict:
    return {"version": "4", "groupKey": "{}:{alertname=\"GpuFallenOffBus\"}", "status": "firing",
            "receiver": "gpu-steward", "alerts": list(alerts)}


@pytest.mark.parametrize("language", ["en", "zh"])
def test_xid_storm_gives_one_message_naming_jobs_and_a_cordon_awaiting_approval(tmp_path, language):
    settings = Settings(data_dir=tmp_path, leader_lock="none", alert_webhook_token=TOKEN, language=language,
                        scenario=ROOT / "evals/scenarios/node-xid-errors.yaml")
    app = create_app(settings, speed=0, start_s=75 * 60, run_scheduler=False)  # XID 79 on gpu-a-1 GPU 3 at 1h
    with TestClient(app, base_url="http://localhost") as client:
        rt = client.app.state.runtime
        assert client.post("/api/sweeps").status_code == 200
        now, inbox = rt.deps.clock.now(), rt.deps.notifier.sent
        before = len(inbox)
        storm = [_alert("gpu-a-1", "3", now - timedelta(minutes=14)),
                 _alert("gpu-a-1", "3", now - timedelta(minutes=14)),  # Alertmanager repeats
                 _alert("gpu-a-1", "5", now - timedelta(minutes=9))]
        for n in range(1, 4):
            resp = client.post("/api/alerts", json=_payload(*storm[:n]), headers=AUTH)
            assert resp.status_code == 200, resp.text
        messages = inbox[before:]
        assert len(messages) == 1, [m.subject for m in messages]
        body = messages[0].body
        assert "ml-team/llm-pretrain" in body and "cv-team/batch-embed" not in body
        assert "cordon gpu-a-1 (level 4): awaiting approval" in body
        assert ("调查（节点 gpu-a-1）" if language == "zh" else "Investigation (node gpu-a-1)") in body
        pending = [a for a in rt.deps.approvals.pending() if a.action == "cordon"]
        assert len(pending) == 1 and pending[0].target == "gpu-a-1"
        decisions = rt.deps.audit.entries(kind="decision", target="gpu-a-1", limit=10)
        assert [d.status for d in decisions if d.action == "cordon"] == ["needs_approval"]
        told = rt.deps.audit.entries(kind="alert_incident", limit=10)
        assert told[0].data["investigation"]["jobs"][0]["id"] == "ml-team/llm-pretrain"


def test_alert_for_a_node_the_steward_sees_healthy_proposes_no_cordon(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none", alert_webhook_token=TOKEN,
                        scenario=ROOT / "evals/scenarios/node-xid-errors.yaml")
    app = create_app(settings, speed=0, start_s=75 * 60, run_scheduler=False)
    with TestClient(app, base_url="http://localhost") as client:
        rt = client.app.state.runtime
        now = rt.deps.clock.now()
        resp = client.post("/api/alerts", json=_payload(_alert("gpu-a-3", "0", now - timedelta(minutes=10))),
                           headers=AUTH)
        assert resp.status_code == 200, resp.text
        body = rt.deps.notifier.sent[-1].body
        assert "no cordon proposed for gpu-a-3" in body
        assert not [a for a in rt.deps.approvals.pending() if a.action == "cordon"]
