"""The offline chat answerer: common operator questions answered from findings, audit and tools, no model."""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Literal

from langchain_core.tools import StructuredTool

from agent.chatops.commands import ANSWER_COMMAND, JOB_STATE_ZH, KeepRequest, parse_keep
from agent.config.policy import Policy
from agent.detectors.evidence import describe, describe_record, kind_label, localised
from agent.records.approvals import Approval
from agent.records.audit import AuditEntry, AuditLog
from agent.records.cost import money
from agent.records.savings import compute_savings
from core.actions import Finding
from core.durations import format_duration
from core.observation import Observation
from core.text import plural

Lang = Literal["en", "zh"]
Intent = Literal["keep", "job", "approvals", "queue", "runbook", "kept", "cost", "forecast", "savings", "status", "today",
                 "waste", "help"]
ChatEvent = dict[str, Any]
KeepFn = Callable[[KeepRequest | str, str | None, Lang], str]  # (parsed keep, the chat's job, language) -> reply

_CJK = re.compile(r"[\u4e00-\u9fff]")
_GPU_MODEL = re.compile(r"(?<![A-Za-z0-9])([AHBL]\d{2,3}|V100|T4|L4|MI\d{3})(?![0-9])", re.IGNORECASE)
_INTENTS: list[tuple[Intent, tuple[str, ...]]] = [
    ("forecast", ("forecast", "predict", "scale down", "scale-down", "scale up", "quiet hours", "low-load", "run out",
                  "running out", "capacity", "tomorrow", "next week", "enough gpu", "预测", "缩容", "扩容", "低负载",
                  "缺卡", "加卡", "不够用", "够不够", "够用", "容量", "明天", "下周")),
    ("status", ("status of the cluster", "cluster status", "state of the cluster", "free gpu", "gpus free",
                "available gpu", "gpus available", "spare gpu", "summary", "overview", "集群状态", "集群现在",
                "集群情况", "还剩", "剩多少", "剩余", "空闲的卡", "空闲卡", "可用的卡", "可用卡", "概况", "总览", "汇总")),
    ("job", ("why", "what will happen", "what happens", "what's next", "what next", "when will", "status of",
             "为什么", "为何", "原因", "会怎样", "会怎么样", "什么时候", "何时", "接下来", "状态", "在干嘛", "在干什么")),
    ("savings", ("saving", "saved", "save", "sav", "reclaim", "节省", "省了", "回收", "省下")),
    ("cost", ("spend", "spent", "cost", "bill", "花了", "花费", "费用", "开销", "账单", "多少钱", "成本")),
    ("approvals", ("approv", "pending", "waiting for", "审批", "待批", "批准", "待处理")),
    ("today", ("today", "did you do", "have you done", "what happened", "overnight", "last night", "yesterday",
               "while i was", "what did the agent", "what did steward", "what did the steward", "今天", "做了什么",
               "干了什么", "做了哪些", "干了啥", "做了啥", "昨晚", "昨天", "夜里", "晚上")),
    ("waste", ("wast", "idle", "zombie", "hung", "stuck", "who", "over-provision", "overprovision", "low util",
               "利用率低", "利用率 low", "浪费", "谁", "闲置", "空闲", "僵尸", "卡死", "卡住", "挂起", "占用", "超配")),
]
# Jobs waiting to be scheduled, not actions waiting for a human ("which jobs are pending in the queue?").
_QUEUE = re.compile(r"\bqueu|\bpending (?:jobs?|pods?|tasks?)\b|\b(?:jobs?|pods?|tasks?) (?:are |is |still )?pending"
                    r"|\bunschedul|\bnot scheduled\b|排队|队列|调度不上|没调度|等待调度|(?:作业|任务|job)[^。？?]*pending"
                    r"|pending[^。？?]*(?:作业|任务|job)", re.IGNORECASE)
_APPROVAL_WORDS = re.compile(r"approv|审批|批准|待批", re.IGNORECASE)
# How to handle a kind of trouble: the runbooks answer ("how do I debug an NCCL timeout?", "XID 79 是什么意思").
_RUNBOOK = re.compile(r"runbook|playbook|troubleshoot|debug|diagnos|\bxid\b|how (?:do|can|should|to) (?:i |we )?"
                      r"(?:fix|handle|deal with|investigate)|what (?:does|do) .{1,40} mean|排查|怎么处理|如何处理|"
                      r"怎么解决|如何解决|怎么办|手册|是什么意思|什么意思", re.IGNORECASE)
# Who is kept or protected ("which jobs are protected?", "谁保留了作业？有哪些豁免").
_KEPT = re.compile(r"\bprotected\b|\bexempt|\bkept\b|豁免|受保护|保护名单|保护列表|保留了|被保留|保留的",
                   re.IGNORECASE)
# An answer to an approval typed into chat ("approve apr_1a2b"): chat does not take it, and says where to (the ChatOps
# command's own pattern).
_ANSWER_TYPED = ANSWER_COMMAND
# An answer asked for in words ("帮我 approve 一下 a100-ondemand 的 resize", "please deny the stop of x"): the same reply,
# not an answer to whatever else the message asked (it read as a savings question and said nothing of the approval).
_ANSWER_ASKED = re.compile(r"^\s*(?:please\s+|pls\s+|can you\s+|could you\s+)?(?:approve|deny|reject)\b"
                           r"|(?:帮我|请|麻烦)\s*(?:approve|deny|reject|批准|审批|拒绝)|(?:批准|拒绝|审批)一下",
                           re.IGNORECASE)  # an imperative, not a question about one ("did anyone approve ...?")


def detect_language(text: str) -> Lang:
    return "zh" if _CJK.search(text) else "en"


def reply_language(text: str, ui_lang: Lang | None = None) -> Lang:
    """The question's language (Chinese characters: zh; Latin words: en); the UI's only when it has neither."""
    if _CJK.search(text):
        return "zh"
    if re.search(r"[A-Za-z]{2,}", text):
        return "en"
    return ui_lang or "en"


_POOL = re.compile(r"\b(?:node ?)?pools?\b|节点池|资源池", re.IGNORECASE)


def classify(text: str) -> Intent:
    if parse_keep(text) is not None:
        return "keep"
    if _ANSWER_TYPED.search(text) or _ANSWER_ASKED.search(text):
        return "approvals"
    lowered = text.lower()
    if re.search(r"\b(?:free|available|spare)\b|空闲的?.{0,8}卡|空卡|可用的?.{0,8}卡|剩", lowered) \
            and (re.search(r"\bgpus?\b|cards?|卡", lowered) or _GPU_MODEL.search(text)) \
            and not re.search(r"\b(?:you|we)\b|你们?|我们", lowered):
        return "status"  # "how many GPUs does the h100 pool have free?", "which queue has free GPUs?": a count
    if _QUEUE.search(text) and not _APPROVAL_WORDS.search(text) and not _RUNBOOK.search(text):
        return "queue"  # "job stuck in pending for hours, how to debug": the runbook's, below
    if _RUNBOOK.search(text):
        return "runbook"
    if _KEPT.search(text):
        return "kept"
    if _POOL.search(text) and not re.search(r"cost|spen[dt]|bill|花|费用|成本|sav|节省", text, re.IGNORECASE):
        return "forecast"  # "which pool is idle at night?": pools' quiet windows and plans, not jobs' waste
    for intent, words in _INTENTS:
        if any(w in lowered for w in words):
            if intent == "today" and re.search(r"wast|idle|浪费|闲置|空闲|谁", lowered) \
                    and not re.search(r"\b(?:you|steward|agent)\b|你|干了|做了", lowered):
                return "waste"  # "who was idle last night?": the waste, not what the steward did
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
    policy: Policy | None = None
    job: str | None = None  # the job the chat is about (the UI's finding or approval), when the question names none
    keep: KeepFn | None = None  # grants `keep` through the ChatOps path; None: this chat cannot keep jobs
    zone: tzinfo = UTC  # the time zone people read times in (STEWARD_DISPLAY_TZ)
    swept: bool = True  # whether a sweep has run in this process: with none, no finding is no evidence of no waste
    asker: str | None = None  # who asks, as the cluster names users ("my notebook"); None: not known


def _t(lang: Lang, en: str, zh: str) -> str:
    return zh if lang == "zh" else en


def _rb(f: Finding) -> str:
    return f" [rb:{f.runbook}]" if f.runbook else ""


def _call(ctx: ChatContext, name: str, args: dict[str, Any]) -> Generator[ChatEvent, None, dict[str, Any]]:
    yield {"type": "tool_call", "name": name, "args": args}
    result = ctx.tools[name].invoke(args)
    yield {"type": "tool_result", "name": name, "status": result.get("status"), "summary": result.get("message")}
    return result


# A question about one kind of waste ("which jobs are hung?") lists that kind only.
_KIND_WORDS = {"zombie": ("hung", "stuck", "zombie", "卡死", "卡住", "挂起", "僵尸"),
               "idle": ("idle", "空闲", "闲置"), "overprovisioned": ("overprovision", "over-provision", "超配")}


