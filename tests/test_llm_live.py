"""The agent against a real model: `steward llm local` (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, on llama.cpp) over
HTTP, through the real `ChatOpenAI` client.

Assertions are on behaviour (a tool call parsed and run, bounded requests, a finished turn, no unsafe action,
a fallback that is reported), never on the model's wording. Needs the local-llm extra (llama-cpp-python) and
the model's part packages (test extra): skipped when either is missing, failed under CI=true.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

from agent.api.answerer import ChatContext
from agent.api.llm_chat import answer_with_model
from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.service import SweepService
from agent.graph.state import findings_of
from agent.llm.model_files import MODELS, ModelFileError, part_files
from agent.planning.llm_planner import LLMPlanner, make_chat_model
from agent.planning.policy_model import PolicyModel
from agent.wiring import make_planner, simulated_deps
from core.actions import STOP_ACTIONS
from sim.scenario import demo_scenario_path, load_scenario
from tests.conftest import free_port, in_ci, require_module
from tools.agent_tools import ToolContext, is_mutating, make_tools

pytestmark = pytest.mark.integration

MODEL = MODELS["0.5b"]
ROUNDS = 3
AT_S = 2 * 3600  # the demo two hours in: an idle notebook, a hung trainer, an over-provisioned sweep, ...


@dataclass
class LocalLLM:
    base_url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def requests(self) -> int:
        return int(httpx.get(self.base_url.removesuffix("/v1") + "/health", timeout=10).json()["requests"])


def _require_model() -> None:
    require_module("llama_cpp")
    try:
        part_files(MODEL)
    except ModelFileError as exc:
        if in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def _die_with_parent() -> None:
    """The server gets SIGTERM when the test process dies, even killed: no model left serving to nobody."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _start(log: Path, port: int | None = None) -> LocalLLM:
    """`steward llm local` in its own process; returns once it answers (assembling and loading take a while)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "agent.cli.main", "llm", "local", "--model", MODEL.key, "--port", str(port),
           "--threads", "2", "--ctx", "8192", "--max-tokens", "192"]
    proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    server = LocalLLM(f"http://127.0.0.1:{port}/v1", proc, log)
    deadline = time.monotonic() + 600  # a start-up bound for a loaded 2-core machine, not a measurement
    while True:
        if proc.poll() is not None:
            pytest.fail(f"steward llm local exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            server.requests()
            return server
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"steward llm local did not answer:\n{log.read_text(errors='replace')}")
            time.sleep(0.5)


def _stop(server: LocalLLM) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()


@pytest.fixture(scope="module")
def llm(tmp_path_factory) -> Iterator[LocalLLM]:
    _require_model()
    server = _start(tmp_path_factory.mktemp("llm") / "server.log")
    try:
        yield server
    finally:
        _stop(server)


def _settings(server: LocalLLM) -> Settings:
    return Settings(llm_base_url=server.base_url, llm_model=MODEL.name, llm_timeout_s=600,
                    llm_max_tool_rounds=ROUNDS)


def _chat(server: LocalLLM, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL.name, base_url=server.base_url, api_key="not-needed",  # type: ignore[arg-type]
                      temperature=0, timeout=600, max_retries=0, **kwargs)


def _demo(planner: Any) -> tuple[Any, Any, SweepService]:
    deps, cluster = simulated_deps(load_scenario(demo_scenario_path()), Policy(), planner)
    cluster.advance_to(AT_S)
    return deps, cluster, SweepService(deps, run_prefix="live")


def _unsafe(deps: Any, cluster: Any) -> list[str]:
    """Stops that ran, and jobs the demo's answer key says must not be killed that are no longer running. Each
    test sweeps a fresh cluster once, where no owner has been warned yet, so any stop at all is unsafe."""
    stops = [f"{e.action} {e.target}" for e in deps.audit.entries(kind="execution", limit=1000)
             if e.action in STOP_ACTIONS and e.status == "executed"]
    keep = [t.job for t in load_scenario(demo_scenario_path()).truth if t.job and (t.must_not_kill or t.waste == "none")]
    states = {job: getattr(cluster.get_job(job), "state", "gone") for job in keep}
    return stops + [f"{job} is {state}" for job, state in states.items() if state != "running"]


# -- the protocol ----------------------------------------------------------------------------------------------
def test_the_server_names_what_is_wrong_in_a_request(llm):
    base = llm.base_url
    models = httpx.get(f"{base}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL.name]
    bad = httpx.post(f"{base}/chat/completions", timeout=30,
                     json={"model": MODEL.name, "messages": [{"role": "robot", "content": "hi"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages[0]"
    assert "messages[0].role is 'robot'" in bad.json()["error"]["message"]
    unknown = httpx.post(f"{base}/chat/completions", timeout=30,
                         json={"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert MODEL.name in unknown.json()["error"]["message"]


def _list_jobs(state: str = "running") -> dict:
    """List the cluster's GPU jobs in a state (running, idle, pending)."""
    return {"jobs": [{"id": "ml-team/jupyter-carol", "gpus": 1, "gpu_util_pct": 0}]}


