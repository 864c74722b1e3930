"""The LLM planner: a chat model with typed tools reads the cluster and proposes actions.

Any unknown tool or malformed argument goes back to the model as a tool message naming
the exact call; nothing escapes the graph and nothing mutates here. The model is bounded:
only complete JSON runs, at most `max_tool_calls_per_turn` calls per reply, arguments up to
`max_tool_args_bytes`; an endpoint that fails hands the sweep to the built-in policy model.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent.planning.plan_cache import CachedPlan, PlanCache, answers
from agent.planning.policy_model import PlanResult, PolicyModel, without_held_denials
from agent.planning.prompts import fence_untrusted, render, template_name
from core.actions import Finding, History
from core.durations import format_duration
from core.observation import Observation
from tools.agent_tools import ToolContext, make_tools

if TYPE_CHECKING:
    from agent.config.settings import Settings
    from agent.graph.deps import StewardDeps

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


def _history_block(history: History, targets: dict[str, str | None]) -> str:
    """The past actions and denials on the findings' targets, dated (a month-old stop must not read as today's).

    `targets`: name -> the job's uid now (None: not known). A record made with another uid is an earlier job of the
    same name and is left out, as the guardrail leaves it out; one made without a uid may be this job's."""
    def this_job(target: str, uid: str | None) -> bool:
        return target in targets and (uid is None or targets[target] is None or uid == targets[target])

    rows = [f"- {e.at:%Y-%m-%d %H:%M} UTC {e.action} {e.target}: {e.status}"
            for e in history.entries if this_job(e.target, e.target_uid)]
    rows += [f"- {d.at:%Y-%m-%d %H:%M} UTC {d.action} {d.target}: denied by a human (do not propose it again)"
             for d in history.denials if this_job(d.target, d.target_uid)]
    return "\n".join(rows[-30:]) or "(none)"


def _target_uids(findings: list[Finding], obs: Observation) -> dict[str, str | None]:
    uids = {j.id: j.uid or None for j in obs.jobs}
    return {f.target: uids.get(f.target) for f in findings}


def split_for_model(findings: list[Finding], limit: int) -> tuple[list[Finding], list[Finding]]:
    """The `limit` costliest findings for the model; the rest for the built-in policy model.

    Keeps the prompt bounded at any cluster size (500 findings would be ~31k tokens).
    """
    if len(findings) <= limit:
        return findings, []
    ranked = sorted(findings, key=lambda f: (-f.waste_cost, -f.waste_gpu_hours, f.target, f.kind))
    return ranked[:limit], ranked[limit:]


COMPLETE_FINISH_REASONS = ("tool_calls", "stop")


def cut_off(reply: AIMessage) -> str | None:
    """Why `reply` may have been cut off, or None. langchain "repairs" the partial arguments of a stream that
    ended early, and the only sign left is a missing finish_reason (in-process models report no metadata at all)."""
    meta = reply.response_metadata or {}
    finish = meta.get("finish_reason")
    if finish in COMPLETE_FINISH_REASONS or (finish is None and not meta):
        return None
    return f"the reply ended with finish_reason {finish!r}" if finish else "the reply ended without a finish_reason"


def _complete_json(text: str) -> bool:
    try:
        return not text.strip() or isinstance(json.loads(text), dict)
    except ValueError:
        return False


def screen_tool_calls(reply: AIMessage, max_calls: int, max_args_bytes: int,
                      ) -> tuple[list[tuple[dict[str, Any], str | None]], list[str]]:
    """Each tool call of `reply` with why it must not run (None: run it), and one note per kind of refusal.

    Only complete JSON runs; arguments over `max_args_bytes` are refused; past `max_calls` in one reply the
    rest are refused (a planner that needs more per turn is looping or attacked). Each call gets an answer.
    """
    raw = {c.get("id") or "": c.get("args") or "" for c in getattr(reply, "tool_call_chunks", None) or []}
    for c in reply.additional_kwargs.get("tool_calls") or []:  # clients that keep the wire format here
        raw.setdefault(c.get("id") or "", (c.get("function") or {}).get("arguments") or "")
    calls, cut = [dict(c) for c in reply.tool_calls], cut_off(reply)
    screened: list[tuple[dict[str, Any], str | None]] = []
    refused: dict[str, int] = {}
    for i, call in enumerate(calls):
        text = raw.get(call.get("id") or "")
        text = json.dumps(call.get("args") or {}, ensure_ascii=False) if text is None else text
        size = len(text.encode())
        if cut:
            why: str | None = f"{cut}; only complete JSON arguments are executed"
        elif not _complete_json(text):
            why = "its arguments are not complete JSON; only complete JSON arguments are executed"
        elif size > max_args_bytes:
            why = f"its arguments are over the {max_args_bytes}-byte bound"
        elif i >= max_calls:
            why = f"the reply had {len(calls)} tool calls and at most {max_calls} run per turn"
        else:
            why = None
        if why:
            refused[why] = refused.get(why, 0) + 1
        screened.append((call, why))
    return screened, [f"refused {n} tool call(s): {why}" for why, n in refused.items()]