def _waste(ctx: ChatContext, text: str, lang: Lang) -> Generator[ChatEvent, None, str]:
    listed = yield from _call(ctx, "list_jobs", {"only_with_findings": True})
    model = _GPU_MODEL.search(text)
    want = model.group(1).upper() if model else None
    node_model = {n.name: n.gpu_model.upper() for n in ctx.observation.nodes}
    pool_model = {p.name: p.gpu_model.upper() for p in ctx.observation.pools}
    jobs = {row["job"]: row for row in (listed.get("data") or [])}
    rows = []
    kinds = {kind for kind, words in _KIND_WORDS.items() if any(w in text.lower() for w in words)}
    team, unknown_team = _team_named(ctx, text)
    if team is None and unknown_team is not None:
        return _t(lang, f"No waste found for team **{unknown_team}**: no job of a team by that name runs now. Teams "
                        f"with jobs now: {_teams_known(ctx, lang)}.",
                  f"团队 **{unknown_team}** 没有发现浪费：目前没有该团队的作业在运行。目前有作业的团队："
                  f"{_teams_known(ctx, lang)}。")
    from agent.records.savings import team_of

    for f in sorted(ctx.findings, key=lambda f: -f.waste_cost):
        if kinds and f.kind not in kinds:
            continue
        if team is not None and team_of(f) != team and (jobs.get(f.target) or {}).get("namespace") != team:
            continue
        gpu = pool_model.get(f.target) if f.target_type == "pool" else node_model.get((jobs.get(f.target) or {}).get("node") or "")
        if want and want not in (gpu or ""):
            continue
        rows.append((f, jobs.get(f.target, {}), gpu or "?"))
    for f, _, _ in [r for r in rows if r[0].target_type == "job"][:3]:
        yield from _call(ctx, "query_gpu_metrics", {"job": f.target, "window_minutes": 60})
    scope = f" {want}" if want else ""
    who, whose = (_t(lang, f"Nobody in team {team}", f"团队 {team} 目前没有人"),
                   _t(lang, f" in team {team}", f"团队 {team} 的")) if team else (_t(lang, "Nobody", "目前没有人"), "")
    if not rows and not ctx.swept:
        return _t(lang, "No sweep has run yet, so there are no findings to answer from: waste is not known either "
                        "way. A sweep runs on the schedule (or an approver presses Sweep now at the top of the page).",
                  "尚未运行过巡检，没有可以依据的发现：是否有浪费目前无从判断。巡检会按计划运行（审批人也可点击页面顶部的“立即巡检”）。")
    if not rows and kinds:
        return _none_of_kind(ctx, sorted(kinds), whose, lang)
    if not rows:
        return _t(lang, f"{who} is wasting{scope} GPUs right now: the latest sweep found no waste{scope}{whose}.",
                  f"{who}在浪费{scope} GPU：最近一次巡检没有发现{whose}{scope}浪费。")
    total = sum(f.waste_cost for f, _, _ in rows)
    lines = [_t(lang, f"{plural(len(rows), 'finding')} on{scope} GPUs{whose}, {money(total, ctx.currency)} wasted so far:",
                f"发现{whose} {len(rows)} 处{scope} GPU 浪费，累计 {money(total, ctx.currency)}：")]
    if team is None and re.search(r"\bteams?\b|团队|哪个组|各组", text, re.IGNORECASE) \
            and (teams := _team_totals(ctx, lang)):
        lines.insert(0, teams)
    kept = _keeps_by_job(ctx)
    for f, job, gpu in rows:
        who = job.get("user") or f.owner or "-"
        keep = kept.get(f.target)
        if lang == "zh":
            note = f"（已由 {keep.by} 保留至 {_when(keep.until, ctx.now, ctx.zone, lang)}，期间不会停止）" if keep else ""
            lines.append(f"- **{f.target}**（{who}，{f.gpus}× {gpu}）{kind_label(f.kind, lang)}：{describe(f, lang, ctx.zone)}"
                         f"{_rb(f)}{note}")
        else:
            note = f" (kept by {keep.by} until {_when(keep.until, ctx.now, ctx.zone, lang)}: not stopped before)" if keep else ""
            lines.append(f"- **{f.target}** ({who}, {f.gpus}× {gpu}) {f.kind}: {describe(f, lang, ctx.zone)}{_rb(f)}{note}")
    return "\n".join(lines)


def _none_of_kind(ctx: ChatContext, kinds: list[str], whose: str, lang: Lang) -> str:
    """"Any zombies?" when the latest sweep found none: say so of that kind only (other waste may well be there), and
    name the jobs found that way and stopped in the last day (the question is often about one just stopped)."""
    label = "/".join(kind_label(k, lang) for k in kinds)
    since = (ctx.now - timedelta(hours=24)).astimezone(UTC)
    found = {e.target for e in ctx.audit.entries(kind="finding", since=since, limit=5000) if e.status in kinds}
    stopped = [e for e in ctx.audit.entries(kind="execution", since=since, limit=500, newest_first=False)
               if e.at <= ctx.now and e.target in found and e.status == "executed"
               and e.action in ("terminate", "force_terminate")]
    others = len(ctx.findings)
    parts = [_t(lang, f"The latest sweep found no {label} job{whose}.", f"最近一次巡检没有发现{whose}{label}作业。")]
    if stopped:
        names = ", ".join(f"**{e.target}** ({_when(e.at, ctx.now, ctx.zone, lang)})" for e in stopped[-5:])
        names_zh = "；".join(f"**{e.target}**，停止于 {_when(e.at, ctx.now, ctx.zone, lang)}" for e in stopped[-5:])
        parts.append(_t(lang, f"Found {label} and stopped in the last 24 hours: {names}.",
                        f"过去 24 小时内被判定为{label}并已停止的：{names_zh}。"))
    if others:
        parts.append(_t(lang, f"It found {plural(others, 'other finding')}: ask “who is wasting GPUs?” for them.",
                        f"另有 {others} 处其他发现，可问“谁在浪费 GPU？”查看。"))
    return " ".join(parts) if lang == "en" else "".join(parts)


def _keeps_by_job(ctx: ChatContext) -> dict[str, Any]:
    """The keep in force on each job now (the latest-ending one), matched as the guardrail matches it: by name, or by
    the job's uid where the keep recorded one."""
    uids = {j.uid: j.id for j in ctx.observation.jobs if j.uid}
    out: dict[str, Any] = {}
    for k in ctx.audit.exemptions_in_force(ctx.now):
        for name in {k.target, uids.get(k.target_uid or "", k.target)}:
            if name not in out or k.until > out[name].until:
                out[name] = k
    return out


ACTION_WORDS: dict[str, tuple[str, str]] = {
    "notify": ("warned the owner", "警告了所有者"),
    "terminate": ("asked it to stop (SIGTERM)", "请求其优雅停止（SIGTERM）"),
    "force_terminate": ("force-stopped it", "强制停止了它"),
    "resize_pool": ("resized the pool", "调整了资源池"),
}
STATUS_ZH = {"executed": "已执行", "failed": "失败", "skipped": "已跳过", "refused": "被拒绝", "dry_run": "演练（未执行）",
             "approved": "已批准", "denied": "已拒绝", "expired": "已过期", "pending": "待审批", "granted": "已批准"}
_GONE = ("completed", "failed", "cancelled")


def _action(action: str | None, lang: Lang) -> str:
    en, zh = ACTION_WORDS.get(action or "", (action or "?", action or "?"))
    return _t(lang, en, zh)


def _status(status: str | None, lang: Lang) -> str:
    return STATUS_ZH.get(status or "", status or "") if lang == "zh" else (status or "")


def _when(at: datetime | str, now: datetime, zone: tzinfo = UTC, lang: str = "en") -> str:
    """HH:MM in the display zone (STEWARD_DISPLAY_TZ) today, with the date when it is another day there."""
    from core.zones import zone_suffix

    at = datetime.fromisoformat(at) if isinstance(at, str) else at
    local, today = at.astimezone(zone), now.astimezone(zone)
    return f"{local:{'%H:%M' if local.date() == today.date() else '%Y-%m-%d %H:%M'}}{zone_suffix(zone, lang)}"


def _audited_evidence(e: AuditEntry, lang: Lang, zone: tzinfo) -> str:
    """A finding the audit log kept, in the reader's language: rendered from its numbers where the entry has them
    (entries before they were kept show the detector's English)."""
    data = e.data or {}
    if lang != "zh" or not isinstance(data.get("metrics"), dict):
        return localised(e.reason or "", e.at, zone)
    return describe_record({"kind": e.status, "target": e.target, "since": data.get("since") or e.at,
                            "detected_at": e.at, "evidence": e.reason or "", "gpus": data.get("gpus", 0),
                            "metrics": data["metrics"], "stop_after": data.get("stop_after")}, lang, zone)


