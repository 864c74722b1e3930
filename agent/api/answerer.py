"""The offline chat answerer: common operator questions answered from findings, audit and tools, no model."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from agent.detectors.evidence import describe, kind_label
from agent.records.approvals import Approval
from agent.records.audit import AuditLog
from agent.records.cost import money
from agent.records.savings import compute_savings
from core.actions import Finding
from core.observation import Observation

Lang = Literal["en", "zh"]
Intent = Literal["approvals", "savings", "today", "waste", "help"]
ChatEvent = dict[str, Any]

_CJK = re.compile(r"[\u4e00-\u9fff]")
_GPU_MODEL = re.compile(r"(?<![A-Za-z0-9])([AHBL]\d{2,3}|V100|T4|L4|MI\d{3})(?![0-9])", re.IGNORECASE)
_INTENTS: list[tuple[Intent, tuple[str, ...]]] = [
    ("approvals", ("approv", "pending", "waiting for", "审批", "待批", "批准", "待处理")),
    ("savings", ("saving", "saved", "reclaim", "money", "cost", "节省", "省了", "回收", "省下", "成本")),
    ("today", ("today", "did you do", "have you done", "what happened", "今天", "做了什么", "干了什么", "做了哪些")),
    ("waste", ("wast", "idle", "zombie", "who", "over-provision", "overprovision", "浪费", "谁", "闲置", "空闲",
               "僵尸", "占用")),
]


def detect_language(text: str) -> Lang:
    return "zh" if _CJK.search(text) else "en"


def classify(text: str) -> Intent:
    lowered = text.lower()
    for intent, words in _INTENTS:
        if any(w in lowered for w in words):
            return intent
    return "help"


@dataclass
class ChatContext:
    """What an answer may read: the latest sweep's findings, read-only tools and the stores."""

    findings: list[Finding]
    observation: Observation
    tools: dict[str, Any]  # name -> langchain tool (read-only ones only)
    audit: AuditLog
    pending: list[Approval]
    now: datetime
    currency: str


def _t(lang: Lang, en: str, zh: str) -> str:
    return zh if lang == "zh" else en


def _rb(f: Finding) -> str:
    return f" [rb:{f.runbook}]" if f.runbook else ""


def _call(ctx: ChatContext, name: str, args: dict[str, Any]) -> Generator[ChatEvent, None, dict[str, Any]]:
    yield {"type": "tool_call", "name": name, "args": args}
    result = ctx.tools[name].invoke(args)
    yield {"type": "tool_result", "name": name, "status": result.get("status"), "summary": result.get("message")}
    return result


def _waste(ctx: ChatContext, text: str, lang: Lang) -> Generator[ChatEvent, None, str]:
    listed = yield from _call(ctx, "list_jobs", {"only_with_findings": True})
    model = _GPU_MODEL.search(text)
    want = model.group(1).upper() if model else None
    node_model = {n.name: n.gpu_model.upper() for n in ctx.observation.nodes}
    pool_model = {p.name: p.gpu_model.upper() for p in ctx.observation.pools}
    jobs = {row["job"]: row for row in (listed.get("data") or [])}
    rows = []
    for f in sorted(ctx.findings, key=lambda f: -f.waste_cost):
        gpu = pool_model.get(f.target) if f.target_type == "pool" else node_model.get((jobs.get(f.target) or {}).get("node") or "")
        if want and want not in (gpu or ""):
            continue
        rows.append((f, jobs.get(f.target, {}), gpu or "?"))
    for f, _, _ in [r for r in rows if r[0].target_type == "job"][:3]:
        yield from _call(ctx, "query_gpu_metrics", {"job": f.target, "window_minutes": 60})
    scope = f" {want}" if want else ""
    if not rows:
        return _t(lang, f"Nobody is wasting{scope} GPUs right now: the latest sweep found no waste{scope}.",
                  f"目前没有人在浪费{scope} GPU：最近一次巡检没有发现{scope}浪费。")
    total = sum(f.waste_cost for f, _, _ in rows)
    lines = [_t(lang, f"{len(rows)} findings on{scope} GPUs, {money(total, ctx.currency)} wasted so far:",
                f"发现 {len(rows)} 处{scope} GPU 浪费，累计 {money(total, ctx.currency)}：")]
    for f, job, gpu in rows:
        who = job.get("user") or f.owner or "-"
        if lang == "zh":
            lines.append(f"- **{f.target}**（{who}，{f.gpus}× {gpu}）{kind_label(f.kind, lang)}：{describe(f, lang)}{_rb(f)}")
        else:
            lines.append(f"- **{f.target}** ({who}, {f.gpus}× {gpu}) {f.kind}: {f.evidence}{_rb(f)}")
    return "\n".join(lines)