def refusal_message(call: dict[str, Any], why: str) -> str:
    return f"error: {call.get('name')} was not run: {why}."


def refused_since(deps: StewardDeps, target: str, since: datetime) -> set[tuple[str, str]]:
    """(action, target) the guardrail refused on `target` since `since`: a kept plan's proposal it refused is not
    replayed at every sweep (refused and audited again each time); the refusal is the answer until the state
    changes and the model is asked again."""
    return {(e.action or "", e.target or "") for e in deps.audit.entries(kind="decision", target=target,
                                                                          status="deny", since=since, limit=500)}


def with_floor(result: PlanResult, findings: list[Finding], obs: Observation, history: History,
               deps: StewardDeps) -> PlanResult:
    """The rules are the floor: the built-in policy model's next step for each finding is proposed too, unless
    the model (or its cached plan) already proposes that action on that target, which then stands as the model
    wrote it. The model can add a step or word one; it cannot make the agent do less than the rules would. Every
    proposal still goes through the guardrail."""
    if not findings:
        return result
    floor = PolicyModel().plan(findings, obs, history, deps).proposals
    have = {(p.action, p.target) for p in result.proposals}
    added = [p for p in floor if (p.action, p.target) not in have]
    if added:
        result.proposals = [*result.proposals, *added]
        steps = ", ".join(f"{p.action} {p.target}" for p in added)
        result.explanation = "\n".join(
            line for line in (result.explanation, f"(The built-in policy's next step, which the model did not "
                                                  f"propose, is proposed as the floor: {steps}.)") if line)
    return result