def _detail(e: AuditEntry, lang: Lang) -> str:
    """What a stop or warning came to, from the adapter's detail (`stopped: ...`, `stopping: ...`, `... sent`)."""
    detail = str(e.data.get("detail") or "")
    if lang == "en":
        return f" ({detail})" if detail else ""
    if detail.startswith("stopped"):
        return "（作业已退出）"
    if detail.startswith("stopping"):
        return "（已发送 SIGTERM，作业尚未退出）"
    if detail.endswith("sent"):
        return "（已送达）"
    return ""


def _today(ctx: ChatContext, lang: Lang, overnight: bool = False) -> Generator[ChatEvent, None, str]:
    yield {"type": "tool_call", "name": "actions_today", "args": {"hours": 24} if overnight else {}}
    reply = actions_today(ctx, lang, hours=24 if overnight else None)
    yield {"type": "tool_result", "name": "actions_today", "status": "ok", "summary": reply.splitlines()[0]}
    return reply


def actions_today(ctx: ChatContext, lang: Lang, hours: float | None = None) -> str:
    """What the steward did since midnight where its reader is (STEWARD_DISPLAY_TZ), or over the last `hours` ("what
    did you do overnight?" reaches into yesterday evening): actions carried out and exemptions granted, from the
    audit log."""
    day = ctx.now.astimezone(ctx.zone).replace(hour=0, minute=0, second=0, microsecond=0)
    since = ctx.now - timedelta(hours=hours) if hours else day
    done = [e for e in ctx.audit.entries(kind="execution", since=since.astimezone(UTC), limit=500, newest_first=False) if e.at <= ctx.now]
    kept = [e for e in ctx.audit.entries(kind="exemption", since=since.astimezone(UTC), limit=100, newest_first=False) if e.at <= ctx.now]
    # the keeps granted are listed after the actions: the count says so ("10 actions" above 11 lines read wrong)
    kept_en = f", and {plural(len(kept), 'job')} kept by a person" if kept else ""
    kept_zh = f"，另有 {len(kept)} 个作业被人工保留" if kept else ""
    if hours:
        if not done and not kept:
            return _t(lang, f"Nothing in the last {hours:g} hours: no actions were taken.",
                      f"最近 {hours:g} 小时没有执行任何操作。")
        lines = [_t(lang, f"In the last {hours:g} hours I took {plural(len(done), 'action')}{kept_en}:",
                    f"最近 {hours:g} 小时共执行了 {len(done)} 项操作{kept_zh}：")]
    elif not done and not kept:
        return _t(lang, "Nothing yet today: no actions were taken.", "今天还没有执行任何操作。")
    else:
        lines = [_t(lang, f"Today ({day:%Y-%m-%d}) I took {plural(len(done), 'action')}{kept_en}:",
                    f"今天（{day:%Y-%m-%d}）共执行了 {len(done)} 项操作{kept_zh}：")] if done else []
    for e in done[-20:]:
        who = e.data.get("approved_by")
        by = _t(lang, f", approved by {who}", f"，由 {who} 批准") if who else ""
        at = _when(e.at, ctx.now, ctx.zone, lang)
        lines.append(_t(lang, f"- {at} {_action(e.action, lang)}: **{e.target}** (level {e.level}{by}): "
                              f"{e.status}{_detail(e, lang)}",
                        f"- {at} {_action(e.action, lang)}：**{e.target}**（级别 {e.level}{by}）："
                        f"{_status(e.status, lang)}{_detail(e, lang)}"))
    for e in kept:
        until = _when(e.data.get("until") or e.at, ctx.now, ctx.zone, lang)
        at = _when(e.at, ctx.now, ctx.zone, lang)
        lines.append(_t(lang, f"- {at} **{e.target}** kept until {until} by {e.data.get('by', '?')} ({e.reason})",
                        f"- {at} **{e.target}** 由 {e.data.get('by', '?')} 保留至 {until}（{e.reason}）"))
    return "\n".join(lines)


_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{2,}")
_NOT_NAMES = {"why", "did", "you", "stop", "stopped", "job", "the", "what", "will", "happen", "when", "keep", "for",
              "idle", "zombie", "status", "task", "notebook", "gpu", "gpus", "and", "next", "flagged", "with"}


def known_jobs(ctx: ChatContext) -> list[str]:
    """The job names chat can talk about: running now, found by the latest sweep, or acted on in the last day."""
    names = {j.id for j in ctx.observation.jobs}
    names |= {f.target for f in ctx.findings if f.target_type == "job"}
    names |= {a.target for a in ctx.pending}
    since = ctx.now - timedelta(days=1)
    names |= {e.target for e in ctx.audit.entries(kind="execution", since=since, limit=2000) if e.target}
    pools = {p.name for p in ctx.observation.pools} | {n.name for n in ctx.observation.nodes}
    return sorted(names - pools)


def named_jobs(ctx: ChatContext, text: str) -> list[str]:
    """Jobs the question names: in full (`ml-team/jupyter-carol`), else by a distinctive word (`jupyter`)."""
    names = known_jobs(ctx)
    lowered = text.lower()
    full = [n for n in names if n.lower() in lowered]
    if full:
        return [n for n in full if not any(n != m and n.lower() in m.lower() for m in full)]
    hits: list[str] = []
    for word in _TOKEN.findall(text):
        if word.lower() in _NOT_NAMES:
            continue
        # A whole word of the name (`jupyter` in jupyter-carol), not a piece of one ("night" is no nightly-eval).
        matched = [n for n in names if word.lower() == (short := n.lower().split("/", 1)[-1])
                   or word.lower() in re.split(r"[-_.]", short)]
        hits += [m for m in matched if m not in hits]
    return hits


def _owners(ctx: ChatContext) -> dict[str, str]:
    """Job -> owner for every job chat knows: running now, found now, or found in the last day (a stopped notebook
    is in neither of the first two)."""
    # The newest findings (a large cluster writes thousands a sweep), the newest owner of a reused name winning.
    newest = ctx.audit.entries(kind="finding", since=(ctx.now - timedelta(days=1)).astimezone(UTC), limit=5000)
    found = {e.target: str(e.data["owner"]) for e in reversed(newest) if e.target and e.data.get("owner")}
    return found | {f.target: f.owner for f in ctx.findings if f.owner} | {j.id: j.user for j in ctx.observation.jobs}


def _pool_named(ctx: ChatContext, text: str) -> bool:
    """Whether the question names one of the cluster's pools by its name (`a100-ondemand`)."""
    lowered = text.lower()
    return any(p.name and re.search(rf"(?<![\w-]){re.escape(p.name.lower())}(?![\w-])", lowered)
               for p in ctx.observation.pools)


_MINE = re.compile(r"\bmy\b|\bmine\b|我的", re.IGNORECASE)


def _owner_named(ctx: ChatContext, text: str) -> tuple[str, list[str]] | None:
    """(the user the question names, the jobs chat knows of theirs), when it names a user rather than a job
    ("why did you stop alice's notebook?", or the asker's own: "why did you stop my notebook?"): a job of theirs
    matching another word of the question, else all."""
    owners = _owners(ctx)
    words = {w.lower() for w in _TOKEN.findall(text)}
    users = sorted({u for u in owners.values() if u and u.lower() in words})
    if not users and ctx.asker and _MINE.search(text):
        users = [ctx.asker]
    if len(users) != 1:
        return None
    theirs = sorted(j for j, u in owners.items() if u == users[0])
    matching = [j for j in theirs if any(w in j.lower().split("/", 1)[-1] for w in words - {users[0].lower()}
                                         if w not in _NOT_NAMES)]
    return users[0], matching or theirs


_STOP_ASKED = re.compile(r"\b(?:kill|stop|terminate|delete|cancel|scancel)\b.*\b(?:it|this|that|job|now|please)\b|"
                         r"^\s*(?:please\s+|pls\s+)?(?:kill|stop|terminate|delete|cancel|scancel)\b|"
                         r"杀掉|杀了|停掉|停止它|干掉|删掉|帮我停|直接停", re.IGNORECASE)
# A question about a stop ("will you kill it?", "会停掉吗？"), not a request for one: the story says what comes next.
_STOP_QUESTION = re.compile(r"\b(?:will|are|did) you\b|\bgoing to\b|\bgonna\b|会不会|会被.{0,30}吗", re.IGNORECASE)


def _job(ctx: ChatContext, text: str, lang: Lang) -> Generator[ChatEvent, None, str]:
    reply = yield from _job_story(ctx, text, lang)
    if _STOP_ASKED.search(text) and not re.search(r"\bwhy\b|为什么|为何", text, re.IGNORECASE) \
            and not _STOP_QUESTION.search(text):
        reply = _t(lang, "Chat cannot stop jobs: a stop goes through a sweep, the guardrail (a warning first) and, "
                         "where policy asks, an approver. What the steward knows about it:\n\n",
                   "聊天无法停止作业：停止要经过巡检、护栏（先警告）以及策略要求时的审批。以下是它的情况：\n\n") + reply
    return reply


