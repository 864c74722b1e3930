"""The human-readable sweep report: what was found, why, what was decided and done."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from agent.detectors.evidence import describe_record, duration_zh, kind_label
from agent.detectors.signals import IO_WORDS, ClusterSignals, JobWindow, group_signals
from agent.records.cost import money
from core.durations import format_duration
from core.text import one_line, plural
from core.zones import zone_name, zone_suffix

if TYPE_CHECKING:
    from agent.graph.deps import StewardDeps
    from agent.graph.state import StewardState

LABELS = {
    "en": {"sweep": "GPU Steward sweep at", "findings": "Findings", "none": "No waste found.", "actions": "Actions",
           "no_actions": "No actions.", "since": "since", "waste": "waste", "planner": "Planner",
           "approval": "Approval", "total": "Waste so far",
           "none_degraded": "No finding: the data is incomplete (above), and nothing is judged idle or hung on it.",
           "recovered": "Settled after an interruption (the outcome was not recorded before the process stopped)"},
    "zh": {"sweep": "GPU Steward 巡检时间", "findings": "发现", "none": "未发现浪费。", "actions": "操作",
           "no_actions": "无操作。", "since": "开始于", "waste": "浪费", "planner": "规划器",
           "approval": "审批", "total": "累计浪费",
           "none_degraded": "无发现：数据不完整（见上），不据此判定任何作业空闲或卡死。",
           "recovered": "中断后补记（进程停止前未记录结果的操作）"},
}

# Action outcomes and human decisions in Chinese (actions keep their command names).
STATUS_ZH = {
    "executed": "已执行", "blocked": "已拦截", "pending_approval": "待审批", "dry_run": "演练（未执行）",
    "failed": "失败", "refused": "被调度器拒绝", "skipped": "已跳过", "denied_by_human": "被人工拒绝",
    "expired": "已过期", "approve": "批准", "deny": "拒绝", "expire": "过期",
    "approved": "已批准", "denied": "已拒绝", "pending": "待审批",
    "needs_approval": "需人工审批", "allow": "放行", "observe_failed": "读取集群失败",
    "refused_answer": "答复未受理", "granted": "已保留", "revoked": "已撤销", "proposed": "已提议", "acting": "执行中",
    "sweep": "巡检", "reasked": "再次请求", "escalated": "已升级", "confirmed": "已确认", "detected": "自动发现",
    "recorded": "已记录", "flagged": "已标记上升",
}


# The sweep's own words for why data is incomplete (agent/graph/deps.py, nodes/observe.py, the LLM planner), in
# Chinese; the backend's error text itself stays verbatim.
DEGRADED_ZH = (("cluster not read: ", "未能读取集群："), ("node pools unavailable: ", "节点池不可用："),
               ("scheduler unavailable: ", "调度器不可用："), ("metrics unavailable: ", "指标不可用："),
               ("model unavailable: ", "模型不可用："), ("; planned by the policy model", "；已由内置策略模型规划"))


def degraded_text(reason: str, language: str) -> str:
    """A degradation reason for people: the sweep's own words translated, the backend's error kept verbatim."""
    if language != "zh":
        return reason
    for en, zh in DEGRADED_ZH:
        reason = reason.replace(en, zh)
    return reason


def status_label(status: str, language: str) -> str:
    return STATUS_ZH.get(status, status) if language == "zh" else status


# Actions as the Chinese UI, CLI and chat name them (the command names stay in English output and the audit).
ACTION_ZH = {"notify": "警告", "terminate": "优雅停止", "force_terminate": "强制停止", "resize_pool": "调整节点池",
             "drain_node": "排空节点", "keep": "保留", "cordon": "封锁节点"}


def action_label(action: str, language: str) -> str:
    return ACTION_ZH.get(action, action) if language == "zh" else action


# Why the guardrail decided, per rule, in Chinese; the English reason (with its numbers) stays in the audit log.
RULE_ZH = {
    "mode": "当前策略模式不允许执行该操作", "unknown_target": "找不到该目标（或目标信息已过期）",
    "replaced_target": "同名作业已是另一个实例，不对其执行", "not_running": "作业已不在运行",
    "protected": "作业受保护策略保护", "no_finding": "当前没有支持该操作的发现",
    "level_ceiling": "操作级别超出策略允许的上限", "denial_hold": "人工已拒绝该操作，在拒绝有效期内不再执行或询问",
    "long_tail_grace": "按该作业自身的工作节奏，空闲时间尚不算长（长尾宽限期内），暂不停止",
    "warning_first": "停止前必须先向负责人发出注明截止时间的警告，且通知期已满",
    "graceful_first": "必须先优雅停止（SIGTERM）并等待宽限期", "duplicate": "同一提醒在重复间隔内已发送过",
    "already_done": "已发送停止信号，正在等待宽限期", "already_stopping": "作业正在停止中",
    "rate_limit": "超出每小时操作次数上限", "circuit_breaker": "熔断器已触发，暂停自动操作",
    "reserve": "需为资源池保留空闲 GPU 余量", "runbook_limit": "超出运行手册允许的自动执行级别",
    "finding_size": "缩容幅度超出最新发现允许的节点数（需容纳在用 GPU、排队作业、余量和最少节点数）",
    "internal_error": "护栏无法判定，为安全起见拒绝", "allow": "所有护栏规则均通过",
    "metrics_stale": "GPU 指标已停止更新（导出器或其抓取中断）：作业当前状态未知，未知不等于空闲，待指标恢复后的巡检重新判定",
}


FORCED_WHY = ("it did not exit within the grace period after SIGTERM, so only a forced stop (SIGKILL) ends it",
              "作业收到优雅停止信号（SIGTERM）后，宽限期内仍未退出，只能强制停止")


def approval_why(action: str, rule: str, reason: str, language: str) -> str:
    """Why a request waits for a person, in `language`: a forced stop says first why it must be forced."""
    why = decision_reason(rule, reason, language)
    if action != "force_terminate":
        return why
    return f"{FORCED_WHY[1]}；{why}" if language == "zh" else f"{FORCED_WHY[0]}; {why}"


def decision_reason(rule: str, reason: str, language: str) -> str:
    """The guardrail's reason for people: as written in English, in Chinese by its rule (numbers where known)."""
    if language != "zh":
        return reason
    if rule == "approval" and reason.startswith("dry run"):
        return "演练模式：该操作需要人工审批，演练中不询问审批人，也未实际执行"
    if rule == "approval":
        if match := re.search(r" is level (\d+), above the automatic limit (\d+)", reason):
            return f"级别 {match[1]} 高于自动执行上限 {match[2]}，等待人工审批"
        if match := re.search(r"requires approval for level (\d+)", reason):
            return f"策略要求级别 {match[1]} 的操作经人工审批，等待人工审批"
        return "该发现的停止操作需要人工批准，等待人工审批"
    if rule == "allow" and reason.startswith("approved by a human"):
        return "已获人工批准"
    if rule == "allow" and reason.startswith("dry run"):
        return "演练模式：所有护栏规则均通过，未实际执行"
    if rule == "finding_size" and (match := re.match(r"(\d+) nodes is below the (\d+) nodes the current oversized "
                                                     r"finding for pool (\S+) keeps", reason)):
        return (f"缩至 {match[1]} 个节点低于节点池 {match[3]} 最新发现建议保留的 {match[2]} 个节点（需容纳在用 GPU、"
                "排队作业、余量和最少节点数）：缩容不超过最新发现允许的幅度，无论提议或批准的节点数是多少")
    if rule == "protected" and (match := re.match(r"(pool|node) (\S+) is protected: exempted by (.+?) until (.+? UTC)"
                                                  r"(?: \((.*)\))?; no ", reason)):
        what = "节点池" if match[1] == "pool" else "节点"
        said = f"（{match[5]}）" if match[5] else ""
        return f"{what} {match[2]} 已由 {match[3]} 豁免至 {match[4]}{said}：豁免期内不调整、不封锁"
    if rule == "protected" and (match := re.search(r" is protected: (\S+), a pod of the same distributed job"
                                                   r"(?: \((\S+)\))?, is protected \((.*)\), and a stop of any "
                                                   r"pod ends the whole job", reason)):
        group = f"（{match[2]}）" if match[2] else ""
        kept = re.fullmatch(r"exempted by (.+?) until (.+? UTC)(?: \((.*)\))?", match[3])
        why = (f"由 {kept[1]} 保留至 {kept[2]}" + (f"（{kept[3]}）" if kept[3] else "")) if kept else match[3]
        return f"同一分布式作业{group}中的 {match[1]} 受保护（{why}）：停止任何一个 pod 都会终止整个作业，故不处理"
    if rule == "warning_first" and (match := re.match(r"(\S+), a pod of the same distributed job, was warned at "
                                                      r"(.+?) that its stop is no earlier than (.+?); a stop", reason)):
        return (f"同一分布式作业中的 {match[1]} 于 {match[2]} 收到警告，承诺最早 {match[3]} 才停止；"
                "停止任何一个 pod 都会终止整个作业，须等到该时间")
    if rule == "metrics_stale" and (parts := re.findall(r"(\S+) on (\S+): no GPU sample (?:since (\d{2}:\d{2}) "
                                                       r"UTC|in the whole read)", reason)):
        seen = "；".join(f"{job}（节点 {node}）自 {at} UTC 起没有 GPU 样本" if at
                        else f"{job}（节点 {node}）在读取范围内没有 GPU 样本" for job, node, at in parts)
        return (f"GPU 指标已停止更新：{seen}，最新时间片内没有样本（导出器或其抓取中断）；作业当前状态未知，未知不等于"
                "空闲：指标恢复前不执行，下一次巡检重新判定")
    if rule == "already_done" and " was force-stopped at " in reason:
        return "已强制停止，但作业仍在停止中：调度器未能结束它（请检查其节点是否失联，或进程卡在内核中），不再重复强制停止"
    return RULE_ZH.get(rule, "护栏规则未通过")