class LLMPlanner:
    def __init__(self, model: BaseChatModel, *, name: str | None = None, max_rounds: int = 6,
                 max_findings: int = 40, max_tool_calls_per_turn: int = 20, max_tool_args_bytes: int = 8192,
                 cache: PlanCache | None = None) -> None:
        self.model = model
        self.cache = cache if cache is not None else PlanCache()
        self.name = name or getattr(model, "model_name", None) or type(model).__name__
        self.max_rounds = max_rounds
        self.max_findings = max_findings
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.max_tool_args_bytes = max_tool_args_bytes

    @classmethod
    def from_settings(cls, settings: Settings, model: BaseChatModel | None = None) -> LLMPlanner:
        return cls(model or make_chat_model(settings), name=settings.llm_model,
                   max_rounds=settings.llm_max_tool_rounds,
                   max_tool_calls_per_turn=settings.llm_max_tool_calls_per_turn,
                   max_tool_args_bytes=settings.llm_max_tool_args_bytes)

    def _messages(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps,
                  catalog: str) -> list[BaseMessage]:
        schedulers = sorted({j.scheduler for j in obs.jobs}) or ["kubernetes"]
        policy = deps.policy
        system = render(template_name("system", deps.language), obs.at, scheduler=" and ".join(schedulers),
                        language_name=LANGUAGE_NAMES.get(deps.language, "English"))
        plan = render(
            template_name("plan", deps.language), obs.at,
            findings=_findings_block(findings),
            history=_history_block(history, _target_uids(findings, obs)),
            min_notice=format_duration(policy.warning.min_notice), grace=format_duration(policy.stop.grace_period),
            approval_levels=", ".join(map(str, policy.levels.require_approval)) or "none",
            runbook_catalog=catalog or "(no runbooks indexed)",
        )
        return [SystemMessage(system), HumanMessage(plan)]

    def plan(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps,
             catalog: str = "") -> PlanResult:
        """Findings whose identity and state the model already answered reuse that answer; only the rest
        go to the model, and none at all means no model call (agent/planning/plan_cache.py). Whatever the model
        or its cache proposes, an action a human denied on the same target is dropped while the denial holds."""
        result = self._plan_cached(findings, obs, history, deps, catalog)
        result = with_floor(result, findings, obs, history, deps)
        result.proposals, held = without_held_denials(result.proposals, history, deps.policy, obs.at)
        if held:
            result.explanation = "\n".join([result.explanation, *held]).strip()
        return result

    def _plan_cached(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps,
                     catalog: str) -> PlanResult:
        if not findings or self.cache is None:
            return self._plan_fresh(findings, obs, history, deps, catalog)
        keys = self.cache.keys(self.name, findings, obs, history, deps)
        tried = [self.cache.get(deps, k) for k in keys]
        kept = [c if c is not None and c.stands else None for c in tried]
        fresh = [f for f, c in zip(findings, kept, strict=True) if c is None]
        result = self._plan_fresh(fresh, obs, history, deps, catalog) if fresh else PlanResult(model=self.name)
        if fresh and not result.degraded:  # never the fallback's plan
            asked = {id(f) for f in split_for_model(fresh, self.max_findings)[0]}
            for f, k, before in zip(findings, keys, tried, strict=True):
                if id(f) in asked:
                    tries = before.tries + 1 if before is not None and not before.finished else 1
                    self.cache.put(deps, k, CachedPlan(answers(f, result.proposals), obs.at,
                                                       finished=result.answered, tries=tries))
        seen = {p.key() for p in result.proposals}
        lines = [result.explanation] if fresh else []
        for f, c in zip(findings, kept, strict=True):
            if c is None:
                continue
            result.cached_findings += 1
            refused = refused_since(deps, f.target, c.planned_at)
            result.proposals += [p for p in c.proposals if p.key() not in seen and (p.action, p.target) not in refused]
            seen |= {p.key() for p in c.proposals}
            since = (f"nothing new since the model's plan of {c.planned_at:%H:%M}; that plan stands" if c.finished
                     else f"the model did not finish its turn on this state {c.tries} times, last at "
                          f"{c.planned_at:%H:%M}; not asked again until it changes")
            lines.append(f"- {f.target}: {f.kind}. {f.evidence} ({since})")
        result.explanation = "\n".join(line for line in lines if line)
        return result

    def _plan_fresh(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps,
                    catalog: str = "") -> PlanResult:
        result = PlanResult(model=self.name)
        if not findings:
            result.explanation = "No waste found."
            return result
        findings, overflow = split_for_model(findings, self.max_findings)
        if overflow:
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
                          redactor=deps.policy.redaction.redactor(),
                          runbook_search=deps.runbook_search, proposed_by=self.name)
        tools = {t.name: t for t in make_tools(ctx)}
        bound = self.model.bind_tools(list(tools.values()))
        messages = self._messages(findings, obs, history, deps, catalog)
        result.prompt_chars = sum(len(str(m.content)) for m in messages)
        for _ in range(self.max_rounds):
            result.model_calls += 1
            started = time.perf_counter()
            try:
                reply = bound.invoke(messages)
            except Exception as exc:  # the endpoint is down (refused, timeout, 5xx): the policy model plans
                result.degraded = f"model unavailable: {type(exc).__name__}: {exc}; planned by the policy model"
                break
            finally:
                result.model_latency_s.append(round(time.perf_counter() - started, 3))
            if not isinstance(reply, AIMessage):
                result.errors.append(f"model returned {type(reply).__name__}, not a message")
                break
            usage: dict[str, Any] = dict(reply.usage_metadata or {})
            result.prompt_tokens += int(usage.get("input_tokens", 0))
            result.completion_tokens += int(usage.get("output_tokens", 0))
            messages.append(reply)
            for bad in reply.invalid_tool_calls or []:
                result.errors.append(f"malformed tool call {bad.get('name')}: {bad.get('error')}")
                messages.append(ToolMessage(f"error: malformed call {bad.get('name')}({str(bad.get('args'))[:200]}): "
                                            f"{bad.get('error')}", tool_call_id=bad.get("id") or "invalid"))
            if not reply.tool_calls:
                result.explanation = str(reply.content).strip()
                # A finished turn: it stopped calling tools after using some, or it said something.
                result.answered = cut_off(reply) is None and bool(result.explanation or result.tool_calls)
                break
            screened, notes = screen_tool_calls(reply, self.max_tool_calls_per_turn, self.max_tool_args_bytes)
            result.errors += notes
            for call, why in screened:
                if why:
                    messages.append(ToolMessage(refusal_message(call, why), tool_call_id=call.get("id") or "call"))
                else:
                    result.tool_calls += 1
                    messages.append(self._run_tool(tools, call, result))
        result.proposals = list(ctx.proposals)
        if result.degraded:  # findings the model did not get to are planned as if no model were configured
            covered = {p.target for p in result.proposals}
            fallback = PolicyModel().plan([f for f in findings if f.target not in covered], obs, history, deps)
            result.proposals += fallback.proposals
            result.explanation = result.explanation or fallback.explanation
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