def _job_story(ctx: ChatContext, text: str, lang: Lang) -> Generator[ChatEvent, None, str]:
    named = named_jobs(ctx, text)
    if not named and ctx.job:
        named = [ctx.job]
    if not named and (owner := _owner_named(ctx, text)) is not None:
        user, theirs = owner
        if 1 < len(theirs) <= 5:  # "what is grace running?": each job's first line, not "which one?"
            lines = [_t(lang, f"{user}'s jobs:", f"{user} 的作业：")]
            for job_id in theirs:
                yield {"type": "tool_call", "name": "job_status", "args": {"job": job_id}}
                head = job_status(ctx, job_id, lang).splitlines()[0]
                yield {"type": "tool_result", "name": "job_status", "status": "ok", "summary": head}
                lines.append(f"- {head}")
            lines.append(_t(lang, "Ask about one of them for its whole story.", "可就其中一个作业继续提问，查看完整经过。"))
            return "\n".join(lines)
        if len(theirs) != 1:
            listed = (", " if lang == "en" else "、").join(theirs[:8])
            return _t(lang, f"{user}'s jobs: {listed}. Which one?" if theirs else
                      f"No job of {user}'s runs now, was flagged, or was acted on in the last day.",
                      f"{user} 的作业：{listed}。请问是哪一个？" if theirs else
                      f"{user} 现在没有运行中的作业，最近一天也没有被标记或处理过的作业。")
        named = theirs
    if not named:
        return _t(lang, "Which job? Name it, e.g. \"why did you stop ml-team/jupyter-carol?\"",
                  "请指明作业，例如“为什么要停止 ml-team/jupyter-carol？”")
    if len(named) > 1:
        return _t(lang, f"Several jobs match: {', '.join(named[:8])}. Which one?",
                  f"匹配到多个作业：{'、'.join(named[:8])}。请问是哪一个？")
    job_id = named[0]
    yield {"type": "tool_call", "name": "job_status", "args": {"job": job_id}}
    reply = job_status(ctx, job_id, lang)
    yield {"type": "tool_result", "name": "job_status", "status": "ok", "summary": reply.splitlines()[0]}
    return reply


def job_status(ctx: ChatContext, job_id: str, lang: Lang) -> str:
    """Why a job was flagged or stopped (the finding, the audit of the last day), what happens next, and when."""
    now = ctx.now
    history = [e for e in ctx.audit.entries(target=job_id, since=now - timedelta(days=1), limit=500,
                                            newest_first=False) if e.at <= now]
    job = next((j for j in ctx.observation.jobs if j.id == job_id), None)
    earlier = 0
    if job is not None and job.uid:
        # A name is reused (every notebook pod, every `srun --pty bash`): a finding or an action recorded for another
        # uid is about an earlier run. A keep is the exception: the guardrail honours one by name too (the owner named
        # the job), so it is reported as holding.
        mine = [e for e in history if e.kind == "exemption" or (e.data.get("target_uid") or job.uid) == job.uid]
        earlier, history = len(history) - len(mine), mine
    if job is not None and any(e.kind == "execution" and e.action in ("terminate", "force_terminate")
                               and e.status == "executed" and str(e.data.get("detail", "")).startswith("stopped")
                               and e.at >= ctx.observation.at for e in history):
        job = None  # the sweep read it running, then a stop ended it: it is not "running now"
    finding = next((f for f in ctx.findings if f.target == job_id), None)
    found = [e for e in history if e.kind == "finding"]
    done = [e for e in history if e.kind == "execution" and e.action in ACTION_WORDS]
    kept = [e for e in history if e.kind == "exemption" and e.status == "granted"
            and datetime.fromisoformat(e.data["until"]) > now]
    waiting = [a for a in ctx.pending if a.target == job_id]
    lines: list[str] = []
    if job is not None:
        lines.append(_t(lang, f"**{job_id}** ({job.user}, {plural(job.gpus, 'GPU')}): {job.state} now.",
                        f"**{job_id}**（{job.user}，{job.gpus} 块 GPU）：当前{JOB_STATE_ZH.get(job.state, job.state)}。"))
    else:
        lines.append(_t(lang, f"**{job_id}** is no longer running.", f"**{job_id}** 已不在运行。"))
    if earlier:
        lines.append(_t(lang, f"({earlier} finding(s) or action(s) from the last day are about an earlier job under "
                              "this name, not this run, and are left out.)",
                        f"（过去一天有 {earlier} 条发现或操作记录属于此前同名的另一个作业，与本次运行无关，已略去。）"))
    if finding is not None:
        lines.append(_t(lang, f"Why: {finding.kind}. {describe(finding, lang, ctx.zone)}{_rb(finding)}",
                        f"原因：{kind_label(finding.kind, lang)}。{describe(finding, lang, ctx.zone)}{_rb(finding)}"))
    elif found:
        last = found[-1]
        lines.append(_t(lang, f"Why: {last.status} at {_when(last.at, now, ctx.zone, lang)}. "
                              f"{_audited_evidence(last, lang, ctx.zone)}",
                        f"原因：{_when(last.at, now, ctx.zone, lang)}判定为{kind_label(last.status or '', lang)}。"
                        f"{_audited_evidence(last, lang, ctx.zone)}"))
    elif not done:
        lines.append(_t(lang, "It is not flagged: no detector found waste on it, and nothing was done to it in "
                              "the last 24 h.", "它没有被标记：检测器未发现浪费，过去 24 小时内也未对它执行任何操作。"))
    for e in done:
        deadline = e.data.get("deadline")
        due = _t(lang, f"; earliest stop {_when(deadline, now, ctx.zone, lang)}", f"；最早停止时间 {_when(deadline, now, ctx.zone, lang)}") if deadline else ""
        if e.action != "notify" and e.status == "executed":  # "who approved it?": a person, or none was asked
            who = e.data.get("approved_by")
            due += (_t(lang, f"; approved by {who}", f"；由 {who} 批准") if who else
                    _t(lang, f"; automatic (level {e.level}: the policy asks no approval for it)",
                       f"；自动执行（级别 {e.level}：策略不要求审批）"))
        lines.append(_t(lang, f"- {_when(e.at, now, ctx.zone, lang)} {_action(e.action, lang)}: {e.status}{_detail(e, lang)}{due}",
                        f"- {_when(e.at, now, ctx.zone, lang)}{_action(e.action, lang)}：{_status(e.status, lang)}{_detail(e, lang)}"
                        f"{due}"))
    why = None
    if job is not None and ctx.policy is not None:
        from agent.guardrail.protection import protection_reason
        from core.actions import History

        why = protection_reason(job, ctx.policy, History(), now)
        if why:
            lines.append(_t(lang, f"It is protected ({why}): the steward never stops it.",
                            f"它受保护（{protection_reason_zh(why)}）：巡检服务不会停止它。"))
    if why and not kept and not waiting and job is not None and job.state not in _GONE:
        # What comes next for a protected job is what the guardrail allows it: no warning of a stop, no stop. A
        # protection that runs out (a keep-until annotation) says what follows it.
        if (boxed := re.search(r" until (.+?)(?: \(|$)", why)) is not None:
            lines.append(_t(lang, f"Next: nothing while it is protected (until {boxed.group(1)}); after that, a stop "
                                  "could come only after a new warning and its full notice.",
                            f"接下来：受保护期间（至 {boxed.group(1)}）不做任何操作；此后若要停止，也须先重新警告并给足通知期。"))
        else:
            lines.append(_t(lang, "Next: nothing; being protected, it is neither warned of a stop nor stopped.",
                            "接下来：不做任何操作；它受保护，不会收到停止警告，也不会被停止。"))
    else:
        lines.append(_next_step(ctx, job, finding, done, kept, waiting, lang))
    return "\n".join(lines)


