"""POST /api/chat: server-sent events with tool calls and answer chunks, from the model or the offline answerer."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from agent.api.answerer import (
    ChatContext,
    ChatEvent,
    KeepFn,
    Lang,
    answer,
    answered_offline,
    chat_tools,
    classify,
    reply_language,
)
from agent.api.auth import Principal, Viewer
from agent.api.runtime import StewardRuntime
from agent.api.schemas import ChatRequest
from agent.chatops.commands import KeepRequest, grant_keep
from core.durations import format_duration
from tools.agent_tools import ToolContext, is_mutating, make_tools

router = APIRouter()
log = logging.getLogger("steward.chat")


STALE_AFTER_S = 600.0  # a reading older than this and two sweep intervals is named as old in the answer

def chat_context(rt: StewardRuntime, lang: Lang = "en", *, who: Principal | None = None,
                 job: str | None = None, zone: tzinfo = UTC, newest_only: bool = False,
                 asker: str | None = None) -> tuple[ChatContext, str]:
    """The context, and a notice to put before the answer when it could not read the cluster fresh.

    A running sweep holds the graph lock (the first one for as long as it builds the runbook index): chat
    waits `rt.read_wait_s` at most, then answers from the newest reading this process holds, saying so.
    """
    deps = rt.deps
    # newest_only: the newest reading held, never a cluster read (a chat platform waits a few seconds at most).
    obs, fresh = (rt.newest_observation(), True) if newest_only else rt.read_cluster("chat")
    if obs is None:
        raise SweepStillReading(_t(lang, "The first sweep is still reading the cluster; ask again in a moment.",
                                   "首次巡检仍在读取集群，请稍后再问。"))
    # The records are read as of now, whatever the reading's age: a keep granted since the last sweep is in force
    # (the answer said "nothing is planned" about a job kept a minute before).
    now = max(obs.at, deps.clock.now())
    notice = "" if fresh else _stale_notice(rt, obs.at, lang)
    every = rt.scheduler.schedule.every_s or STALE_AFTER_S
    if fresh and (now - obs.at).total_seconds() > max(2 * every, STALE_AFTER_S):
        notice = _old_notice(rt, obs.at, now, lang)  # sweeps have not finished for a while: say how old it is
    tool_ctx = ToolContext(observation=obs, findings=rt.findings(), scheduler=deps.scheduler, logs=deps.logs,
                           redactor=deps.policy.redaction.redactor(),
                           runbook_search=deps.runbook_search, proposed_by="chat")
    # Chat only reads: mutating tools are never bound here, so a chat cannot even propose an action.
    tools = {t.name: t for t in make_tools(tool_ctx) if not is_mutating(t)}
    ctx = ChatContext(findings=rt.findings(), observation=obs, tools=tools, audit=deps.audit,
                      pending=deps.approvals.pending(), now=now, currency=deps.currency, policy=deps.policy,
                      job=job, keep=_keeper(rt, who) if who is not None else None, zone=zone,
                      swept=rt.latest is not None, asker=asker or (who.name if who is not None else None))
    ctx.tools.update({t.name: t for t in chat_tools(ctx, lang)})
    return ctx, notice


def _keeper(rt: StewardRuntime, who: Principal) -> KeepFn:
    """`keep` from the web chat: the ChatOps path (owner up to a day, approver up to 30 days, live jobs only)."""

    def keep(request: KeepRequest | str, job: str | None, lang: Lang) -> str:
        if not rt.graph_lock.acquire(timeout=rt.read_wait_s):  # the cluster is read fresh, never mid-sweep
            return _t(lang, "A sweep is running; send `keep` again in a moment. Nothing was changed.",
                      "巡检正在进行，请稍后再发送 `保留`。未做任何更改。")
        try:
            return grant_keep(rt.deps, request, user=who.name, approver=who.role == "approver",
                              by=f"web:{who.name}", run_id="chat", lang=lang, context_job=job,
                              data={"via": who.via})
        finally:
            rt.graph_lock.release()

    return keep


class SweepStillReading(RuntimeError):
    """No reading of the cluster exists yet: the first sweep holds the lock and has not read it."""


def _t(lang: Lang, en: str, zh: str) -> str:
    return zh if lang == "zh" else en


def _read_at(rt: StewardRuntime, at: datetime, lang: Lang) -> str:
    from agent.detectors.evidence import zone_suffix

    return f"{at.astimezone(rt.zone):%H:%M}{zone_suffix(rt.zone, lang)}"


def _stale_notice(rt: StewardRuntime, at: datetime, lang: Lang) -> str:
    read = _read_at(rt, at, lang)
    if rt.latest is None:
        return _t(lang, f"(The first sweep is still running: no findings yet. Jobs and metrics as read at {read}.)",
                  f"（首次巡检仍在进行，暂无发现；以下为 {read} 读取的作业与指标。）")
    return _t(lang, f"(A sweep is running; this answer uses the cluster as read at {read}.)",
              f"（巡检正在进行；以下回答基于 {read} 读取的集群状态。）")


def _old_notice(rt: StewardRuntime, at: datetime, now: datetime, lang: Lang) -> str:
    read = _read_at(rt, at, lang)
    ago = format_duration(round((now - at).total_seconds() / 60) * 60)
    return _t(lang, f"(The newest reading of the cluster is from {read}, {ago} ago: no sweep has finished since. "
                    "Jobs and findings below are as of then; keeps and approvals are current.)",
              f"（最近一次读取集群是在 {read}，已过去 {ago}：此后没有完成的巡检。以下作业与发现为当时状态；保留与审批为当前状态。）")


def _sse(event: ChatEvent) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, default=str, ensure_ascii=False)}\n\n"


def _or_offline(events: Iterator[ChatEvent], ctx: ChatContext, message: str, lang: Lang) -> Iterator[ChatEvent]:
    """The model's events; when the model fails before it has said anything (its endpoint down, a timeout), the
    built-in answerer's, after a line saying so: a question is still answered while the model is away."""
    said = False
    try:
        for event in events:
            said = said or event["type"] in ("token", "done")
            yield event
    except Exception as exc:
        if said:
            raise
        log.warning("chat model unavailable, answered offline: %s: %s", type(exc).__name__, exc)
        note = _t(lang, f"(The model is unavailable ({type(exc).__name__}); the built-in answerer replies.)",
                  f"（模型不可用（{type(exc).__name__}），以下由内置应答器回答。）")
        yield from answered_offline(ctx, message, lang, note)


