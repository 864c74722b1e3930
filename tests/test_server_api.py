"""The HTTP API through TestClient: endpoints, roles, approvals answered once, restarts, metrics, OpenAPI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import AIMessage

from agent.config.settings import ApiToken, Settings
from server import create_app
from tests.scripted_model import ScriptedChatModel, rounds, tool_call

START = 3 * 3600 + 50 * 60  # 17:50 on the demo: the next sweep finds the oversized on-demand pool
APPROVER = {"Authorization": "Bearer approver-token"}
VIEWER = {"Authorization": "Bearer viewer-token"}


def settings_for(data_dir: Path, **extra) -> Settings:
    return Settings(data_dir=data_dir, leader_lock="none", sweep_every_s=300, **extra)


def client_for(settings: Settings, *, peer: str = "127.0.0.1", **kwargs) -> TestClient:
    """A client on loopback (local development mode serves loopback Host names only), from `peer`."""
    app = create_app(settings, speed=0, start_s=kwargs.pop("start_s", START), run_scheduler=False, **kwargs)
    return TestClient(app, base_url="http://localhost", client=(peer, 50000))


def advance(client: TestClient, seconds: float) -> None:
    rt = client.app.state.runtime
    with rt.graph_lock:
        rt.sim_clock.cluster.advance(seconds)


def sweep_with_approval(client: TestClient, headers: dict | None = None) -> str:
    advance(client, 300)
    resp = client.post("/api/sweeps", headers=headers or {})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["findings"] > 0
    assert len(body["approvals_opened"]) == 1
    return body["approvals_opened"][0]


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


@pytest.fixture
def client(tmp_path):
    with client_for(settings_for(tmp_path)) as c:
        yield c


def test_health_findings_and_pending_approval(client):
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["auth_mode"] == "local-dev"
    assert client.get("/api/findings").json()["findings"] == []
    approval_id = sweep_with_approval(client)
    findings = client.get("/api/findings").json()["findings"]
    assert {"oversized"} <= {f["kind"] for f in findings}
    pending = client.get("/api/approvals").json()["pending"]
    assert [a["id"] for a in pending] == [approval_id]
    assert pending[0]["action"] == "resize_pool" and pending[0]["target"] == "a100-ondemand"


def test_approve_executes_once_and_second_answer_is_409(client):
    approval_id = sweep_with_approval(client)
    pools_before = {p.name: p.nodes for p in client.app.state.runtime.deps.pools.list_pools()}
    first = client.post(f"/api/approvals/{approval_id}", json={"decision": "approve", "reason": "night"})
    assert first.status_code == 200, first.text
    assert [o["status"] for o in first.json()["outcomes"]] == ["executed"]
    assert first.json()["approval"]["answered_by"] == "local-dev"
    pools_after = {p.name: p.nodes for p in client.app.state.runtime.deps.pools.list_pools()}
    assert pools_after["a100-ondemand"] < pools_before["a100-ondemand"]

    again = client.post(f"/api/approvals/{approval_id}", json={"decision": "deny"})
    assert again.status_code == 409
    assert "already approved" in again.json()["detail"]
    executions = client.get("/api/audit", params={"kind": "execution", "target": "a100-ondemand"}).json()["entries"]
    assert [e["status"] for e in executions] == ["executed"]  # exactly once
    refused = client.get("/api/audit", params={"kind": "approval", "status": "refused_answer"}).json()["entries"]
    assert len(refused) == 1
    assert client.get("/api/approvals").json()["recent"][0]["status"] == "approved"


def test_stale_answer_is_refused_and_nothing_runs(client):
    client.app.state.runtime.deps.policy.approvals.expire_after = 600
    approval_id = sweep_with_approval(client)
    advance(client, 900)  # silence past the deadline is never approval
    resp = client.post(f"/api/approvals/{approval_id}", json={"decision": "approve"})
    assert resp.status_code == 409
    assert "expired" in resp.json()["detail"]
    assert client.get("/api/audit", params={"kind": "execution", "target": "a100-ondemand"}).json()["entries"] == []
    statuses = [e["status"] for e in client.get("/api/audit", params={"kind": "approval"}).json()["entries"]]
    assert "expired" in statuses


def test_unknown_approval_is_404_and_bad_decision_422(client):
    assert client.post("/api/approvals/apr_nope", json={"decision": "approve"}).status_code == 404
    assert client.post("/api/approvals/apr_nope", json={"decision": "maybe"}).status_code == 422


def test_a_body_that_is_not_utf8_under_another_content_type_is_422_not_500(client):
    """FastAPI hands a body of a content type it does not parse (XML, none) to validation as raw bytes; echoing
    undecodable bytes back failed with a 500 on every JSON endpoint."""
    for content_type in ("application/xml", ""):
        for path, body in (("/api/chat", b'{"message":"\xff"}'),
                           ("/api/approvals/apr_x", b'{"decision":"approve","reason":"caf\xe9"}'),
                           ("/api/exemptions", b"x" * 5000 + b"\xff")):
            answer = client.post(path, content=body, headers={"Content-Type": content_type})
            assert answer.status_code == 422, (path, content_type, answer.status_code, answer.text[:200])
            assert len(answer.text) < 2000 and answer.json()["detail"]


def test_restart_while_pending_then_approve(tmp_path):
    settings = settings_for(tmp_path)
    with client_for(settings) as first:
        approval_id = sweep_with_approval(first)
    # A new process over the same data dir: the simulated clock resumes, the graph waits in the checkpoint.
    with client_for(settings) as second:
        assert [a["id"] for a in second.get("/api/approvals").json()["pending"]] == [approval_id]
        resp = second.post(f"/api/approvals/{approval_id}", json={"decision": "approve"})
        assert resp.status_code == 200, resp.text
        assert [o["status"] for o in resp.json()["outcomes"]] == ["executed"]
        pool = next(p for p in second.app.state.runtime.deps.pools.list_pools() if p.name == "a100-ondemand")
        assert pool.nodes < 4


def test_a_restarted_demo_keeps_what_the_steward_did(tmp_path):
    """The simulated cluster is rebuilt from its scenario on a restart: the stops (and resizes) the audit says were
    carried out are carried out again at their times, so a stopped job is not running again, found idle again
    and stopped twice."""
    settings = settings_for(tmp_path)
    with client_for(settings, start_s=150 * 60) as first:
        rt = first.app.state.runtime
        for _ in range(14):  # to 18:40: carol's notebook was warned at 17:35 and stopped at 18:35
            with rt.graph_lock:
                rt.sim_clock.cluster.advance(300)
            assert first.post("/api/sweeps").status_code == 200
        stopped = {e.target for e in rt.deps.audit.entries(kind="execution", status="executed")
                   if e.action == "terminate"}
        assert "ml-team/jupyter-carol" in stopped
    with client_for(settings) as second:
        rt = second.app.state.runtime
        for job in stopped:
            assert rt.deps.scheduler.get_job(job).state in ("cancelled", "stopping"), job
        assert second.post("/api/sweeps").status_code == 200
        again = [e for e in rt.deps.audit.entries(kind="execution", status="executed") if e.action == "terminate"]
        assert sorted(e.target for e in again) == sorted(stopped)  # none stopped a second time


def test_a_denied_proposal_shows_on_its_finding(client):
    approval_id = sweep_with_approval(client)
    pool = next(f for f in client.get("/api/findings").json()["findings"] if f["target"] == "a100-ondemand")
    assert pool["denied_until"] is None
    assert client.post(f"/api/approvals/{approval_id}", json={"decision": "deny", "reason": "keep capacity"}
                       ).status_code == 200
    pool = next(f for f in client.get("/api/findings").json()["findings"] if f["target"] == "a100-ondemand")
    assert pool["denied_until"] is not None  # not a "new" finding: a person said no, and until when that holds


def test_roles_with_api_tokens(tmp_path):
    tokens = {"viewer-token": ApiToken(name="vic", role="viewer"), "approver-token": ApiToken(name="ann", role="approver")}
    with client_for(settings_for(tmp_path, api_tokens=tokens)) as c:
        assert c.get("/api/findings").status_code == 401
        assert c.get("/api/findings", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/findings", headers=VIEWER).status_code == 200
        assert c.post("/api/sweeps", headers=VIEWER).status_code == 403
        approval_id = sweep_with_approval(c, APPROVER)
        denied = c.post(f"/api/approvals/{approval_id}", json={"decision": "approve"}, headers=VIEWER)
        assert denied.status_code == 403 and "approver" in denied.json()["detail"]
        refused = c.get("/api/audit", params={"kind": "approval", "status": "refused_answer"}, headers=VIEWER).json()
        assert [e["reason"] for e in refused["entries"]] == ["answer from vic refused: not an approver"]
        assert c.post("/api/exemptions", json={"job": "x", "duration": "1h"}, headers=VIEWER).status_code == 403
        ok = c.post(f"/api/approvals/{approval_id}", json={"decision": "deny", "reason": "peak"}, headers=APPROVER)
        assert ok.status_code == 200 and ok.json()["approval"]["answered_by"] == "ann"
        assert c.get("/healthz").json()["auth_mode"] == "tokens"


def test_trusted_proxy_headers(tmp_path):
    with client_for(settings_for(tmp_path, trust_proxy_headers=True, trusted_proxies=["10.0.0.0/24"]),
                    peer="10.0.0.7") as c:
        assert c.get("/api/findings").status_code == 401
        viewer = {"X-Forwarded-User": "bob", "X-Forwarded-Groups": "ml-team"}
        approver = {"X-Forwarded-User": "lin", "X-Forwarded-Groups": "ml-team, steward-approvers"}
        assert c.get("/api/findings", headers=viewer).status_code == 200
        approval_id = sweep_with_approval(c, approver)
        assert c.post(f"/api/approvals/{approval_id}", json={"decision": "approve"}, headers=viewer).status_code == 403
        resp = c.post(f"/api/approvals/{approval_id}", json={"decision": "approve"}, headers=approver)
        assert resp.json()["approval"]["answered_by"] == "lin"


def test_exemption_is_audited_and_honoured_by_history(client):
    resp = client.post("/api/exemptions", json={"job": "cv-team/augment-worker", "duration": "4h", "reason": "demo"})
    assert resp.status_code == 201, resp.text
    rt = client.app.state.runtime
    history = rt.deps.audit.history(rt.deps.clock.now())
    assert [e.target for e in history.exemptions] == ["cv-team/augment-worker"]
    entry = client.get("/api/audit", params={"kind": "exemption"}).json()["entries"][0]
    assert entry["data"]["until"] == resp.json()["until"].replace("Z", "+00:00") and entry["data"]["by"] == "local-dev"
    bad = client.post("/api/exemptions", json={"job": "x", "duration": "soon"})
    assert bad.status_code == 422 and "soon" in bad.json()["detail"]
    # The Chinese UI: a duration as people type it, and errors in Chinese alone.
    zh = client.post("/api/exemptions", params={"lang": "zh"}, json={"job": "cv-team/augment-worker",
                                                                     "duration": "2小时", "reason": "演示"})
    assert zh.status_code == 201, zh.text
    assert client.post("/api/exemptions", params={"lang": "zh"}, json={"job": "ml-team/nonexistent", "duration": "4h"}
                       ).json()["detail"] == "当前没有名为 'ml-team/nonexistent' 的作业、节点或资源池"
    assert client.post("/api/exemptions", params={"lang": "zh"}, json={"job": "x", "duration": "40d"}
                       ).json()["detail"] == "保留时长须至少 1 分钟、不超过 30 天"
    # A keep shorter than a minute would be audited as one and hold nothing past the next sweep.
    short = client.post("/api/exemptions", json={"job": "cv-team/augment-worker", "duration": "0.0000001s"})
    assert short.status_code == 422 and "at least a minute" in short.json()["detail"]
    # Every refusal is audited, as one from chat is: who asked for what, and why it was not done.
    refused = client.get("/api/audit", params={"kind": "decision", "status": "refused"}).json()["entries"]
    assert [(e["target"], e["action"], e["data"]["by"]) for e in refused][:4] == [
        ("cv-team/augment-worker", "keep", "local-dev"), ("x", "keep", "local-dev"),
        ("ml-team/nonexistent", "keep", "local-dev"), ("x", "keep", "local-dev")]
    assert "at least a minute" in refused[0]["reason"] and "at most 30 days" in refused[1]["reason"]
    assert "soon" in refused[3]["reason"]


def test_audit_pagination_and_savings(client):
    approval_id = sweep_with_approval(client)
    page = client.get("/api/audit", params={"kind": "finding", "limit": 2}).json()
    assert len(page["entries"]) == 2 and page["next_offset"] == 2
    rest = client.get("/api/audit", params={"kind": "finding", "limit": 2, "offset": 2}).json()
    assert {e["seq"] for e in rest["entries"]}.isdisjoint({e["seq"] for e in page["entries"]})
    client.post(f"/api/approvals/{approval_id}", json={"decision": "approve"})
    advance(client, 3600)
    savings = client.get("/api/savings").json()
    freed = client.get("/api/audit", params={"kind": "execution", "target": "a100-ondemand"}).json()["entries"][0]
    assert savings["reclaimed_gpu_hours"] == pytest.approx(freed["data"]["gpus"] * 1.0)
    assert savings["reclaimed_money"] == pytest.approx(savings["reclaimed_gpu_hours"] * 4.1, rel=1e-3)
    assert savings["timeline"][-1]["reclaimed_gpu_hours"] == savings["reclaimed_gpu_hours"]
    assert savings["waste_by_team"]


def test_metrics_text(client):
    approval_id = sweep_with_approval(client)
    text = client.get("/metrics").text
    assert "steward_sweeps_total 1.0" in text
    assert 'steward_findings{kind="oversized"} 1.0' in text
    assert "steward_approvals_pending 1.0" in text
    assert "steward_llm_tokens_total 0.0" in text
    client.post(f"/api/approvals/{approval_id}", json={"decision": "approve"})
    text = client.get("/metrics").text
    assert 'steward_actions_total{action="resize_pool",level="4",status="executed"} 1.0' in text
    assert "steward_approvals_pending 0.0" in text
    assert "steward_reclaimed_gpu_hours_total" in text


def test_openapi_schema_is_valid(client):
    schema = client.get("/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    for path in ("/api/chat", "/api/findings", "/api/approvals", "/api/approvals/{approval_id}", "/api/exemptions",
                 "/api/audit", "/api/savings", "/api/sweeps", "/healthz", "/metrics"):
        assert path in schema["paths"], path
    refs = []

    def walk(node):
        if isinstance(node, dict):
            refs.extend(v for k, v in node.items() if k == "$ref")
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    names = set(schema["components"]["schemas"])
    assert refs and all(r.split("/")[-1] in names for r in refs)
    answer = schema["paths"]["/api/approvals/{approval_id}"]["post"]
    assert {"200", "404", "409", "422"} <= set(answer["responses"])
    assert "text/event-stream" in schema["paths"]["/api/chat"]["post"]["responses"]["200"]["content"]


def test_chat_offline_streams_tool_calls_then_answer_in_both_languages(client):
    sweep_with_approval(client)
    events = sse_events(client.post("/api/chat", json={"message": "who is wasting A100s right now?"}).text)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert kinds.index("tool_call") < kinds.index("token")
    assert {"list_jobs", "query_gpu_metrics"} <= {e["name"] for e in events if e["type"] == "tool_call"}
    answer = events[-1]["answer"]
    assert "a100-ondemand" in answer and "".join(e["text"] for e in events if e["type"] == "token") == answer
    zh = sse_events(client.post("/api/chat", json={"message": "谁在浪费 GPU？"}).text)
    assert zh[0]["lang"] == "zh" and "浪费" in zh[-1]["answer"] and "a100-ondemand" in zh[-1]["answer"]
    pending = sse_events(client.post("/api/chat", json={"message": "any pending approvals?"}).text)[-1]["answer"]
    assert "resize_pool" in pending
    assert client.post("/api/chat", json={"message": ""}).status_code == 422


def test_chat_with_model_binds_only_read_only_tools(tmp_path):
    model = ScriptedChatModel(script=rounds(
        AIMessage(content="", tool_calls=[tool_call("list_jobs", "c1", only_with_findings=True),
                                          tool_call("terminate_job", "c2", job="ml-team/llm-pretrain", reason="x")]),
        AIMessage(content="The on-demand A100 pool is oversized."),
    ))
    with client_for(settings_for(tmp_path), chat_model=model) as c:
        events = sse_events(c.post("/api/chat", json={"message": "who wastes GPUs?"}).text)
        assert "terminate_job" not in model.bound_tools and "list_jobs" in model.bound_tools
        results = {e["name"]: e["status"] for e in events if e["type"] == "tool_result"}
        assert results == {"list_jobs": "no_data", "terminate_job": "error"}
        assert events[-1] == {"type": "done", "answer": "The on-demand A100 pool is oversized."}
        assert c.get("/api/audit", params={"kind": "proposal"}).json()["entries"] == []


@pytest.mark.parametrize("lang,question,said", [("en", "who wastes GPUs?", "The model did not finish"),
                                                ("zh", "谁在浪费 GPU？", "模型未完成回答")])
def test_chat_model_that_never_stops_calling_tools_is_answered_offline_saying_so(tmp_path, lang, question, said):
    """After max_rounds of tool calls the answer was "done" with "": the person got nothing back."""
    model = ScriptedChatModel(script=lambda messages, i: AIMessage(content="", tool_calls=[
        tool_call("list_jobs", f"c{i}")]))
    with client_for(settings_for(tmp_path), chat_model=model) as c:
        c.post("/api/sweeps")
        events = sse_events(c.post("/api/chat", json={"message": question, "lang": lang}).text)
    done = events[-1]
    assert done["type"] == "done" and done["answer"].startswith(f"({said}" if lang == "en" else f"（{said}"), done
    assert ("6 rounds" if lang == "en" else "6 轮") in done["answer"]
    note, offline = done["answer"].split("\n\n", 1)
    if lang == "zh":
        from tests.zh_text import leftovers

        assert not leftovers(note), note
    assert ("findings on GPUs" if lang == "en" else "GPU") in offline  # the built-in answerer's reply follows
    assert sum(e["type"] == "start" for e in events) == 1


def test_chat_model_that_ends_its_turn_with_no_text_is_answered_offline(tmp_path):
    model = ScriptedChatModel(script=rounds(AIMessage(content="")))
    with client_for(settings_for(tmp_path), chat_model=model) as c:
        c.post("/api/sweeps")
        done = sse_events(c.post("/api/chat", json={"message": "who wastes GPUs?"}).text)[-1]
    assert done["answer"].startswith("(The model did not finish: it gave no answer") and "findings on GPUs" in \
        done["answer"], done


def test_serve_refuses_a_public_host_without_access_control(tmp_path, capsys):
    from agent.cli.main import main

    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "without access control" in capsys.readouterr().out


def test_extra_routers_and_listeners(tmp_path):
    from fastapi import APIRouter

    hook = APIRouter()

    @hook.post("/webhooks/test")
    def webhook() -> dict:
        return {"ok": True}

    heard = []
    settings = settings_for(tmp_path, api_tokens={"approver-token": ApiToken(name="ann", role="approver")})
    with client_for(settings, extra_routers=[hook], listeners=[lambda e: heard.append(e.kind)]) as c:
        assert c.post("/webhooks/test").json() == {"ok": True}  # their own auth, not our tokens
        sweep_with_approval(c, APPROVER)
    assert heard == ["approval_requested", "sweep_finished"]


def test_runbook_pages_make_references_links(client):
    assert client.get("/healthz").json()["runbooks_route"] is True
    page = client.get("/runbooks/idle-gpu-job")
    assert page.status_code == 200 and "idle-gpu-job" in page.text
    # Rendered, not dumped: headings and lists, the front matter shown once as the line under the title.
    assert "<h2>" in page.text and "<li>" in page.text and "max_level:" not in page.text
    zh = client.get("/runbooks/idle-gpu-job", params={"lang": "zh"}).text
    assert '<html lang="zh-CN">' in zh and "<h2>症状</h2>" in zh and "自动处理最高级别 3" in zh
    # A runbook's text is never markup that runs in the reader's browser.
    from agent.api.runbook_pages import render_markdown

    assert "<script>" not in render_markdown("<script>alert(1)</script>\n\n[x](javascript:alert(1))")
    assert 'href="javascript:' not in render_markdown("[x](javascript:alert(1))")
    assert client.get("/runbooks/no-such-runbook").status_code == 404


def test_a_restarted_demo_keeps_what_a_human_approved(tmp_path):
    """An approved resize runs under the approval's id, not a sweep's: a restart rebuilt the pool whole while the
    audit said it was shrunk, and savings counted GPUs the cluster showed in use again."""
    settings = settings_for(tmp_path)
    with client_for(settings) as first:
        approval_id = sweep_with_approval(first)
        assert first.post(f"/api/approvals/{approval_id}", json={"decision": "approve"}).status_code == 200
        rt = first.app.state.runtime
        nodes = next(p for p in rt.deps.pools.list_pools() if p.name == "a100-ondemand").nodes
        assert nodes < 4
    with client_for(settings) as second:
        pool = next(p for p in second.app.state.runtime.deps.pools.list_pools() if p.name == "a100-ondemand")
        assert pool.nodes == nodes


def test_a_keep_on_a_job_that_cannot_be_read_is_recorded_by_name(client, monkeypatch):
    """An owner's keep is never dropped for the steward's own trouble: a job that cannot be read now (squeue timed
    out) is kept by name, which matches as protection does (a Slurm job renamed by a namesake's suffix too)."""
    rt = client.app.state.runtime
    monkeypatch.setattr(rt, "knows_target", lambda name: True)  # the sweep's reading knew it

    def unreadable(job_id):
        raise RuntimeError("`squeue --json` timed out after 30s (is slurmctld reachable?)")

    monkeypatch.setattr(rt.deps.scheduler, "get_job", unreadable)
    resp = client.post("/api/exemptions", json={"job": "cv-team/augment-worker", "duration": "4h", "reason": "demo"})
    assert resp.status_code == 201, resp.json()
    [kept] = rt.deps.audit.history(rt.deps.clock.now()).exemptions
    assert kept.target == "cv-team/augment-worker" and not kept.target_uid