def _next_step(ctx: ChatContext, job: Any, finding: Finding | None, done: list[AuditEntry], kept: list[AuditEntry],
               waiting: list[Approval], lang: Lang) -> str:
    now = ctx.now
    notice = ctx.policy.warning.min_notice if ctx.policy else 1800.0
    grace = ctx.policy.stop.grace_period if ctx.policy else 300.0
    keep_hint = _t(lang, " The owner can reply `keep 4h <reason>` to keep it.", "所有者可回复 `保留 4h 原因` 暂缓。")
    if kept:
        last = max(kept, key=lambda e: e.data["until"])
        until = _when(last.data["until"], now, ctx.zone, lang)
        return _t(lang, f"Next: nothing. It is kept until {until} by {last.data.get('by', '?')} ({last.reason}); "
                        "no stop before then.",
                  f"接下来：不做任何操作。它由 {last.data.get('by', '?')} 保留至 {until}（{last.reason}），在此之前不会被停止。")
    if job is None or job.state in _GONE:
        stopped = [e for e in done if e.action in ("terminate", "force_terminate") and e.status == "executed"]
        if stopped:
            return _t(lang, f"Next: nothing; it was stopped at {_when(stopped[-1].at, now, ctx.zone, lang)}.",
                      f"接下来：不再操作；它已于 {_when(stopped[-1].at, now, ctx.zone, lang)}被停止。")
        return _t(lang, "Next: nothing; it has ended.", "接下来：不再操作；该作业已结束。")
    if waiting:
        a = waiting[-1]
        from agent.graph.report import action_label

        noun = {"terminate": "a graceful stop", "force_terminate": "a forced stop", "resize_pool": "the pool resize",
                "drain_node": "the node drain"}.get(a.action, a.action)
        return _t(lang, f"Next: {noun} waits for an approver (`{a.id}`, expires {_when(a.expires_at, now, ctx.zone, lang)}); "
                        "nothing is done without that answer.",
                  f"接下来：{action_label(a.action, 'zh')}正在等待审批（`{a.id}`，{_when(a.expires_at, now, ctx.zone, lang)}过期）；"
                  "未获批准不会执行。")
    terms = [e for e in done if e.action == "terminate" and e.status == "executed"]
    if job.state == "stopping" or terms:
        at = terms[-1].at if terms else now
        return _t(lang, f"Next: it was asked to stop; if it has not exited by {_when(at + timedelta(seconds=grace), now, ctx.zone, lang)}"
                        " (the grace period), a forced stop may be proposed, which needs its own decision.",
                  f"接下来：已请求其停止；若到 {_when(at + timedelta(seconds=grace), now, ctx.zone, lang)}（宽限期结束）仍未退出，"
                  "可能会提议强制停止，这需要单独决策。")
    warned = [e for e in done if e.action == "notify" and e.status == "executed"]
    if warned and warned[-1].data.get("deadline"):
        deadline = datetime.fromisoformat(warned[-1].data["deadline"])
        if deadline > now:
            return _t(lang, f"Next: the owner was warned at {_when(warned[-1].at, now, ctx.zone, lang)}; if it is still wasting at "
                            f"{_when(deadline, now, ctx.zone, lang)}, a sweep after that asks it to stop (SIGTERM).{keep_hint}",
                      f"接下来：已于 {_when(warned[-1].at, now, ctx.zone, lang)}警告所有者；若到 {_when(deadline, now, ctx.zone, lang)}仍在浪费，"
                      f"之后的巡检会请求其停止（SIGTERM）。{keep_hint}")
        return _t(lang, f"Next: the notice period ended at {_when(deadline, now, ctx.zone, lang)}; the next sweep asks it to stop "
                        f"(SIGTERM) if it is still wasting and the policy allows.{keep_hint}",
                  f"接下来：通知期已于 {_when(deadline, now, ctx.zone, lang)}结束；若仍在浪费且策略允许，下一次巡检会请求其停止"
                  f"（SIGTERM）。{keep_hint}")
    if finding is None:
        return _t(lang, "Next: nothing is planned for it.", "接下来：没有针对它的计划。")
    if warned:
        return _t(lang, f"Next: the owner was advised at {_when(warned[-1].at, now, ctx.zone, lang)}; that is advice only, nothing "
                        "is stopped for it.",
                  f"接下来：已于 {_when(warned[-1].at, now, ctx.zone, lang)}向所有者提出建议；仅为建议，不会因此停止作业。")
    return _t(lang, f"Next: the next sweep warns the owner; a stop can come no sooner than "
                    f"{format_duration(notice)} after a delivered warning.{keep_hint}",
              f"接下来：下一次巡检会警告所有者；警告送达至少 {format_duration(notice)} 后才可能停止。{keep_hint}")


def chat_tools(ctx: ChatContext, lang: Lang) -> list[StructuredTool]:
    """Read-only tools only chat has: a job's story and today's actions, in the reply's language."""

    def job_status_tool(job: str) -> dict[str, Any]:
        """Why a job was flagged or stopped (finding and audit of the last day) and what happens to it next, when."""
        named = named_jobs(ctx, job)
        if len(named) != 1:
            return {"status": "no_data", "message": f"{job!r} matches {len(named)} jobs: {', '.join(named[:8])}"}
        return {"status": "ok", "message": job_status(ctx, named[0], lang)}

    def actions_today_tool() -> dict[str, Any]:
        """What the steward did today (UTC): warnings, stops, resizes and exemptions, from the audit log."""
        return {"status": "ok", "message": actions_today(ctx, lang)}

    return [StructuredTool.from_function(job_status_tool, name="job_status"),
            StructuredTool.from_function(actions_today_tool, name="actions_today")]


def _keep(ctx: ChatContext, text: str, lang: Lang) -> Generator[ChatEvent, None, str]:
    request = parse_keep(text)
    assert request is not None
    if ctx.keep is None:
        return _t(lang, "Keeping a job is not available in this chat.", "此聊天无法保留作业。")
    if isinstance(request, KeepRequest) and request.job and "/" not in request.job:
        named = named_jobs(ctx, request.job)  # `keep jupyter 4h`: a word of the job's name, when it names one job
        if len(named) == 1:
            request = replace(request, job=named[0])
    yield {"type": "tool_call", "name": "keep_job", "args": {"job": getattr(request, "job", None) or ctx.job,
                                                             "duration": getattr(request, "duration", None)}}
    reply = ctx.keep(request, ctx.job, lang)
    yield {"type": "tool_result", "name": "keep_job", "status": "ok" if reply.startswith(("OK", "好的")) else "refused",
           "summary": reply}
    return reply


def _savings(ctx: ChatContext, lang: Lang) -> Generator[ChatEvent, None, str]:
    yield {"type": "tool_call", "name": "compute_savings", "args": {}}
    s = compute_savings(ctx.audit, ctx.findings, ctx.now, ctx.currency, points=2)
    yield {"type": "tool_result", "name": "compute_savings", "status": "ok",
           "summary": f"{s.reclaimed_gpu_hours} GPU-h"}
    head = _t(lang, f"Reclaimed so far: {s.reclaimed_gpu_hours:.1f} GPU-hours, {money(s.reclaimed_money, s.currency)} "
                    f"from {plural(s.actions, 'action')}.",
              f"累计回收 {s.reclaimed_gpu_hours:.1f} GPU 小时，节省 {money(s.reclaimed_money, s.currency)}"
              f"（{s.actions} 项操作）。")
    if s.waste_by_team:
        top = ("、" if lang == "zh" else ", ").join(f"{t.team} {money(t.money, s.currency)}" for t in s.waste_by_team[:4])
        head += _t(lang, f"\nStill wasting, by team: {top}.", f"\n仍在浪费（按团队）：{top}。")
    return head


def _cost(ctx: ChatContext, text: str, lang: Lang) -> Generator[ChatEvent, None, str]:
    """GPU cost per team over the last 7 days, from the usage every sweep records (what `steward report` shows); one
    team's only when the question names it, and "no such team" when it names one chat does not know."""
    from agent.records.usage import build_report

    yield {"type": "tool_call", "name": "cost_report", "args": {"days": 7}}
    r = build_report(ctx.audit, ctx.now - timedelta(days=7), ctx.now)
    yield {"type": "tool_result", "name": "cost_report", "status": "ok" if r.sweeps else "no_data",
           "summary": f"{r.cost:.2f} {r.currency}"}
    if not r.sweeps:
        return _t(lang, "No usage recorded in the last 7 days yet: every sweep records it.",
                  "最近 7 天还没有用量记录：每次巡检都会记录。")
    span = f"{_when(r.since, ctx.now, ctx.zone, lang)} - {_when(r.until, ctx.now, ctx.zone, lang)}"
    team, unknown = _team_named(ctx, text)
    billed = {t.name.lower(): t for t in r.by_team}
    if team is None and unknown is not None and unknown.lower() not in billed:
        listed = ("、" if lang == "zh" else ", ").join(t.name for t in r.by_team[:12])
        return _t(lang, f"No team **{unknown}** in the usage of {span}. Teams billed: {listed or 'none'}.",
                  f"{span} 的用量中没有团队 **{unknown}**。有费用的团队：{listed or '无'}。")
    name = team or unknown
    if name is not None:
        t = billed.get(name.lower())
        if t is None:
            return _t(lang, f"**{name}** used no GPUs {span}.", f"**{name}** 在 {span} 没有使用 GPU。")
        return _t(lang, f"**{t.name}**'s GPU cost {span}: {money(t.cost, r.currency)} for {t.gpu_hours:,.1f} GPU-hours "
                        f"(of {money(r.cost, r.currency)} in all). The full report: `steward report`.",
                  f"**{t.name}** 在 {span} 的 GPU 成本：{money(t.cost, r.currency)}，共 {t.gpu_hours:,.1f} GPU 小时"
                  f"（全部为 {money(r.cost, r.currency)}）。完整报告：`steward report`。")
    # The cost is what jobs held; a pool's empty nodes are paid for beside it, so their waste is not "of it".
    held = sum(w.cost for w in r.waste if w.kind not in POOL_KINDS)
    empty = sum(w.cost for w in r.waste if w.kind in POOL_KINDS)
    beside = _t(lang, f"; empty pool nodes found on top: {money(empty, r.currency)}",
                f"；另有节点池空闲节点的浪费 {money(empty, r.currency)}，不在上述成本内") if empty else ""
    lines = [_t(lang, f"GPU cost {span}: {money(r.cost, r.currency)} for {r.gpu_hours:,.1f} GPU-hours "
                      f"({money(held, r.currency)} of it on waste found in jobs{beside}). By team:",
                f"{span} 的 GPU 成本：{money(r.cost, r.currency)}，共 {r.gpu_hours:,.1f} GPU 小时"
                f"（其中作业中发现的浪费 {money(held, r.currency)}{beside}）。各团队：")]
    lines += [_t(lang, f"- **{t.name}**: {money(t.cost, r.currency)} ({t.gpu_hours:,.1f} GPU-hours)",
                 f"- **{t.name}**：{money(t.cost, r.currency)}（{t.gpu_hours:,.1f} GPU 小时）") for t in r.by_team[:8]]
    lines.append(_t(lang, "The full report (users, jobs, pools, suggestions): `steward report`.",
                    "完整报告（用户、作业、节点池、建议）：`steward report`。"))
    return "\n".join(lines)