# The guardrail's rule, read back from its English reason where only the text was kept (an execution blocked when
# re-checked records "re-checked before acting: <reason>"); first match wins, most specific first.
RULE_OF_REASON = (
    (re.compile(r"^policy mode is "), "mode"),
    (re.compile(r" is now a different job \(uid "), "replaced_target"),
    (re.compile(r"is not known \(no fresh pool facts\)|^the fresh facts are for |^the scheduler does not know job |"
                r"has no node \S+ with a health finding"), "unknown_target"),
    (re.compile(r"; only running or stopping jobs are stopped"), "not_running"),
    (re.compile(r"^GPU metrics stale: .*unknown is not idle"), "metrics_stale"),
    (re.compile(r" is protected: "), "protected"),
    (re.compile(r"^no current "), "no_finding"),
    (re.compile(r", above the ceiling \d+ for "), "level_ceiling"),
    (re.compile(r"; the denial holds for "), "denial_hold"),
    (re.compile(r"long-tail grace"), "long_tail_grace"),
    (re.compile(r"a stop needs a delivered|^the owner of job \S+ was warned at |, a pod of the same distributed "
                r"job, was warned at "), "warning_first"),
    (re.compile(r"has not been asked to stop gracefully|was sent a graceful stop at "), "graceful_first"),
    (re.compile(r"was already notified|is already awaiting approval"), "duplicate"),
    (re.compile(r" and is stopping; waiting for the | was force-stopped at .* and is still stopping"), "already_done"),
    (re.compile(r" is already stopping"), "already_stopping"),
    (re.compile(r"failed in the last hour \(the breaker|GPUs reclaimed in the last hour"), "circuit_breaker"),
    (re.compile(r"stops_per_hour|stops in the last hour reach the limit"), "rate_limit"),
    (re.compile(r" nodes the current oversized finding for "), "finding_size"),
    (re.compile(r"names no target node count|does not shrink it|is below the minimum|is above the maximum|"
                r"would remove a busy node|; the reserve is "), "reserve"),
    (re.compile(r"runbook"), "runbook_limit"),
)