def test_langchain_tool_round_trip_with_null_content_and_a_tool_message(llm):
    tool = StructuredTool.from_function(_list_jobs, name="list_jobs")
    question = [HumanMessage("Which GPU jobs are idle? Call list_jobs to find out.")]
    first = _chat(llm, max_tokens=96).bind_tools([tool]).invoke(question)  # no tool_choice: "auto"
    assert isinstance(first, AIMessage) and first.tool_calls, first
    call = first.tool_calls[0]
    assert call["name"] == "list_jobs" and call["id"] and isinstance(call["args"], dict)
    assert first.response_metadata["finish_reason"] == "tool_calls"
    # LangChain sends this assistant turn with content null, then the tool result as role "tool".
    follow = [*question, first, ToolMessage(str(_list_jobs(**call["args"])), tool_call_id=call["id"])]
    second = _chat(llm, max_tokens=64).bind_tools([tool]).invoke(follow)
    assert isinstance(second, AIMessage)
    assert second.response_metadata["finish_reason"] in ("stop", "tool_calls", "length")
    assert second.usage_metadata and second.usage_metadata["input_tokens"] > 0
    streamed: Any = None
    for chunk in _chat(llm, max_tokens=96, streaming=True, stream_usage=True).bind_tools([tool]).stream(question):
        streamed = chunk if streamed is None else streamed + chunk
    assert streamed.tool_calls and streamed.tool_calls[0]["name"] == "list_jobs"
    assert streamed.usage_metadata and streamed.usage_metadata["output_tokens"] > 0


# -- the agent -------------------------------------------------------------------------------------------------
def test_a_demo_sweep_planned_by_the_local_model(llm):
    settings = _settings(llm)
    planner = make_planner(settings)  # STEWARD_LLM_BASE_URL / STEWARD_LLM_MODEL, as for any endpoint
    assert isinstance(planner, LLMPlanner) and planner.max_rounds == ROUNDS
    deps, cluster, service = _demo(planner)
    before = llm.requests()
    result = service.sweep(trigger="test")
    plan, sent = result.state["plan"], llm.requests() - before
    assert plan["model"] == MODEL.name and plan["degraded"] is None
    assert 1 <= plan["model_calls"] == sent <= ROUNDS
    assert plan["tool_calls"] >= 1, plan  # tool calls parsed from the model's text and run
    assert plan["prompt_tokens"] > 0 and plan["completion_tokens"] > 0
    assert result.report
    proposals = deps.audit.entries(kind="proposal", run_id=result.run_id, limit=1000)
    decisions = {(e.target, e.action) for e in deps.audit.entries(kind="decision", run_id=result.run_id, limit=1000)}
    assert {(p.target, p.action) for p in proposals} <= decisions  # every proposal went through the guardrail
    jobs = {j.id for j in deps.observe().jobs} | {p.name for p in deps.observe().pools}
    assert all(p.target in jobs for p in proposals)
    assert _unsafe(deps, cluster) == []  # no warning was delivered before this first sweep: no stop may run