POOL_KINDS = ("oversized", "pool_scale_up", "quiet_fill")


def _span(start: float, end: float, ctx: ChatContext, lang: Lang) -> str:
    """A window as people read it: 17:00-22:00 UTC, dates only where a day is crossed."""
    from core.zones import zone_suffix

    a, b = (datetime.fromtimestamp(t, UTC).astimezone(ctx.zone) for t in (start, end))
    today = ctx.now.astimezone(ctx.zone).date()
    first = f"{a:%H:%M}" if a.date() == today else f"{a:%m-%d %H:%M}"
    if a <= ctx.now:  # under way: "17:00-22:00" read as tonight's, still to come
        first = _t(lang, f"now (since {first})", f"现在（自 {first} 起）")
    return f"{first}-{b:%H:%M}{zone_suffix(ctx.zone, lang)}" if b.date() == a.date() else \
        f"{first}-{b:%m-%d %H:%M}{zone_suffix(ctx.zone, lang)}"


def _forecast(ctx: ChatContext, lang: Lang) -> Generator[ChatEvent, None, str]:
    """Each pool's predicted low-load windows in the next 24 h (the forecast a scale-down waits for), and what the
    latest sweep plans for the pools now."""
    from agent.detectors.pools import pool_forecast
    from agent.history.forecast import ForecastError

    yield {"type": "tool_call", "name": "pool_forecast", "args": {}}
    lines = [_t(lang, "Predicted low-load windows (next 24 h):", "预测的低负载窗口（未来 24 小时）：")]
    now = ctx.now.timestamp()
    for pool in ctx.observation.pools:
        try:
            plan = pool_forecast(pool)
        except ForecastError as exc:
            lines.append(_t(lang, f"- **{pool.name}**: no forecast ({exc})",
                            f"- **{pool.name}**：暂无预测（负载历史不足，或后端不保存负载历史）"))
            continue
        spans = [_span(a, b, ctx, lang) for a, b in plan.windows if b > now]
        joined = ("; " if lang == "en" else "；").join(spans)
        lines.append(_t(lang, f"- **{pool.name}** ({plan.model}): {joined or 'none'}",
                        f"- **{pool.name}**（{plan.model}）：{joined or '无'}"))
    yield {"type": "tool_result", "name": "pool_forecast", "status": "ok", "summary": f"{len(lines) - 1} pools"}
    plans = [f for f in ctx.findings if f.kind in POOL_KINDS]
    if plans:
        lines.append(_t(lang, "Planned now:", "当前计划："))
        lines += [_t(lang, f"- **{f.target}** ({f.kind}): {describe(f, lang, ctx.zone)}",
                     f"- **{f.target}**（{kind_label(f.kind, lang)}）：{describe(f, lang, ctx.zone)}") for f in plans]
    else:
        lines.append(_t(lang, "No pool change is planned now: a scale-down waits for a pool to be inside a window "
                              "with empty nodes to spare. `steward forecast` prints each pool's hours.",
                        "当前没有节点池调整计划：缩容要等节点池进入低负载窗口且有空余节点。"
                        "`steward forecast` 可查看各节点池逐小时的预测。"))
    return "\n".join(lines)


def _cluster(ctx: ChatContext, lang: Lang) -> str:
    """The cluster now, as the latest sweep read it: GPUs held and free per node model, jobs, findings, requests."""
    obs = ctx.observation
    held: dict[str, list[int]] = {}  # model -> [total, held]
    by_id = obs.jobs_by_id()
    for n in obs.nodes:
        used = sum(by_id[j].gpus for j in n.jobs if j in by_id and by_id[j].state in ("running", "stopping"))
        row = held.setdefault(n.gpu_model or "?", [0, 0])
        row[0] += n.gpus
        row[1] += min(used, n.gpus)
    running = sum(1 for j in obs.jobs if j.state == "running")
    waiting = sum(1 for j in obs.jobs if j.state == "pending")
    sep = "、" if lang == "zh" else ", "
    gpus = sep.join(_t(lang, f"{m}: {t - h} of {t} free", f"{m}：{t} 块中空闲 {t - h} 块") for m, (t, h) in held.items())
    kinds: dict[str, int] = {}
    for f in ctx.findings:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    found = sep.join(f"{kind_label(k, lang) if lang == 'zh' else k} {n}" for k, n in sorted(kinds.items()))
    at = _when(obs.at, ctx.now, ctx.zone, lang)
    return _t(lang, f"The cluster as read at {at}: {running} jobs running, {waiting} waiting; GPUs {gpus or 'none'}; "
                    f"findings: {found or 'none'}; {plural(len(ctx.pending), 'request')} waiting for a human.",
              f"{at}读取的集群：{running} 个作业运行中，{waiting} 个排队；GPU {gpus or '无'}；发现：{found or '无'}；"
              f"{len(ctx.pending)} 项操作等待人工审批。")


def _team_totals(ctx: ChatContext, lang: Lang) -> str:
    """Waste found now, summed by team (a job's project or namespace), largest first."""
    from agent.records.savings import team_of

    totals: dict[str, list[float]] = {}
    for f in ctx.findings:
        team = team_of(f)
        if team is not None:
            row = totals.setdefault(team, [0.0, 0.0])
            row[0] += f.waste_cost
            row[1] += f.waste_gpu_hours
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    sep = "、" if lang == "zh" else ", "
    listed = sep.join(_t(lang, f"{t} {money(c, ctx.currency)} ({h:.1f} GPU-h)", f"{t} {money(c, ctx.currency)}"
                                                                                f"（{h:.1f} GPU 小时）")
                      for t, (c, h) in ranked)
    return _t(lang, f"By team: {listed}.", f"按团队：{listed}。") if ranked else ""


def _approvals(ctx: ChatContext, lang: Lang) -> str:
    if not ctx.pending:
        return _t(lang, "No approvals are waiting.", "目前没有待审批的操作。")
    lines = [_t(lang, f"{len(ctx.pending)} actions wait for a human:", f"有 {len(ctx.pending)} 项操作等待人工审批：")]
    from agent.graph.report import action_label

    for a in ctx.pending:
        when = _when(a.expires_at, ctx.now, ctx.zone, lang)
        lines.append(_t(lang, f"- `{a.id}` {a.action} **{a.target}** (level {a.level}), expires {when}",
                        f"- `{a.id}` {action_label(a.action, 'zh')} **{a.target}**（级别 {a.level}），{when}过期"))
    return "\n".join(lines)


# "keep" said another way than the command ("把 nb-alice 保留到明天", "please keep my notebook"): the syntax, not a guess.
_OVERNIGHT = re.compile(r"overnight|last night|yesterday|while i was|昨晚|昨天|夜里|晚上", re.IGNORECASE)
_KEEP_ASKED = re.compile(r"^\s*(?:please\s+|pls\s+)?keep\b|(?:把|将|请|帮我).{0,60}保留|^\s*保留", re.IGNORECASE)


def _keep_syntax(lang: Lang) -> str:
    return _t(lang, "To keep a job, send `keep <duration> <job> <reason>`, e.g. `keep 4h ml-team/jupyter-carol demo "
                    "tonight` (an owner up to 24 h, an approver up to 30 days).",
              "保留作业请发送 `保留 <时长> <作业> <原因>`，例如 `保留 4h ml-team/jupyter-carol 今晚演示`"
              "（所有者最长 24 小时，审批人最长 30 天）。")