# What a backend answered to a stop, a resize or a warning (the word before the colon in an outcome's detail).
RESULT_ZH = {
    "stopped": "已停止", "stopping": "已发送 SIGTERM，作业尚未退出", "already_gone": "作业已不存在", "refused": "被拒绝",
    "error": "出错", "resized": "已缩容", "unchanged": "未改变", "cordoned": "已封锁", "sent": "已发送",
    "suppressed": "重复，未再发送", "deferred": "非工作时间，推迟发送", "failed": "发送失败",
}
# The simulator's and adapters' own short answers; anything else a backend says stays verbatim.
BACKEND_ZH = {
    "not done: this steward lost the sweeper lease": "未执行：本实例已失去巡检租约，由持有租约的实例执行",
    "not done: another steward is carrying it out": "未执行：另一实例正在执行，不重复执行",
    "not done: an earlier resize is not settled": "未执行：该节点池之前的一次调整尚无结果（可能已全部或部分生效），先按节点池的最新规模结算",
    "killed": "已强制结束", "exited on SIGTERM": "收到 SIGTERM 后退出", "SIGTERM sent; the job has not exited": "",
    "pending job removed from the queue": "排队中的作业已移出队列", "no such job": "没有该作业",
    "job already ended": "作业已结束", "delivery failed": "投递失败",
    "already told about this job and violation in this period": "本周期内已就该作业的该问题通知过",
    "outside working hours; sent at the next sweep within them": "将在工作时间内的下一次巡检时发送",
    "no DingTalk or WeCom webhook configured": "未配置钉钉或企业微信 webhook",
}


# How an owner warning went out (Delivery.channel); a channel not listed keeps its name.
CHANNEL_ZH = {"inbox": "站内信", "email": "邮件", "chatops": "群聊机器人", "dingtalk": "钉钉", "wecom": "企业微信",
              "log": "日志", "none": "无渠道"}


def rule_of_reason(reason: str) -> str | None:
    """The guardrail rule an English reason was written by, or None when it is not one of the guardrail's."""
    return next((rule for pattern, rule in RULE_OF_REASON if pattern.search(reason)), None)


def outcome_text(action: str, status: str, detail: str, reason: str, language: str) -> str:
    """What came of an executed, refused, blocked or failed action, for people: the recorded detail (else its
    reason) as written in English; in Chinese rebuilt from its parts: product words translated, identifiers,
    numbers, a person's words and a backend's own error text kept. A reason that is only the proposal's evidence
    (English detector text, shown translated with the finding) is left out in Chinese."""
    if not detail and reason == status:  # a denial or expiry without words: its status says it all
        return ""
    text = plain_times(detail or reason or "")
    if language != "zh" or not text:
        return text
    if not detail:
        if status in ("denied_by_human", "expired"):
            return text  # a person's own words (or none)
        return _reason_zh(action, reason)
    if action == "notify" and (m := re.match(r"^(\S+) to (\S+): (\w+)(?: \((.*)\))?$", detail)):
        said = BACKEND_ZH.get(m[4] or "", m[4] or "")
        via = "、".join(CHANNEL_ZH.get(c, c) for c in m[1].split("+"))
        via = via if all(c in CHANNEL_ZH for c in m[1].split("+")) else f" {via} "
        return f"通过{via}发给 {m[2]}：{RESULT_ZH.get(m[3], m[3])}" + (
            f"（{said}）" if said else "")
    if action == "resize_pool" and (m := re.match(r"^(\d+)->(\d+)\s*(.*)$", detail)):
        rest = BACKEND_ZH.get(m[3], m[3])
        return f"{m[1]} → {m[2]} 个节点" + (f"（{rest}）" if rest else "")
    word, _, rest = detail.partition(": ")
    if word in RESULT_ZH:
        said = BACKEND_ZH.get(rest, rest)
        head = "已强制结束，作业尚未退出" if word == "stopping" and action == "force_terminate" else RESULT_ZH[word]
        return head + (f"（{said}）" if said else "")
    return BACKEND_ZH.get(detail, detail)


