"""The LLM planner: a chat model with typed tools reads the cluster and proposes actions.

Any model error, unknown tool or malformed argument goes back to the model as a tool
message naming the exact call; nothing escapes the graph and nothing mutates here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent.models import Finding, History
from agent.observation import Observation
from agent.planner import PlanResult
from agent.prompts import fence_untrusted, render, template_name
from sim.durations import format_duration
from tools.agent_tools import ToolContext, make_tools

if TYPE_CHECKING:
    from agent.deps import StewardDeps
    from agent.settings import Settings

LANGUAGE_NAMES = {"en": "English", "zh": "Chinese (简体中文)"}


def make_chat_model(settings: Settings) -> BaseChatModel:
    """ChatOpenAI against any OpenAI-compatible endpoint (STEWARD_LLM_*)."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=settings.llm_model or "",
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key or "not-needed",  # type: ignore[arg-type]
        temperature=settings.llm_temperature,
        timeout=settings.llm_timeout_s,
        max_retries=1,
    )


def _findings_block(findings: list[Finding]) -> str:
    rows = [
        {"target": f.target, "kind": f.kind, "since": f.since.isoformat(), "gpus": f.gpus,
         "waste_gpu_hours": f.waste_gpu_hours, "evidence": f.evidence}
        for f in findings
    ]
    return fence_untrusted("detectors", json.dumps(rows, ensure_ascii=False, indent=1)) if rows else "(none)"


def _history_block(history: History, targets: set[str]) -> str:
    rows = [f"- {e.at:%H:%M} {e.action} {e.target}: {e.status}" for e in history.entries if e.target in targets]
    return "\n".join(rows[-30:]) or "(none)"


def split_for_model(findings: list[Finding], limit: int) -> tuple[list[Finding], list[Finding]]:
    """The `limit` costliest findings for the model; the rest for the built-in policy model.

    Keeps the prompt bounded at any cluster size (500 findings would be ~31k tokens).
    """
    if len(findings) <= limit:
        return findings, []
    ranked = sorted(findings, key=lambda f: (-f.waste_cost, -f.waste_gpu_hours, f.target, f.kind))
    return ranked[:limit], ranked[limit:]


class LLMPlanner:
    def __init__(self, model: BaseChatModel, *, name: str | None = None, max_rounds: int = 6,
                 max_findings: int = 40) -> None:
        self.model = model
        self.name = name or getattr(model, "model_name", None) or type(model).__name__
        self.max_rounds = max_rounds
        self.max_findings = max_findings

    def _messages(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps,
                  catalog: str) -> list[BaseMessage]:
        schedulers = sorted({j.scheduler for j in obs.jobs}) or ["kubernetes"]
        policy = deps.policy
        system = render(template_name("system", deps.language), obs.at, scheduler=" and ".join(schedulers),
                        language_name=LANGUAGE_NAMES.get(deps.language, "English"))
        plan = render(
            template_name("plan", deps.language), obs.at,
            findings=_findings_block(findings),
            history=_history_block(history, {f.target for f in findings}),
            min_notice=format_duration(policy.warning.min_notice), grace=format_duration(policy.stop.grace_period),
            approval_levels=", ".join(map(str, policy.levels.require_approval)) or "none",
            runbook_catalog=catalog or "(no runbooks indexed)",
        )
        return [SystemMessage(system), HumanMessage(plan)]

    def plan(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps,
             catalog: str = "") -> PlanResult:
        result = PlanResult(model=self.name)
        if not findings:
            result.explanation = "No waste found."
            return result
        findings, overflow = split_for_model(findings, self.max_findings)
        if overflow:
            from agent.planner import PolicyModel

            rest = PolicyModel().plan(overflow, obs, history, deps)
            planned = self._plan_with_model(findings, obs, history, deps, catalog, result)
            planned.proposals += rest.proposals
            planned.explanation += (f"\n({len(overflow)} smaller findings were planned by the built-in policy "
                                    "model to keep the prompt bounded.)")
            return planned
        return self._plan_with_model(findings, obs, history, deps, catalog, result)

    def _plan_with_model(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps,
                         catalog: str, result: PlanResult) -> PlanResult:
        if not catalog and deps.runbook_catalog is not None:
            catalog = deps.runbook_catalog(deps.language)
        ctx = ToolContext(observation=obs, findings=findings, scheduler=deps.scheduler, logs=deps.logs,
                          runbook_search=deps.runbook_search, proposed_by=self.name)
        tools = {t.name: t for t in make_tools(ctx)}
        bound = self.model.bind_tools(list(tools.values()))
        messages = self._messages(findings, obs, history, deps, catalog)
        result.prompt_chars = sum(len(str(m.content)) for m in messages)
        for _ in range(self.max_rounds):
            try:
                reply = bound.invoke(messages)
            except Exception as exc:  # the endpoint failed: report, propose nothing
                result.errors.append(f"model call failed: {type(exc).__name__}: {exc}")
                break
            if not isinstance(reply, AIMessage):
                result.errors.append(f"model returned {type(reply).__name__}, not a message")
                break
            usage: dict[str, Any] = dict(reply.usage_metadata or {})
            result.prompt_tokens += int(usage.get("input_tokens", 0))
            result.completion_tokens += int(usage.get("output_tokens", 0))
            messages.append(reply)
            for bad in reply.invalid_tool_calls or []:
                result.errors.append(f"malformed tool call {bad.get('name')}: {bad.get('error')}")
                messages.append(ToolMessage(f"error: malformed call {bad.get('name')}({bad.get('args')}): "
                                            f"{bad.get('error')}", tool_call_id=bad.get("id") or "invalid"))
            if not reply.tool_calls:
                result.explanation = str(reply.content).strip()
                break
            for call in reply.tool_calls:
                result.tool_calls += 1
                messages.append(self._run_tool(tools, dict(call), result))
        result.proposals = list(ctx.proposals)
        if not result.explanation:
            result.explanation = "\n".join(f"- {f.target}: {f.kind}. {f.evidence}" for f in findings)
        return result

    @staticmethod
    def _run_tool(tools: dict[str, Any], call: dict[str, Any], result: PlanResult) -> ToolMessage:
        name, args, call_id = call.get("name", ""), call.get("args") or {}, call.get("id") or "call"
        tool = tools.get(name)
        if tool is None:
            result.errors.append(f"unknown tool {name}")
            return ToolMessage(f"error: there is no tool {name!r}; tools: {', '.join(tools)}", tool_call_id=call_id)
        try:
            output = tool.invoke(args)
        except Exception as exc:  # bad arguments or a backend failure: tell the model exactly what failed
            result.errors.append(f"{name}({args}) failed: {exc}")
            return ToolMessage(f"error: {name}({json.dumps(args, default=str)}) failed: {exc}", tool_call_id=call_id)
        text = output if isinstance(output, str) else json.dumps(output, default=str, ensure_ascii=False)
        return ToolMessage(text[:20_000], tool_call_id=call_id)