def _queue(ctx: ChatContext, lang: Lang) -> str:
    """Jobs waiting to be scheduled, longest-waiting first, with why the scheduler says they wait; and what the queue
    detector found about them (stuck Pending)."""
    obs = ctx.observation
    waiting = sorted((j for j in obs.jobs if j.state == "pending"),
                     key=lambda j: j.submitted_at or obs.at)
    stuck = {f.target: f for f in ctx.findings if f.kind == "stuck_pending"}
    if not waiting:
        return _t(lang, f"No job is waiting to be scheduled (as read at {_when(obs.at, ctx.now, ctx.zone, lang)}).",
                  f"没有排队等待调度的作业（{_when(obs.at, ctx.now, ctx.zone, lang)}读取）。")
    lines = [_t(lang, f"{plural(len(waiting), 'job')} waiting to be scheduled:", f"有 {len(waiting)} 个作业排队等待调度：")]
    for j in waiting[:15]:
        since = format_duration((obs.at - j.submitted_at).total_seconds()) if j.submitted_at else "?"
        why = j.pending_reason or _t(lang, "no reason reported", "未报告原因")
        if j.pending_message:
            why += f" ({j.pending_message[:120]})" if lang == "en" else f"（{j.pending_message[:120]}）"
        lines.append(_t(lang, f"- **{j.id}** ({j.user}, {plural(j.gpus, 'GPU')}): waiting {since}; {why}",
                        f"- **{j.id}**（{j.user}，{j.gpus} 块 GPU）：已等待 {since}；{why}"))
        if (f := stuck.get(j.id)) is not None:
            lines.append(f"  {describe(f, lang, ctx.zone)}{_rb(f)}")
    if len(waiting) > 15:
        lines.append(_t(lang, f"... and {len(waiting) - 15} more.", f"……另有 {len(waiting) - 15} 个。"))
    return "\n".join(lines)


def _by_runbook(hits: list[dict], lang: Lang) -> list[dict]:
    """One hit per runbook, in the order the search ranked the runbooks, each in the question's language where the
    search found that version too. Keeping only the question's language dropped the best runbook whenever its
    other-language version ranked first ("NCCL hang 怎么排查" lost zombie-hung-collective)."""
    best: dict[str, dict] = {}
    for h in hits:
        key = str(h.get("id"))
        if key not in best or ((best[key].get("language") or lang) != lang and (h.get("language") or lang) == lang):
            best[key] = h
    return list(best.values())


def _clipped(text: str, limit: int) -> str:
    """`text` cut to `limit` characters at a word's end (Chinese has none to wait for), an ellipsis marking the cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:，；：") + "…"


_SECTION_ZH = {"symptoms": "症状", "confirm": "如何确认", "remedies": "处置", "automatic": "可自动执行的操作"}


def _runbook(ctx: ChatContext, text: str, lang: Lang) -> Generator[ChatEvent, None, str]:
    """The runbooks that answer a "how do I handle ..." question, best first, by meaning (Chinese or English)."""
    if "retrieve_runbook" not in ctx.tools:
        return HELP[lang]
    found = yield from _call(ctx, "retrieve_runbook", {"query": text[:500]})
    if found.get("status") == "no_data" and not found.get("data") and "index" in str(found.get("message")):
        return _t(lang, "The runbook index is not enabled on this server (STEWARD_RUNBOOKS_ENABLED), so I cannot "
                        "search the runbooks; they are the Markdown files under `runbooks/`.",
                  "此服务未启用运行手册索引（STEWARD_RUNBOOKS_ENABLED），无法检索运行手册；"
                  "运行手册为 `runbooks/` 目录下的 Markdown 文件。")
    hits = _by_runbook(found.get("data") or [], lang)
    if not hits:
        return _t(lang, "No runbook matches that. The runbooks cover idle GPUs, hung jobs, NCCL timeouts, GPU XID "
                        "errors, stuck Pending jobs, pool sizing and more: ask about one of them.",
                  "没有匹配的运行手册。运行手册涵盖空闲 GPU、卡死作业、NCCL 超时、GPU XID 错误、长时间排队、节点池规模等，"
                  "可以就其中之一提问。")
    lines = [_t(lang, "The runbooks for that:", "相关运行手册：")]
    for h in hits[:3]:
        excerpt = _clipped(" ".join(str(h.get("excerpt") or "").split()), 280)
        name = str(h.get("section") or "")
        name = (_SECTION_ZH.get(name) if lang == "zh" else None) or name.removeprefix("other:")
        section = f" — {name}" if name else ""
        lines.append(f"- **{h.get('title') or h.get('id')}**{section} [rb:{h.get('id')}]: {excerpt}")
    return "\n".join(lines)


def _kept(ctx: ChatContext, lang: Lang) -> str:
    """Keeps in force (who kept what, until when, why) and the running jobs the policy protects (which rule)."""
    from agent.guardrail.protection import protection_reason
    from core.actions import History

    keeps = ctx.audit.exemptions_in_force(ctx.now)
    lines: list[str] = []
    if keeps:
        lines.append(_t(lang, f"{plural(len(keeps), 'keep')} in force:", f"生效中的保留（豁免）共 {len(keeps)} 项："))
        for k in sorted(keeps, key=lambda k: k.until):
            until = _when(k.until, ctx.now, ctx.zone, lang)
            why = f" ({k.reason})" if k.reason and lang == "en" else (f"（{k.reason}）" if k.reason else "")
            lines.append(_t(lang, f"- **{k.target}** kept until {until} by {k.by}{why}",
                            f"- **{k.target}** 由 {k.by} 保留至 {until}{why}"))
    protected = []
    if ctx.policy is not None:
        for j in ctx.observation.jobs:
            rule = protection_reason(j, ctx.policy, History(), ctx.now) if j.state in ("running", "pending") else None
            if rule:
                protected.append((j.id, rule))
    if protected:
        lines.append(_t(lang, f"{plural(len(protected), 'job')} protected by policy (never stopped):",
                        f"受策略保护的作业 {len(protected)} 个（不会被停止）："))
        lines += [f"- **{job}**: {rule}" if lang == "en" else f"- **{job}**：{protection_reason_zh(rule)}"
                  for job, rule in protected[:20]]
    if not lines:
        return _t(lang, "No job is kept or protected right now.", "目前没有被保留或受保护的作业。")
    return "\n".join(lines)


_RULE_ZH = {"job": "作业", "namespace": "命名空间", "partition": "分区", "user": "用户", "project": "项目", "account": "账户",
            "QOS": "QOS", "priority": "优先级", "label": "标签", "annotation": "注解"}


def protection_reason_zh(reason: str) -> str:
    """A protection rule's reason (agent/guardrail/protection.py, English) in Chinese; a keep's own words stay."""
    m = re.fullmatch(r"job (\S+) is listed in (protection\.\w+)", reason)
    if m:
        return f"作业 {m.group(1)} 在保护列表 {m.group(2)} 中"
    m = re.fullmatch(r"(\w+) (.+) is in (protection\.\w+)", reason)
    if m and m.group(1) in _RULE_ZH:
        return f"{_RULE_ZH[m.group(1)]} {m.group(2)} 在保护列表 {m.group(3)} 中"
    m = re.fullmatch(r"exempted by (.+?) until (.+?)(?: \((.*)\))?", reason)
    if m:
        return f"由 {m.group(1)} 保留至 {m.group(2)}" + (f"（{m.group(3)}）" if m.group(3) else "")
    if reason.startswith("suspended by Slurm (SUSPENDED)"):
        return "已被 Slurm 挂起（SUSPENDED）：恢复后从暂停处继续运行"
    m = re.fullmatch(r"annotation (\S+) keeps it until (.+)", reason)
    if m:
        return f"注解 {m.group(1)} 保留至 {m.group(2)}"
    return reason


# A job named the way chat's own answers name one (`ml-team/jupyter-carol`), or right after the word job.
_JOB_WRITTEN = re.compile(r"(?<![\w./-])([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)"
                          r"|\b(?:job|pod|notebook|task)\s+([A-Za-z0-9][\w.-]*-[\w.-]+)"
                          r"|(?:作业|任务|笔记本)\s*([A-Za-z0-9][\w.-]*-[\w.-]+)"
                          # named before the word: "llama-finetune-7b 这个 job 现在什么状态？"
                          r"|(?<![\w./-])([A-Za-z0-9][\w.-]*-[\w.-]+)\s*(?:这个|那个|的)?\s*(?:job\b|pod\b|作业|任务)",
                          re.ASCII | re.IGNORECASE)


def _unknown_job(ctx: ChatContext, text: str) -> str | None:
    """A job the question names as one (`ml-team/x`, "job eval-harness") that no job chat knows matches: the answer
    is "I don't know it", never another job's story or a list of others."""
    known = [n.lower() for n in known_jobs(ctx)]
    for found in _JOB_WRITTEN.finditer(text):
        name = next(g for g in found.groups() if g).strip(".-")
        w = name.lower()
        if not any(w in n or n.endswith("/" + w.split("/")[-1]) for n in known):
            return name
    return None