def _reason_zh(action: str, reason: str) -> str:
    """An outcome's reason (it had no detail) in Chinese."""
    act = action_label(action, "zh")
    if reason.startswith("re-checked before acting: "):
        inner = reason.removeprefix("re-checked before acting: ")
        rule = rule_of_reason(inner)
        if rule == "metrics_stale":  # when the metrics stopped, in the reader's words
            return "执行前复核未通过：" + decision_reason(rule, inner, "zh")
        return "执行前复核未通过：" + RULE_ZH.get(rule or "", "护栏规则未通过")
    if reason.startswith("dry run: would "):
        return f"演练：未实际{act}"
    if reason.startswith("could not re-read fresh state: "):
        return "无法重新读取最新状态，未执行：" + reason.removeprefix("could not re-read fresh state: ")
    if reason == "already executed (idempotent)":
        return "已执行过，不重复执行"
    if m := re.match(r"^already stopped with (\S+) at (\d{2}:\d{2}) by one suspension of the owner they share "
                     r"\(uid (\S*)\); not asked again$", reason):
        return f"已于 {m[2]} 随 {m[1]} 一并停止（所属作业只暂停一次，其 ID 为 `{m[3]}`），不重复执行"
    if m := re.match(r"^interrupted at (\d{2}:\d{2}) before its outcome was recorded: (.*)$", reason):
        return f"{m[1]} 中断，结果未及记录：{outcome_text(action, '', m[2], '', 'zh')}"
    if m := re.match(r"^\w+ failed: (.*)$", reason):
        return f"{act}失败：{m[1]}"
    if rule := rule_of_reason(reason):
        return RULE_ZH.get(rule, "护栏规则未通过")
    return ""  # the proposal's own reason (a detector's English evidence): the finding shows it translated


def pad(text: str, width: int) -> str:
    """`text` padded to `width` terminal columns (CJK characters take two), at least one space after it."""
    wide = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return text + " " * max(1, width - wide)


def _local(value: str, zone: tzinfo) -> datetime:
    moment = datetime.fromisoformat(value)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(zone)


def _when(value: str, at: str, zone: tzinfo = UTC) -> str:
    """HH:MM in the display zone; with the date when it is another day than the sweep's."""
    local = _local(value, zone)
    return f"{local:%H:%M}" if not at or local.date() == _local(at, zone).date() else f"{local:%m-%d %H:%M}"


def _decision_line(d: dict[str, Any], outcomes: dict[str, dict[str, Any]], lang: str = "en") -> str:
    p, dec = d["proposal"], d["decision"]
    zh = lang == "zh"
    nodes = p.get("target_nodes")
    target = p["target"] + ("" if nodes is None else f" → {nodes} 个节点" if zh else f" -> {nodes} nodes")
    head = (f"  {pad(action_label(p['action'], lang), 16)} {target}（级别 {dec['level']}）：" if zh
            else f"  {p['action']:<16} {target} (level {dec['level']}): ")
    out = outcomes.get(d["id"])
    if zh:
        if dec["verdict"] == "needs_approval":
            return f"{head}等待人工审批（{decision_reason(dec['rule'], dec['reason'], lang)}）"
        if dec["verdict"] == "deny":
            return f"{head}被护栏拒绝（{decision_reason(dec['rule'], dec['reason'], lang)}）"
        return f"{head}{status_label(out['status'], lang) if out else '已允许'}"
    if dec["verdict"] == "needs_approval":
        return f"{head}waiting for human approval [{dec['rule']}] {dec['reason']}"
    if dec["verdict"] == "deny":
        return f"{head}refused by guardrail [{dec['rule']}] {dec['reason']}"
    if out is None:
        return f"{head}allowed"
    return f"{head}{status_label(out['status'], lang)} {out.get('detail') or out.get('reason') or ''}".rstrip()


