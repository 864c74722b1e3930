"""POST /api/chat: server-sent events with tool calls and answer chunks, from the model or the offline answerer."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from agent.api.answerer import ChatContext, ChatEvent, answer, detect_language
from agent.api.auth import Viewer
from agent.api.runtime import StewardRuntime
from agent.api.schemas import ChatRequest
from tools.agent_tools import ToolContext, is_mutating, make_tools

router = APIRouter()
log = logging.getLogger("steward.chat")


def chat_context(rt: StewardRuntime) -> ChatContext:
    deps = rt.deps
    with rt.graph_lock:
        obs = deps.fresh_observation("chat")
    tool_ctx = ToolContext(observation=obs, findings=rt.findings(), scheduler=deps.scheduler, logs=deps.logs,
                           redactor=deps.policy.redaction.redactor(),
                           runbook_search=deps.runbook_search, proposed_by="chat")
    # Chat only reads: mutating tools are never bound here, so a chat cannot even propose an action.
    tools = {t.name: t for t in make_tools(tool_ctx) if not is_mutating(t)}
    return ChatContext(findings=rt.findings(), observation=obs, tools=tools, audit=deps.audit,
                       pending=deps.approvals.pending(), now=obs.at, currency=deps.currency)


def _sse(event: ChatEvent) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, default=str, ensure_ascii=False)}\n\n"


def chat_events(rt: StewardRuntime, body: ChatRequest) -> Iterator[str]:
    lang = body.lang or detect_language(body.message)
    try:
        ctx = chat_context(rt)
        if rt.chat_model is not None:
            from agent.api.llm_chat import answer_with_model

            def count(n: int) -> None:
                rt.llm_tokens_total += n

            events = answer_with_model(rt.chat_model, ctx, body.message, lang, count_tokens=count, **rt.chat_bounds)
        else:
            events = answer(ctx, body.message, lang)
        for event in events:
            yield _sse(event)
    except Exception as exc:  # the stream has started: report the error as an event, not a broken connection
        log.exception("chat failed")
        yield _sse({"type": "error", "message": f"{type(exc).__name__}: {exc}"})


@router.post("/api/chat", tags=["chat"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "Server-sent events: start, tool_call, tool_result, token, done, error. "
                                             "Each data line is a JSON object with a 'type' field."}})
def chat(request: Request, body: ChatRequest, who: Viewer) -> StreamingResponse:
    rt: StewardRuntime = request.app.state.runtime
    return StreamingResponse(chat_events(rt, body), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
