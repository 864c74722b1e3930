"""Chat through the configured model: read-only tools bound, tokens and tool calls streamed as they happen."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent.api.answerer import ChatContext, ChatEvent, Lang, answered_offline
from agent.planning.llm_planner import LANGUAGE_NAMES, refusal_message, screen_tool_calls
from agent.planning.prompts import fence_untrusted
from tools.agent_tools import UNTRUSTED_NOTE

SYSTEM = """You are GPU Steward, answering a platform/SRE operator about a GPU cluster.
Answer from the findings below and from your read-only tools (list_jobs, query_gpu_metrics, inspect_job_logs,
retrieve_runbook; job_status for why a job was flagged or stopped and what happens to it next and when;
actions_today for what was done today). You cannot stop jobs or resize pools from chat: say that actions go
through the sweep's guardrail and the approvals inbox. An owner keeps a job by sending `keep <job> 4h <reason>`
as its own message. Cite runbooks as [rb:<id>]. Be brief, with numbers. Reply in {language}.
{untrusted}
Cluster time: {now}. Findings of the latest sweep:
{findings}
Pending approvals: {pending}
{job}"""


def _system(ctx: ChatContext, lang: Lang) -> SystemMessage:
    rows = [{"target": f.target, "kind": f.kind, "gpus": f.gpus, "waste_cost": f.waste_cost, "evidence": f.evidence,
             "runbook": f.runbook} for f in ctx.findings]
    pending = [f"{a.id} {a.action} {a.target} (level {a.level})" for a in ctx.pending] or ["none"]
    return SystemMessage(SYSTEM.format(language=LANGUAGE_NAMES[lang], untrusted=UNTRUSTED_NOTE, now=ctx.now.isoformat(),
                                       findings=fence_untrusted("detectors", json.dumps(rows, ensure_ascii=False)),
                                       pending="; ".join(pending),
                                       job=f"The user is looking at job {ctx.job}." if ctx.job else ""))


def _tokens_used(chunk: AIMessageChunk) -> int:
    usage = getattr(chunk, "usage_metadata", None) or {}
    return int(usage.get("total_tokens") or 0)


def answer_with_model(model: Any, ctx: ChatContext, text: str, lang: Lang, *, max_rounds: int = 6,
                      count_tokens: Callable[[int], None] = lambda n: None, max_tool_calls_per_turn: int = 20,
                      max_tool_args_bytes: int = 8192) -> Iterator[ChatEvent]:
    """Only complete tool calls run: a stream cut mid-arguments, oversized arguments and calls past the per-turn
    cap are answered with an error instead (see agent.planning.llm_planner.screen_tool_calls)."""
    bound = model.bind_tools(list(ctx.tools.values()))
    messages: list[BaseMessage] = [_system(ctx, lang), HumanMessage(text)]
    yield {"type": "start", "intent": "model", "lang": lang, "answerer": getattr(model, "model_name", None) or "model"}
    reply = ""
    finished = False  # a round with no tool call: the model's turn ended
    for _ in range(max_rounds):
        gathered: AIMessageChunk | None = None
        for chunk in bound.stream(messages):
            gathered = chunk if gathered is None else gathered + chunk
            if isinstance(chunk.content, str) and chunk.content:
                reply += chunk.content
                yield {"type": "token", "text": chunk.content}
        if gathered is None:
            finished = True
            break
        count_tokens(_tokens_used(gathered))
        messages.append(gathered)
        for bad in gathered.invalid_tool_calls:  # unparseable arguments: answered, so the next request is valid
            yield {"type": "tool_result", "name": bad.get("name"), "status": "error", "summary": bad.get("error")}
            messages.append(ToolMessage(f"error: malformed call {bad.get('name')}: {bad.get('error')}",
                                        tool_call_id=bad.get("id") or "invalid"))
        if not gathered.tool_calls and not gathered.invalid_tool_calls:
            finished = True
            break
        for call, why in screen_tool_calls(gathered, max_tool_calls_per_turn, max_tool_args_bytes)[0]:
            if why:
                yield {"type": "tool_result", "name": call["name"], "status": "error", "summary": why}
                messages.append(ToolMessage(refusal_message(call, why), tool_call_id=call.get("id") or call["name"]))
                continue
            yield {"type": "tool_call", "name": call["name"], "args": call["args"]}
            tool = ctx.tools.get(call["name"])
            if tool is None:  # the model asked for a tool chat does not have (a mutating one, or a made-up name)
                result: dict[str, Any] = {"status": "error", "message": f"no read-only tool {call['name']!r} in chat"}
            else:
                try:
                    result = tool.invoke(call["args"])
                except Exception as exc:  # errors go back to the model, naming the call
                    result = {"status": "error", "message": f"{call['name']}({call['args']}) failed: {exc}"}
            yield {"type": "tool_result", "name": call["name"], "status": result.get("status"),
                   "summary": result.get("message")}
            messages.append(ToolMessage(json.dumps(result, default=str, ensure_ascii=False)[:20_000],
                                        tool_call_id=call.get("id") or call["name"]))
    if reply.strip():
        yield {"type": "done", "answer": reply}
        return
    # No text: the model still called tools after max_rounds, or ended its turn saying nothing. The person gets the
    # built-in answerer's reply after a line saying so (as when the endpoint is down, agent/api/chat.py _or_offline).
    if finished:
        note = _t(lang, "(The model did not finish: it gave no answer; the built-in answerer replies.)",
                  "（模型未完成回答：没有给出任何答复，以下由内置应答器回答。）")
    else:
        note = _t(lang, f"(The model did not finish: it was still calling tools after {max_rounds} rounds; the "
                        "built-in answerer replies.)",
                  f"（模型未完成回答：{max_rounds} 轮后仍在调用工具，以下由内置应答器回答。）")
    yield from answered_offline(ctx, text, lang, note)


def _t(lang: Lang, en: str, zh: str) -> str:
    return zh if lang == "zh" else en