def _finding_lines(f: dict[str, Any], at: str, words: dict[str, str], lang: str, zone: tzinfo = UTC) -> list[str]:
    seconds = (datetime.fromisoformat(at) - datetime.fromisoformat(f["since"])).total_seconds()
    money_str = money(f["waste_cost"], f["currency"]) if f["waste_cost"] else ""
    rb = f" [rb:{f['runbook']}]" if f.get("runbook") else ""
    if lang == "zh":
        label = pad(kind_label(f["kind"], lang), 16)
        waste = f"{words['waste']} {f['waste_gpu_hours']:.1f} GPU 小时 {money_str}".rstrip() if f["gpus"] else ""
        return [f"  {label}{f['target']}  {f['gpus']} 块 GPU  {words['since']} {_when(f['since'], at, zone)}"
                f"（{duration_zh(seconds)}）  {waste}".rstrip(),
                f"  {'':<15} {describe_record(f, lang, zone)}{rb}"]
    waste = f"{words['waste']} {f['waste_gpu_hours']:.1f} GPU-h {money_str}".rstrip() if f["gpus"] else ""
    return [f"  {f['kind'].upper():<15} {f['target']}  {f['gpus']} GPU{'' if f['gpus'] == 1 else 's'}  {words['since']} "
            f"{_when(f['since'], at, zone)} ({format_duration(seconds)})  {waste}".rstrip(),
            f"  {'':<15} {describe_record(f, lang, zone)}{rb}"]


def _shown(value: Any, lines: bool = False) -> Any:
    """The state's text as a report shows it: each string one line (core.text.one_line), so a job's name, a
    reason or evidence quoting a log can neither print a line of its own nor send a terminal a control sequence;
    with `lines` (a model's explanation), its own line breaks are kept and each line made safe."""
    if isinstance(value, str):
        return "\n".join(one_line(x) for x in value.split("\n")) if lines else one_line(value)
    if isinstance(value, dict):
        return {k: _shown(v, lines or k == "explanation") for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v, lines) for v in value]
    if isinstance(value, tuple):
        return tuple(_shown(v, lines) for v in value)
    return value