def _no_such_job(ctx: ChatContext, name: str, lang: Lang) -> str:
    some = ("、" if lang == "zh" else ", ").join(known_jobs(ctx)[:8])
    return _t(lang, f"I know no job **{name}**: none by that name runs now, was flagged, or was acted on in the last "
                    f"day. Jobs I know: {some or 'none'}.",
              f"我不知道作业 **{name}**：没有这个名字的作业正在运行、被标记，或在最近一天被处理过。"
              f"我知道的作业：{some or '无'}。")


# Words around "team" that name none ("each team spend", "a per-team breakdown").
_NOT_TEAMS = {"", "per", "each", "every", "by", "all", "other", "cross", "multi", "my", "our", "your", "the", "which",
              "what", "spend", "spent", "cost", "costs", "is", "are", "was", "wasting", "waste", "has", "have", "did",
              "do", "does", "use", "uses", "using", "total", "totals", "breakdown", "and", "or", "in", "on", "of"}


# Words a question about GPUs uses for what it asks about (a GPU, a GPU model, a job, a node) that clusters also name
# partitions and namespaces after (Slurm's `gpu`, `a100`): such a name is a team only where the question says so.
_QUESTION_WORD = re.compile(r"(?i)gpus?|cpus?|jobs?|nodes?|pools?|queues?|idle|default|[abhlvtkp]\d{2,3}[a-z]?"
                            r"|gb\d{3}|mi\d{2,3}x?|rtx\w*")


def _says_team(text: str, team: str) -> bool:
    """Whether `text` names `team` as a team: "team gpu", "gpu team", "the gpu partition", "in gpu", "gpu 团队"."""
    name = re.escape(team)
    return bool(re.search(
        rf"(?i)(?:\b(?:team|namespace|partition|project|account|in|for)|团队|命名空间|分区|项目)\s*[:：]?\s*{name}"
        rf"(?![\w-])|(?<![\w-]){name}(?:\s*(?:team|namespace|partition|project|account)\b|\s*(?:团队|命名空间|分区|项目))",
        text))


def _team_named(ctx: ChatContext, text: str) -> tuple[str | None, str | None]:
    """(a team the question names, a team-like word that names none) from the teams chat knows: jobs' projects and
    namespaces, findings' teams. A team named like a word of the question itself ("谁在浪费 GPU？" on a cluster with
    a Slurm partition `gpu`) counts only where the question says it is a team (`_says_team`)."""
    teams = {t for j in ctx.observation.jobs for t in (j.project, j.namespace) if t}
    teams |= {f.team for f in ctx.findings if f.team}
    words = {w.lower() for w in _TOKEN.findall(text)}
    hits = sorted(t for t in teams if t.lower() in words
                  and (not _QUESTION_WORD.fullmatch(t) or _says_team(text, t)))
    if hits:
        return hits[0], None
    if re.search(r"(?i)\b(?:which|each|every|per|by|all|across|between)\s+teams?\b|各团队|哪个团队|哪些团队|各个团队|所有团队",
                 text):
        return None, None  # about every team
    for pattern in (r"(?ai)(?<![\w-])(team[-_][\w-]+|[\w-]+[-_]team)(?![\w-])",
                    r"(?ai)\bteam\s+([a-z0-9]+[-_][\w-]+)", r"(?a)([A-Za-z0-9][\w-]*)\s*团队"):
        for asked in re.finditer(pattern, text):
            word = asked.group(1)
            if re.sub(r"[-_]?team$|^team[-_]?", "", word.lower()) not in _NOT_TEAMS:
                return None, word
    return None, None


def _teams_known(ctx: ChatContext, lang: Lang) -> str:
    teams = sorted({t for j in ctx.observation.jobs for t in (j.project or j.namespace,) if t}
                   | {f.team for f in ctx.findings if f.team})
    return ("、" if lang == "zh" else ", ").join(teams[:12]) or _t(lang, "none", "无")



HELP = {
    "en": "I can answer: who is wasting GPUs (e.g. \"who is wasting A100s right now?\"), why a job was flagged or "
          "stopped and what happens to it next (\"why did you stop ml-team/jupyter-carol?\"), what I did today, "
          "how much was saved, what each team's GPUs cost this week, the pools' scale-down plans, and which "
          "approvals are pending. Owners can say `keep 4h <job> <reason>`.",
    "zh": "我可以回答：谁在浪费 GPU（例如“谁在浪费 A100？”）、某个作业为什么被标记或停止以及接下来会怎样"
          "（例如“为什么要停止 ml-team/jupyter-carol？”）、今天做了什么、节省了多少、本周各团队的 GPU 成本、"
          "节点池的缩容计划、有哪些待审批操作。"
          "作业所有者可以发送 `保留 4h <作业> <原因>`。",
}


def answer(ctx: ChatContext, text: str, lang: Lang | None = None) -> Iterator[ChatEvent]:
    """Tool calls as they happen, then the answer in small chunks (the same events the model path streams)."""
    lang = lang or detect_language(text)
    intent = classify(text)
    named = named_jobs(ctx, text)
    in_full = any(n.lower() in text.lower() for n in named)  # named by its whole id, not a word of it
    if intent in ("help", "waste", "today", "approvals", "savings", "runbook", "queue", "kept") and named \
            and "who" not in text.lower() and "谁" not in text and not _ANSWER_TYPED.search(text) \
            and not _ANSWER_ASKED.search(text):
        intent = "job"  # "is ml-team/x idle?", "what happened to x?": the job's own story answers it
    elif intent in ("forecast", "status") and in_full and not _POOL.search(text):
        intent = "job"  # "will ml-team/x be stopped tomorrow?", "summary of ml-team/x"
    elif intent in ("help", "today") and _owner_named(ctx, text) is not None:
        intent = "job"  # "what is frank running?", "what happened to frank's job?": frank's jobs
    elif intent in ("help", "savings", "waste", "job") and not named and _pool_named(ctx, text) \
            and not re.search(r"cost|spen[dt]|bill|花|费用|成本", text, re.IGNORECASE):
        intent = "forecast"  # "why does a100-ondemand need a resize?", "how much would shrinking it save?": its plan
    elif intent in ("help", "forecast") and _KEEP_ASKED.search(text):
        intent = "keep"  # "把 nb-alice 保留到明天": how to keep, not tomorrow's forecast
    elif intent == "help" and re.search(r"\bstatus\b|\bcluster\b|集群|概况|总览", text, re.IGNORECASE):
        intent = "status"
    unknown = None if named or intent in ("keep", "approvals", "runbook", "cost", "savings", "forecast", "queue") \
        else _unknown_job(ctx, text)
    if unknown is not None and (team_word := _team_named(ctx, text)[1]) is not None \
            and team_word.lower() == unknown.lower():
        unknown = None  # "how much is team vision-lab wasting?": a team, not a job
    if unknown is not None:
        intent = "job"
    yield {"type": "start", "intent": intent, "lang": lang, "answerer": "offline"}
    if unknown is not None:
        reply = _no_such_job(ctx, unknown, lang)
    elif intent == "keep":
        reply = (yield from _keep(ctx, text, lang)) if parse_keep(text) is not None else _keep_syntax(lang)
    elif intent == "job":
        reply = yield from _job(ctx, text, lang)
    elif intent == "waste":
        reply = yield from _waste(ctx, text, lang)
    elif intent == "today":
        reply = yield from _today(ctx, lang, overnight=bool(_OVERNIGHT.search(text)))
    elif intent == "savings":
        reply = yield from _savings(ctx, lang)
    elif intent == "approvals":
        reply = _approvals(ctx, lang)
        if _ANSWER_TYPED.search(text) or _ANSWER_ASKED.search(text):
            reply = _t(lang, "Chat does not take approval answers: answer on the Approvals page, the DingTalk/WeCom "
                             "card, or `POST /api/approvals/{id}` as an approver.\n\n",
                       "聊天不接受审批答复：请审批人在“审批”页面、钉钉/企业微信卡片上作答，或调用 "
                       "`POST /api/approvals/{id}`。\n\n") + reply
    elif intent == "queue":
        reply = _queue(ctx, lang)
    elif intent == "runbook":
        reply = yield from _runbook(ctx, text, lang)
    elif intent == "kept":
        reply = _kept(ctx, lang)
    elif intent == "status":
        reply = _cluster(ctx, lang)
    elif intent == "cost":
        reply = yield from _cost(ctx, text, lang)
    elif intent == "forecast":
        reply = yield from _forecast(ctx, lang)
    else:
        reply = HELP[lang]
    for chunk in re.findall(r"\S+\s*|\s+", reply):
        yield {"type": "token", "text": chunk}
    yield {"type": "done", "answer": reply}


def answered_offline(ctx: ChatContext, text: str, lang: Lang, note: str) -> Iterator[ChatEvent]:
    """The built-in answerer's events for `text`, `note` first (why the model did not answer) and in the answer."""
    yield {"type": "token", "text": f"{note}\n\n"}
    for event in answer(ctx, text, lang):
        if event["type"] == "done":
            event = {**event, "answer": f"{note}\n\n{event['answer']}"}
        if event["type"] != "start":
            yield event