def chat_events(rt: StewardRuntime, body: ChatRequest, who: Principal | None = None,
                zone: tzinfo = UTC) -> Iterator[str]:
    lang = reply_language(body.message, body.lang)  # a Chinese question in the English UI gets Chinese
    try:
        ctx, notice = chat_context(rt, lang, who=who, job=body.job, zone=zone)
        # `keep` is a command, not a question: it goes the one audited path, with or without a model.
        if rt.chat_model is not None and classify(body.message) != "keep":
            from agent.api.llm_chat import answer_with_model

            def count(n: int) -> None:
                rt.llm_tokens_total += n

            events = _or_offline(answer_with_model(rt.chat_model, ctx, body.message, lang, count_tokens=count,
                                                   **rt.chat_bounds), ctx, body.message, lang)
        else:
            events = answer(ctx, body.message, lang)
        for event in events:
            if notice and event["type"] == "done":
                event = {**event, "answer": f"{notice}\n\n{event['answer']}"}
            yield _sse(event)
            if notice and event["type"] == "start":
                yield _sse({"type": "token", "text": f"{notice}\n\n"})
    except SweepStillReading as exc:
        yield _sse({"type": "error", "message": str(exc)})
    except Exception as exc:  # the stream has started: report the error as an event, not a broken connection
        log.exception("chat failed")
        yield _sse({"type": "error", "message": f"{type(exc).__name__}: {exc}"})


@router.post("/api/chat", tags=["chat"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "Server-sent events: start, tool_call, tool_result, token, done, error. "
                                             "Each data line is a JSON object with a 'type' field."}})
def chat(request: Request, body: ChatRequest, who: Viewer) -> Response:
    rt: StewardRuntime = request.app.state.runtime
    zone = request.app.state.settings.zone()
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if rt.chat_model is None or classify(body.message) == "keep":
        # The built-in answerer has every event at once: one write, not a thread hop per event.
        return Response("".join(chat_events(rt, body, who, zone)), media_type="text/event-stream", headers=headers)
    return StreamingResponse(chat_events(rt, body, who, zone), media_type="text/event-stream", headers=headers)