def render_report(state: StewardState, deps: StewardDeps, zone: tzinfo = UTC) -> str:
    """The report in the deps' language. Times are in `zone`: UTC for the audit log (the graph's own copy),
    the display time zone (STEWARD_DISPLAY_TZ) when it is shown to people (report_for_people). The cluster's
    text in it (names, reasons, evidence) is shown one line each (_shown)."""
    state = _shown(state)
    lang = deps.language
    words = LABELS.get(lang, LABELS["en"])
    zh = lang == "zh"
    outcomes = {o["id"]: o for o in state.get("outcomes", [])}
    if state.get("mode") == "approval":
        a = state.get("approval", {})
        decision = status_label(a.get("decision", "?"), lang)
        by = a.get("by") or ("策略" if zh else "policy")
        lines = [f"{words['approval']} {a.get('id', '?')}：{by} {decision}" if zh
                 else f"{words['approval']} {a.get('id', '?')}: {decision} by {by}"]
        for o in state.get("outcomes", []):
            level = f"（级别 {o['level']}）：" if zh else f" (level {o['level']}): "
            said = outcome_text(o["action"], o["status"], o.get("detail") or "", o.get("reason") or "", lang)
            detail = (f"（{said}）" if said else "") if zh else f" {o.get('detail') or o.get('reason') or ''}"
            lines.append(f"  {pad(action_label(o['action'], lang), 16)} {o['target']}{level}"
                         f"{status_label(o['status'], lang)}{detail}".rstrip())
        return "\n".join(lines)
    at = state.get("at", "")
    observed = state.get("observed", {})
    stamp = f"{_local(at, zone):%Y-%m-%d %H:%M}{zone_suffix(zone, lang)}" if at else "?"
    unread = any(str(r).startswith("cluster not read") for r in observed.get("degraded") or [])
    if unread:  # not "0 jobs, 0 GPUs": nothing was counted
        header = f"{words['sweep']} {stamp}：未能读取集群" if zh else f"{words['sweep']} {stamp}: cluster not read"
    elif zh:
        header = (f"{words['sweep']} {stamp}：{observed.get('jobs', 0)} 个作业，"
                  f"{observed.get('gpus', 0)} 块 GPU，{observed.get('nodes', 0)} 个节点"
                  f"（{observed.get('backend_calls', 0)} 次后端调用）")
    else:
        header = (f"{words['sweep']} {stamp}: {plural(observed.get('jobs', 0), 'job')}, "
                  f"{plural(observed.get('gpus', 0), 'GPU')}, {plural(observed.get('nodes', 0), 'node')} "
                  f"({plural(observed.get('backend_calls', 0), 'backend call')})")
    lines = [header, ""]
    # Partial metric answers: no idle or zombie finding was made on them (agent/detectors/longtail.py).
    degraded = observed.get("degraded") or getattr(deps._observations.get(state.get("run_id", "")), "degraded", [])
    degraded = [one_line(str(reason)) for reason in degraded]
    lines[1:1] = [f"数据不完整：{degraded_text(reason, lang)}" if zh else f"degraded: {reason}" for reason in degraded]
    unmeasured = [one_line(job) for job in _unmeasured(deps, state.get("run_id", ""))]
    if unmeasured:
        names = ", ".join(unmeasured[:5]) + (f" (+{len(unmeasured) - 5})" if len(unmeasured) > 5 else "")
        lines.insert(1 + len(degraded), f"未测量：{len(unmeasured)} 个运行中的 GPU 作业没有 GPU 指标（{names}），不对其作判断"
                     if zh else f"not measured: {plural(len(unmeasured), 'running GPU job')} without GPU metrics "
                     f"({names}); nothing is judged about {'it' if len(unmeasured) == 1 else 'them'}")
    judged = _windows(deps, state.get("run_id", ""))
    unjudged, window, floor = _unjudged(deps, judged[0])
    if unjudged:
        shown = ", ".join(f"{one_line(job)} {cov:.0%}" for job, cov in unjudged[:5])
        shown += f" (+{len(unjudged) - 5})" if len(unjudged) > 5 else ""
        lines.insert(1 + len(degraded) + bool(unmeasured),
                     f"未判断：{len(unjudged)} 个运行中的 GPU 作业在最近 {duration_zh(window)}内的 GPU 样本覆盖率低于 "
                     f"{floor:.0%}（{shown}），数据补齐之前不对其作判断" if zh else
                     f"not judged: {plural(len(unjudged), 'running GPU job')} with GPU samples for under {floor:.0%} of "
                     f"the last {format_duration(window)} ({shown}); nothing is judged about "
                     f"{'it' if len(unjudged) == 1 else 'them'} until the data is whole")
    listing = observed.get("notes") or []
    lines.extend((f"调度器说明（原文）：{note}" if zh else f"scheduler note: {note}") for note in listing[:10])
    if len(listing) > 10:
        lines.append(f"（另有 {len(listing) - 10} 条）" if zh else f"(+{len(listing) - 10} more)")
    io_unread = _io_unread(deps, *judged)
    if io_unread:
        if zh:
            shown = "、".join(f"{job}（{'、'.join(IO_WORDS[f][1] for f in fields)}）" for job, fields in io_unread[:5])
            shown += f"（另有 {len(io_unread) - 5} 个）" if len(io_unread) > 5 else ""
        else:
            shown = ", ".join(f"{job} ({'/'.join(IO_WORDS[f][0] for f in fields)})" for job, fields in io_unread[:5])
            shown += f" (+{len(io_unread) - 5})" if len(io_unread) > 5 else ""
        lines.insert(1 + len(degraded) + bool(unmeasured) + bool(unjudged),
                     f"未判断空闲：{len(io_unread)} 个运行中的 GPU 作业缺少其他作业已有的全部 CPU/IO 指标：{shown}"
                     f"（例如所在节点的 cAdvisor 采集目标宕机），数据补齐之前不判断其是否空闲" if zh else
                     f"idle not judged: {plural(len(io_unread), 'running GPU job')} without the CPU/IO metrics other jobs "
                     f"have ({shown}; its node's cAdvisor target down, say); "
                     f"{'it is' if len(io_unread) == 1 else 'they are'} not judged idle until the data is whole")
    recovered = state.get("recovered", [])
    if recovered:
        lines.append(f"{words['recovered']}：" if zh else f"{words['recovered']}:")
        lines.extend(f"  {pad(action_label(o['action'], lang), 16)} {o['target']}："
                     f"{status_label(o['status'], lang)}" if zh else
                     f"  {o['action']:<16} {o['target']}: {status_label(o['status'], lang)} {o.get('detail', '')}"
                     .rstrip() for o in recovered)
        lines.append("")
    findings = state.get("findings", [])
    if findings:
        lines.append(f"{words['findings']}（{len(findings)}）：" if zh else f"{words['findings']} ({len(findings)}):")
        total_cost, total_hours, currency = 0.0, 0.0, deps.currency
        for f in findings:
            lines.extend(_finding_lines(f, at, words, lang, zone))
            total_cost += f["waste_cost"]
            total_hours += f["waste_gpu_hours"]
            currency = f["currency"]
        lines.append(f"  {words['total']}：{total_hours:.1f} GPU 小时，{money(total_cost, currency)}" if zh
                     else f"  {words['total']}: {total_hours:.1f} GPU-h, {money(total_cost, currency)}")
    else:
        lines.append(words["none_degraded"] if degraded else words["none"])
    lines.append("")
    decisions = state.get("decisions", [])
    lines.append((f"{words['actions']}：" if zh else f"{words['actions']}:") if decisions else words["no_actions"])
    lines.extend(_decision_line(d, outcomes, lang) for d in decisions)
    plan = state.get("plan", {})
    if plan:
        calls = plan.get("tool_calls", 0)
        extra = (f"，{calls} 次工具调用" if zh else f", {calls} tool calls") if calls else ""
        lines.append(f"\n{words['planner']}{'：' if zh else ': '}{plan.get('model', '?')}{extra}")
        if plan.get("model") != "policy-model" and plan.get("explanation"):
            lines.append(plan["explanation"])
        lines.extend([f"  ! {degraded_text(plan['degraded'], lang)}"] if plan.get("degraded") else [])
        for err in plan.get("errors", []):
            lines.append(f"  ! {err}")
    return "\n".join(lines)