def test_a_model_that_repeats_calls_or_says_nothing_ends_its_turn_bounded(llm):
    # tool_choice "required" on every request: the model can only ever call another tool, never answer.
    repeating = LLMPlanner(_chat(llm, model_kwargs={"tool_choice": "required"}), name="repeating", max_rounds=2)
    deps, cluster, service = _demo(repeating)
    before = llm.requests()
    result = service.sweep(trigger="test")
    plan = result.state["plan"]
    assert plan["model_calls"] == 2 == llm.requests() - before
    # Each call it made either ran or was refused with a note (a reply cut off mid-call runs nothing).
    assert plan["tool_calls"] > 0 or any(e.startswith("refused") for e in plan["errors"]), plan
    assert plan["explanation"] and result.report
    assert _unsafe(deps, cluster) == []
    # Stopped at its first "{" or "`" (it opens with a tool call's JSON, tagged or fenced), the reply is empty.
    silent = LLMPlanner(_chat(llm, stop=["{", "`"]), name="silent", max_rounds=ROUNDS)
    deps, cluster, service = _demo(silent)
    before = llm.requests()
    result = service.sweep(trigger="test")
    plan = result.state["plan"]
    assert plan["model_calls"] == 1 == llm.requests() - before and plan["tool_calls"] == 0
    assert plan["completion_tokens"] <= 4  # a tag and a newline, cut: nothing
    findings = result.state.get("findings") or []
    assert findings and all(f["target"] in plan["explanation"] for f in findings)  # the turn still explains them
    assert _unsafe(deps, cluster) == []


def test_the_endpoint_stopped_mid_sweep_falls_back_to_the_policy_model(llm):
    served: list[int] = []

    def stop_after_first_reply(response: httpx.Response) -> None:
        response.read()
        served.append(response.status_code)
        _stop(llm)  # the endpoint goes away between two rounds of one sweep

    try:
        client = httpx.Client(event_hooks={"response": [stop_after_first_reply]}, timeout=600)
        # "required": the first reply is a tool call, so the planner needs a second round, which finds no server.
        model = _chat(llm, http_client=client, model_kwargs={"tool_choice": "required"})
        deps, cluster, service = _demo(LLMPlanner(model, name=MODEL.name, max_rounds=ROUNDS))
        result = service.sweep(trigger="test")
    finally:
        if llm.proc.poll() is not None:  # back for any test after this one
            llm.proc = _start(llm.log, int(llm.base_url.rsplit(":", 1)[1].split("/")[0])).proc
    plan = result.state["plan"]
    assert served == [200] and plan["model_calls"] == 2
    assert plan["degraded"] and plan["degraded"].startswith("model unavailable")
    assert "model unavailable" in result.report or "模型不可用" in result.report
    proposed = deps.audit.entries(kind="proposal", run_id=result.run_id, limit=1000)
    assert any(p.data.get("proposed_by") == "policy-model" for p in proposed)
    floor_deps, _, floor = _demo(PolicyModel())  # the same cluster planned with no model at all
    floor_run = floor.sweep(trigger="test").run_id
    wanted = {p.target for p in floor_deps.audit.entries(kind="proposal", run_id=floor_run, limit=1000)}
    assert wanted <= {p.target for p in proposed}  # nothing the rules would act on is left unplanned
    assert _unsafe(deps, cluster) == []


# Last: its prompt shares no prefix with the planner's, which the tests above reuse.
def test_the_chat_answers_with_a_tool_call_shown(llm):
    deps, cluster, service = _demo(PolicyModel())
    findings = findings_of(service.sweep(trigger="test").state)
    obs = deps.observe()
    tool_ctx = ToolContext(observation=obs, findings=findings, scheduler=deps.scheduler, logs=deps.logs,
                           redactor=deps.policy.redaction.redactor(), runbook_search=None, proposed_by="chat")
    tools = {t.name: t for t in make_tools(tool_ctx) if not is_mutating(t)}  # as the web chat binds them
    ctx = ChatContext(findings=findings, observation=obs, tools=tools, audit=deps.audit, pending=[], now=obs.at,
                      currency=deps.currency)
    model = make_chat_model(_settings(llm))
    model.streaming = True  # as the web chat streams
    before = llm.requests()
    events = list(answer_with_model(model, ctx, "Which GPU jobs look idle right now? Use list_jobs to check.",
                                    "en", max_rounds=ROUNDS))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and findings
    shown = [e for e in events if e["type"] == "tool_call"]
    assert shown and all(e["name"] in tools for e in shown), events
    assert len([e for e in events if e["type"] == "tool_result"]) >= len(shown)
    assert 1 <= llm.requests() - before <= ROUNDS
    assert deps.audit.entries(kind="proposal", run_id="chat", limit=10) == []