def _today(ctx: ChatContext, lang: Lang) -> Generator[ChatEvent, None, str]:
    day = ctx.now.replace(hour=0, minute=0, second=0, microsecond=0)
    yield {"type": "tool_call", "name": "read_audit_log", "args": {"kind": "execution", "since": day.isoformat()}}
    done = [e for e in ctx.audit.entries(kind="execution", since=day, limit=500, newest_first=False) if e.at <= ctx.now]
    yield {"type": "tool_result", "name": "read_audit_log", "status": "ok", "summary": f"{len(done)} entries"}
    if not done:
        return _t(lang, "Nothing yet today: no actions were taken.", "今天还没有执行任何操作。")
    lines = [_t(lang, f"Today I took {len(done)} actions:", f"今天共执行了 {len(done)} 项操作：")]
    for e in done[-20:]:
        by = f" (approved by {e.data['approved_by']})" if e.data.get("approved_by") else ""
        lines.append(f"- {e.at:%H:%M} {e.action} **{e.target}** (level {e.level}): {e.status}{by}")
    return "\n".join(lines)


def _savings(ctx: ChatContext, lang: Lang) -> Generator[ChatEvent, None, str]:
    yield {"type": "tool_call", "name": "compute_savings", "args": {}}
    s = compute_savings(ctx.audit, ctx.findings, ctx.now, ctx.currency, points=2)
    yield {"type": "tool_result", "name": "compute_savings", "status": "ok",
           "summary": f"{s.reclaimed_gpu_hours} GPU-h"}
    head = _t(lang, f"Reclaimed so far: {s.reclaimed_gpu_hours:.1f} GPU-hours, {money(s.reclaimed_money, s.currency)} "
                    f"from {s.actions} actions.",
              f"累计回收 {s.reclaimed_gpu_hours:.1f} GPU 小时，节省 {money(s.reclaimed_money, s.currency)}"
              f"（{s.actions} 项操作）。")
    if s.waste_by_team:
        top = ", ".join(f"{t.team} {money(t.money, s.currency)}" for t in s.waste_by_team[:4])
        head += _t(lang, f"\nStill wasting, by team: {top}.", f"\n仍在浪费（按团队）：{top}。")
    return head


def _approvals(ctx: ChatContext, lang: Lang) -> str:
    if not ctx.pending:
        return _t(lang, "No approvals are waiting.", "目前没有待审批的操作。")
    lines = [_t(lang, f"{len(ctx.pending)} actions wait for a human:", f"有 {len(ctx.pending)} 项操作等待人工审批：")]
    for a in ctx.pending:
        lines.append(f"- `{a.id}` {a.action} **{a.target}** (level {a.level}), "
                     + _t(lang, f"expires {a.expires_at:%H:%M} UTC", f"{a.expires_at:%H:%M} UTC 过期"))
    return "\n".join(lines)


HELP = {
    "en": "I can answer: who is wasting GPUs (e.g. \"who is wasting A100s right now?\"), what I did today, "
          "how much was saved, and which approvals are pending.",
    "zh": "我可以回答：谁在浪费 GPU（例如“谁在浪费 A100？”）、今天做了什么、节省了多少、有哪些待审批操作。",
}


def answer(ctx: ChatContext, text: str, lang: Lang | None = None) -> Iterator[ChatEvent]:
    """Tool calls as they happen, then the answer in small chunks (the same events the model path streams)."""
    lang = lang or detect_language(text)
    intent = classify(text)
    yield {"type": "start", "intent": intent, "lang": lang, "answerer": "offline"}
    if intent == "waste":
        reply = yield from _waste(ctx, text, lang)
    elif intent == "today":
        reply = yield from _today(ctx, lang)
    elif intent == "savings":
        reply = yield from _savings(ctx, lang)
    elif intent == "approvals":
        reply = _approvals(ctx, lang)
    else:
        reply = HELP[lang]
    for chunk in re.findall(r"\S+\s*|\s+", reply):
        yield {"type": "token", "text": chunk}
    yield {"type": "done", "answer": reply}