def report_for_people(report: str, state: StewardState | dict[str, Any], deps: StewardDeps, zone: tzinfo) -> str:
    """A sweep's report as people read it: re-rendered with times in the display zone (the audited copy, `report`,
    stays in UTC). An approval's report names no times and is returned as it is."""
    if zone_name(zone) == "UTC" or not state.get("at") or state.get("mode") == "approval":
        return report
    return render_report(state, deps, zone)  # type: ignore[arg-type]


def _unmeasured(deps: StewardDeps, run_id: str) -> list[str]:
    """Running GPU jobs without a single GPU series in the sweep's reading (an exporter down, a series dropped)."""
    obs = deps._observations.get(run_id)
    if obs is None:
        return []
    measured = obs.gpus_by_job()
    return sorted(j.id for j in obs.jobs if j.state == "running" and j.gpus > 0 and j.node and j.id not in measured)


def _windows(deps: StewardDeps, run_id: str) -> tuple[list[tuple[str, JobWindow]], ClusterSignals | None]:
    """Each running GPU job older than the idle window with its idle window, on a whole reading ([] on a stale or
    partial one: the degraded line says so once), and the sweep's grouped signals."""
    obs = deps._observations.get(run_id)
    policy = getattr(deps, "policy", None)
    if policy is None or obs is None or obs.degraded:
        return [], None
    rule = policy.detectors.idle
    signals = group_signals(obs)
    out = []
    for job in obs.jobs:
        series = signals.jobs.get(job.id)
        if job.state != "running" or job.gpus <= 0 or series is None:
            continue
        if job.started_at is None or (obs.at - job.started_at).total_seconds() < rule.window:
            continue
        out.append((job.id, series.window(rule.window, job.gpus)))
    return out, signals


def _unjudged(deps: StewardDeps, windows: list[tuple[str, JobWindow]]) -> tuple[list[tuple[str, float]], float, float]:
    """Running GPU jobs, older than the idle window, whose GPU samples cover less of it than an idle call needs (a
    gap, an exporter restart, a half-scraped GPU), with their coverage; the window and the floor. Nothing when the
    whole reading is stale or partial (the degraded line says so once)."""
    policy = getattr(deps, "policy", None)
    if policy is None:
        return [], 0.0, 0.0
    rule = policy.detectors.idle
    out = [(job, w.coverage) for job, w in windows if w.coverage < rule.min_coverage]
    return sorted(out), rule.window, rule.min_coverage


def _io_unread(deps: StewardDeps, windows: list[tuple[str, JobWindow]],
               signals: ClusterSignals | None) -> list[tuple[str, list[str]]]:
    """Running GPU jobs, older than the idle window, that lack every CPU/IO field the source reads for other jobs
    (the idle detector does not judge them: `ClusterSignals.io_unread`; one lacking some is judged, its stop for a
    person), with the fields. Nothing on a degraded reading."""
    if signals is None or not signals.io_fields:
        return []
    floor = deps.policy.detectors.idle.min_coverage
    return sorted((job, fields) for job, w in windows
                  if (fields := signals.io_unread(w, floor)) and len(fields) == len(signals.io_fields))


def describe_grace(seconds: float) -> str:
    return format_duration(seconds)


_ISO = re.compile(r"\b(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(?::\d{2}(?:\.\d+)?)?(?:\+00:00|Z)?")


def plain_times(text: str) -> str:
    """ISO timestamps in a stored reason as people read them: 2026-11-02T20:50:00.123+00:00 -> 2026-11-02 20:50 UTC."""
    return _ISO.sub(lambda m: f"{m[1]} {m[2]} UTC", text)


# Audit entry kinds in Chinese (as the web UI's akind.* labels); an exemption is what chat and the UI call a keep.
KIND_ZH = {"finding": "发现", "proposal": "提议", "decision": "护栏判定", "intent": "准备执行", "execution": "执行",
           "approval": "审批", "stop_confirmed": "确认停止", "exemption": "保留", "report": "报告", "error": "错误",
           "alert_incident": "告警事件", "change": "变更", "change_impact": "变更影响", "usage": "用量记录", "served": "服务记录"}


def audit_status(kind: str, status: str | None, action: str | None, language: str) -> str:
    """An audit entry's status for people, by what kind of entry it is: a refused `keep` is a request the steward
    did not take (no scheduler involved), a granted exemption is a keep in force (nobody approved it), a finding's
    status is its kind, a guardrail `deny` is the guardrail's. English keeps the recorded status."""
    status = status or ""
    if language != "zh" or not status:
        return status
    if kind == "finding":
        return kind_label(status, language)
    if kind == "served" and status == "answered_requests":
        return "曾响应请求"
    if kind == "exemption":
        return {"granted": "已保留", "revoked": "已撤销"}.get(status, status_label(status, language))
    if kind == "decision":
        return {"refused": "未受理", "deny": "护栏拒绝", "allow": "放行"}.get(status, status_label(status, language))
    if kind == "execution" and status == "refused" and action not in ("terminate", "force_terminate"):
        return "被拒绝"  # a node pool or node backend refused it, not the scheduler
    return status_label(status, language)


def audit_heading(kind: str, status: str | None, action: str | None, target: str | None, language: str) -> str:
    """What one audit entry is about, as `steward audit log` leads its line with: the action (else the entry's
    kind), the target and the status; in Chinese with the kind and status in words."""
    if language != "zh":
        return " ".join(x for x in (action or kind, target or "", status or "") if x)
    said = audit_status(kind, status, action, language)
    if kind == "report" and status in ("sweep", "approval"):
        return f"{said}报告"
    what = action_label(action, language) if action else KIND_ZH.get(kind, kind)
    return " ".join(x for x in (what, target or "", said) if x)


# Why an answer to an approval request was not taken (ApprovalStore.answer, the ChatOps unsigned-sender refusal).
_ANSWERED_ZH = {"approved": "批准", "denied": "拒绝"}
_PLATFORM_ZH = {"dingtalk": "钉钉", "wecom": "企业微信", "feishu": "飞书", "slack": "Slack"}


def _refused_answer_zh(reason: str) -> str:
    if m := re.match(r"^answer from (\S+) refused: already (\w+) by (\S+)", reason):
        done = "已过期" if m[2] == "expired" else f"已由 {'策略' if m[3] == 'policy' else m[3]} {_ANSWERED_ZH.get(m[2], m[2])}"
        return f"{m[1]} 的答复未受理：该请求{done}"
    if m := re.match(r"^answer from (\S+) refused: expired", reason):
        return f"{m[1]} 的答复未受理：该请求已过期"
    if m := re.match(r"^answer from (\S+) refused: not an approver", reason):
        return f"{m[1]} 的答复未受理：不是审批人"
    if m := re.match(r"^(approve|deny) through (\w+) refused: its callbacks do not sign the sender", reason):
        where = _PLATFORM_ZH.get(m[2], m[2])
        return f"通过{where}的{'批准' if m[1] == 'approve' else '拒绝'}未受理：{where}回调不对发送者签名"
    return ""


def _moment(value: str, zone: tzinfo, language: str) -> str:
    """A stored ISO time in `zone`, the zone named; the text as it was when it is not a time."""
    try:
        local = _local(value, zone)
    except ValueError:
        return plain_times(value)
    return f"{local:%Y-%m-%d %H:%M}{zone_suffix(zone, language)}"


def audit_text(kind: str, status: str | None, action: str | None, target: str | None, reason: str | None,
               data: dict[str, Any], language: str, zone: tzinfo = UTC) -> str:
    """One audit entry's reason for people: as recorded (times made readable) in English, rebuilt in Chinese from
    the entry's structured fields (the English original stays in the log); times the Chinese rebuilds are in
    `zone`, named."""
    reason = plain_times(reason or "")
    if language != "zh":
        return reason
    if isinstance(data.get("reason_zh"), str):  # an entry that carries its own Chinese (changes, change impact)
        return str(data["reason_zh"])
    act = action_label(action or "", language)
    if kind == "decision":
        return decision_reason(str(data.get("rule") or status or ""), reason, language)
    if kind == "finding":
        hours = data.get("waste_gpu_hours")
        waste = f"，浪费 {float(hours):.1f} GPU 小时" if isinstance(hours, int | float) else ""
        return f"发现{kind_label(str(data.get('kind') or status), language)}：{data.get('gpus', 0)} 块 GPU{waste}"
    if kind == "proposal":
        return f"提议{act}（{kind_label(str(data.get('finding_kind') or ''), language) or '无发现类型'}）"
    if kind == "intent":
        return f"即将{act}"
    if kind == "execution":
        said = outcome_text(action or "", status or "", str(data.get("detail") or ""), reason, language)
        return f"{act}：{status_label(status or '', language)}" + (f"（{said}）" if said else "")
    if kind == "stop_confirmed":
        return "已确认作业退出"
    if kind == "approval":
        by = data.get("by") or ""
        said = reason.split(": ", 1)[1] if status in ("approved", "denied") and ": " in reason else ""
        expires = str(data.get("expires_at") or "")
        pending = f"等待人工审批，截至 {_moment(expires, zone, language)}" if expires else "等待人工审批"
        return {"pending": pending, "approved": f"{by} 已批准", "denied": f"{by} 已拒绝",
                "expired": "无人答复，已过期，未执行", "reasked": "上次请求无人答复，再次请求审批",
                "escalated": "升级给下一组审批人",
                "refused_answer": _refused_answer_zh(reason) or "答复未受理"}.get(
                    status or "", status_label(status or "", language)) + (
            f"：{said}" if said else "")
    if kind == "exemption":
        by = f"，由 {data['by']} 设置" if data.get("by") else ""
        if status == "granted":
            return f"保留至 {_moment(str(data.get('until') or ''), zone, language)}{by}"
        return f"保留已撤销，由 {data['by']} 撤销" if data.get("by") else "保留已撤销"
    if kind == "report":
        return "巡检报告"
    if kind == "error" and reason:  # what failed, in the sweep's translated words and the backend's own
        return degraded_text(reason, language)
    return status_label(status or "", language)
