"""What people can say to the robot: `keep 4h <reason>`, `approve <id>`, `deny <id>`, or any question."""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from agent.chatops.directory import UserDirectory
from agent.detectors.evidence import describe, kind_label
from agent.graph.deps import StewardDeps
from agent.records.approvals import ApprovalError, audit_refused_answer
from agent.records.store import StoreUnavailable
from core.actions import Finding
from core.durations import format_duration, parse_duration, spoken_units
from core.text import markdown_text

log = logging.getLogger("steward.chatops")

Answer = Callable[[str, str, str], str | None]  # (question, user, language) -> reply; None: the findings summary
OWNER_MAX_KEEP_S = 24 * 3600.0  # an owner may pause the steward on their job for a day; approvers up to 30 days
APPROVER_MAX_KEEP_S = 30 * 86400.0
# A keep shorter than a minute ends before the next sweep could honour it: audited as a keep, it would hold nothing
# (and a keep ends the warning before it, so it would only cost the owner a fresh notice).
MIN_KEEP_S = 60.0
_CJK = re.compile(r"[\u4e00-\u9fff]")
# `approve <id> [reason]`: the verb, then a space or a colon (ASCII or full-width; `批准：apr_x`), or, after a Chinese
# verb, the id itself (`批准apr_x`: no space is usual in Chinese).
ANSWER_COMMAND = re.compile(r"^(approve|deny|批准|拒绝)(?:\s*[:：]\s*|\s+|(?<=[准绝])(?=[A-Za-z0-9]))(\S+)\s*(.*)$",
                            re.IGNORECASE | re.DOTALL)
# A message that sets out to answer a request (the verb alone, or before a colon, or with a request id in it) but is
# not ANSWER_COMMAND: told it was not taken and how to write it, never answered with a findings summary.
_ANSWER_TRIED = re.compile(r"^(approve|deny|批准|拒绝)(?=$|[\s:：]|.*apr_)", re.IGNORECASE | re.DOTALL)
_DECISIONS: dict[str, Literal["approve", "deny"]] = {"approve": "approve", "deny": "deny", "批准": "approve",
                                                      "拒绝": "deny"}
# Platforms whose callbacks sign neither the sender nor the text (DingTalk's `sign` covers only the timestamp):
# their messages never answer an approval, whoever they claim to come from.
UNSIGNED_SENDERS = frozenset({"dingtalk"})
_PLATFORM_NAMES = {"dingtalk": ("DingTalk", "钉钉"), "wecom": ("WeCom", "企业微信")}


class StewardService(Protocol):
    """SweepService or the server's StewardRuntime: deps and a once-only answer()."""

    deps: StewardDeps

    def answer(self, approval_id: str, decision: Literal["approve", "deny"], by: str, reason: str = "") -> Any:
        ...


def normalised(text: str) -> str:
    """`text` as commands are read: NFKC (full-width letters, digits, spaces and colons as ASCII) without format
    characters (a zero-width space pasted into `approve\u200b apr_x`)."""
    return "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")


def language_of(text: str) -> str:
    return "zh" if _CJK.search(text) else "en"


def _t(lang: str, en: str, zh: str) -> str:
    return zh if lang == "zh" else en


def current_findings(service: StewardService) -> list[Finding]:
    latest = getattr(service, "findings", None)
    if callable(latest):
        found = latest()
        if found:
            return found
    from agent.detectors.engine import run_detectors

    deps = service.deps
    return run_detectors(deps.observe(), deps.policy)


def findings_summary(service: StewardService, lang: str, platform: str = "") -> str:
    """The default answer: a deterministic list of what the steward sees now. Its closing hint invites only the
    replies `platform` takes: where messages are not signed (DingTalk), approvals are answered on the card."""
    findings = current_findings(service)
    if not findings:
        return _t(lang, "No waste found right now.", "当前未发现浪费。")
    head = _t(lang, f"{len(findings)} finding(s) now:", f"当前发现 {len(findings)} 项：")
    if lang == "zh":
        from agent.planning.policy_model import team_zone  # the group's zone, as its warnings and keep replies

        policy = getattr(service.deps, "policy", None)
        zone = team_zone(policy) if policy is not None else UTC
        lines = [f"- {markdown_text(f.target)}：{kind_label(f.kind, lang)}。{markdown_text(describe(f, lang, zone))}"
                 for f in findings[:10]]
    else:
        # A job's name and its evidence (log lines) are the cluster's words: one line each, no link, tag or @all.
        lines = [f"- {markdown_text(f.target)}: {f.kind}. {markdown_text(f.evidence)}" for f in findings[:10]]
    if platform in UNSIGNED_SENDERS:
        tail = _t(lang, "Reply `keep 4h <job> <reason>` to keep your job; approvers answer a request with the Approve / "
                        "Deny buttons on its card.",
                  "回复 `保留 4h <作业> <原因>` 可暂缓你的作业；审批人请使用审批卡片上的“批准 / 拒绝”按钮处理审批。")
    else:
        tail = _t(lang, "Reply `keep 4h <job> <reason>` to keep your job, `approve <id>` / `deny <id>` to answer a "
                        "request.",
                  "回复 `保留 4h <作业> <原因>` 可暂缓你的作业；审批人回复 `approve <id>` / `deny <id>` 处理审批。")
    return "\n".join([head, *lines, tail])


def not_carried_out(result: Any, lang: str) -> str:
    """What an approval's answer did not bring about: each action it was to carry out that was blocked, refused or
    failed (the guardrail re-checks the job first: one recreated under its name is another job), in the approver's
    language; "" when every one was carried out or there was none. An approver told only "approved" believed it
    done."""
    from agent.graph.report import action_label, outcome_text, status_label

    lines = []
    for o in (getattr(result, "state", None) or {}).get("outcomes", []):
        if o.get("status") in ("executed", "skipped"):
            continue
        said = outcome_text(o["action"], o["status"], o.get("detail") or "", o.get("reason") or "", lang)
        said = markdown_text(said)  # the reason quotes the cluster (a job's name)
        lines.append(_t(lang, f" Not carried out: {o['action']} {markdown_text(o['target'])} was {o['status']}"
                              f"{f' ({said})' if said else ''}.",
                        f" 未执行：{action_label(o['action'], 'zh')} {markdown_text(o['target'])}"
                        f"{status_label(o['status'], 'zh')}{f'（{said}）' if said else ''}。"))
    return "".join(lines)


@dataclass
class ChatCommands:
    service_provider: Callable[[], StewardService]
    directory: UserDirectory
    answer: Answer | None = None
    approvals_url: str = ""  # the web UI's approvals page, named when a chat answer is refused

    def handle(self, platform: str, chat_id: str, text: str) -> str:
        """One message from `chat_id` on `platform` ("dingtalk" / "wecom"); the reply text."""
        if "\x00" in text:
            # No record can hold it (Postgres text refuses NUL; the API refuses it with a 422): refused as said, on
            # SQLite and Postgres alike, before anything is parsed or written.
            return _t(language_of(text.replace("\x00", "")),
                      "Not taken: the message holds a NUL character (U+0000), which nothing can record; send it "
                      "again without it.", "未受理：消息中含有 NUL 字符（U+0000），无法记录；请去掉后重新发送。")
        text = re.sub(r"^@\S+\s+", "", text.strip())  # a leading @robot mention
        command = re.sub(r"^@\S+\s+", "", normalised(text).strip())
        lang = language_of(text)
        keep = parse_keep(command)
        if keep is not None:
            return self._keep(platform, chat_id, keep, lang)
        decided = ANSWER_COMMAND.match(command)
        if decided:
            decision = _DECISIONS[decided.group(1).lower()]
            if platform in UNSIGNED_SENDERS:
                return self._refuse_unsigned(platform, chat_id, decision, decided.group(2), lang)
            return self._answer(platform, chat_id, decision, decided.group(2), decided.group(3).strip(), lang)
        if (tried := _ANSWER_TRIED.match(command)) is not None:
            if platform in UNSIGNED_SENDERS:
                return self._refuse_unsigned(platform, chat_id, _DECISIONS[tried.group(1).lower()], "", lang)
            return _t(lang, "Not taken: to answer a request, write `approve <id> [reason]` or `deny <id> [reason]`, "
                            "e.g. `approve apr_1a2b3c`.",
                      "未受理：处理审批请回复 `批准 <编号> [原因]` 或 `拒绝 <编号> [原因]`，例如 `批准 apr_1a2b3c`。")
        user = self.directory.cluster_user(platform, chat_id)
        if self.answer is not None and (reply := self.answer(text, user, lang)) is not None:
            return reply
        return findings_summary(self.service_provider(), lang, platform)

    def _answer(self, platform: str, chat_id: str, decision: Literal["approve", "deny"], approval_id: str,
                reason: str, lang: str) -> str:
        if not self.directory.is_approver(platform, chat_id):
            deps = self.service_provider().deps
            if (approval := deps.approvals.get(approval_id)) is not None:
                audit_refused_answer(deps.audit, approval, at=deps.clock.now(), run_id=f"chatops-{platform}",
                                     decision=decision, reason=f"answer from {platform}:{chat_id} refused: not an approver",
                                     claimed_sender=chat_id)
            return _t(lang, "Only approvers can answer approval requests.", "只有审批人可以处理审批请求。")
        by = f"{platform}:{self.directory.cluster_user(platform, chat_id)}"
        service = self.service_provider()
        if service.deps.approvals.get(approval_id) is None:
            return _t(lang, f"No approval request {approval_id}.", f"没有编号为 {approval_id} 的审批请求。")
        en, zh = _PLATFORM_NAMES.get(platform, (platform, platform))
        try:
            result = service.answer(approval_id, decision, by=by, reason=reason or _t(lang, f"via {en}", f"通过{zh}"))
        except ApprovalError as exc:
            return _t(lang, f"Not taken: {exc}", f"未受理：{exc.zh}")
        done = service.deps.approvals.get(approval_id)
        status = done.status if done else decision
        return _t(lang, f"{approval_id}: {status} by {by}.",
                  f"{approval_id}：已由 {by} {'批准' if status == 'approved' else '拒绝' if status == 'denied' else '处理'}。") \
            + not_carried_out(result, lang)

    def _refuse_unsigned(self, platform: str, chat_id: str, decision: str, approval_id: str, lang: str) -> str:
        """Audited and refused: anyone holding one captured callback could send this text under any sender id."""
        deps = self.service_provider().deps
        approval = deps.approvals.get(approval_id)
        if approval is not None:
            audit_refused_answer(deps.audit, approval, at=deps.clock.now(), run_id=f"chatops-{platform}",
                                 decision=decision, claimed_sender=chat_id,
                                 reason=f"{decision} through {platform} refused: its callbacks do not sign the sender")
        where = f" ({self.approvals_url})" if self.approvals_url else ""
        en, zh = _PLATFORM_NAMES.get(platform, (platform, platform))
        return _t(lang, f"Not taken: approvals cannot be answered by a {en} message, because {en} does not sign who "
                        "sent it. Use the Approve / Deny buttons on the approval card, or the approvals page of the "
                        f"web UI{where}.",
                  f"未受理：无法通过{zh}消息处理审批，因为{zh}不对发送者签名。请使用审批卡片上的“批准 / 拒绝”按钮，"
                  f"或网页界面的审批页面{where}。")

    def _keep(self, platform: str, chat_id: str, request: KeepRequest | str, lang: str) -> str:
        # An approver's keep (any job, up to 30 days) is an approver's power: not taken from a platform that does
        # not sign who sent the message, any more than an approval is. There, everyone keeps as an owner.
        user = self.directory.cluster_user(platform, chat_id)
        approver = self.directory.is_approver(platform, chat_id)
        unsigned = platform in UNSIGNED_SENDERS
        en, zh = _PLATFORM_NAMES.get(platform, (platform, platform))
        return grant_keep(self.service_provider().deps, request, user=user, approver=approver and not unsigned,
                          by=f"{platform}:{user}", run_id=f"chatops-{platform}", lang=lang, data={"chat_id": chat_id},
                          not_as_approver=(f" An approver's keep is not taken from a {en} message ({en} does not "
                                           "sign who sent it): use WeCom or the web UI.",
                                           f"审批人的保留不通过{zh}消息受理（{zh}不对发送者签名），请使用企业微信或网页界面。")
                          if approver and unsigned else None)


@dataclass(frozen=True)
class KeepRequest:
    """`keep 4h`, `keep 4h <job> <reason>`, `keep <job> for 4h <reason>`, `保留 4小时 ...`, parsed."""

    seconds: float
    duration: str
    job: str | None  # the word that may name the job (checked against the cluster), else None
    words: list[str]  # the rest: the reason, and the job word when it names no job


_KEEP_WORD = re.compile(r"^(?:keep|保留)(?=\s|$|\d)\s*(.*)$", re.IGNORECASE | re.DOTALL)
_WITH_UNIT = re.compile(r"^\d+(?:\.\d+)?[smhd]$", re.IGNORECASE)
_FILLER = {"for", "please", "请", "再"}


def parse_keep(text: str) -> KeepRequest | str | None:
    """None when `text` is not a keep command; a string (the offending words) when it has no valid duration.

    The duration is the first word with a unit (`4h`, `30m`, `4 hours`, `4小时`), else a plain number of
    seconds written right after `keep`; the job is the word just before the duration (`keep <job> 4h`) or
    just after it (`keep 4h <job> ...`), and whatever the cluster does not know as a job stays in the reason.
    """
    found = _KEEP_WORD.match(text.strip())
    if found is None:
        return None
    rest = spoken_units(found.group(1))
    words = rest.split()
    at = next((i for i, w in enumerate(words) if _WITH_UNIT.match(w)), None)
    if at is None and words and re.fullmatch(r"\d+(?:\.\d+)?", words[0]):
        at = 0
    if at is None:
        return " ".join(words[:2])
    duration = words[at]
    before = [w for w in words[:at] if w.lower() not in _FILLER]
    after = words[at + 1:]
    job: str | None
    if before:
        job, reason = before[0], before[1:] + after
    else:
        job, reason = (after[0], after[1:]) if after else (None, [])
    return KeepRequest(seconds=parse_duration(duration.lower()), duration=duration, job=job, words=reason)


_LIVE_STATES = ("running", "pending")
JOB_STATE_ZH = {"pending": "排队中", "running": "运行中", "stopping": "停止中", "completed": "已完成", "failed": "已失败",
                "cancelled": "已取消"}


def grant_keep(deps: StewardDeps, request: KeepRequest | str, *, user: str, approver: bool, by: str, run_id: str,
               lang: str, context_job: str | None = None, data: dict[str, Any] | None = None,
               not_as_approver: tuple[str, str] | None = None) -> str:
    """The one path for an owner's or approver's `keep` (ChatOps and the web chat): the reply text.

    Granted only for a job the cluster runs now (running or pending), to its owner (up to a day) or an
    approver (up to 30 days); the exemption is an audit entry the guardrail reads. A refusal is audited too
    (a `decision` entry, action `keep`, status `refused`), never as an exemption. `not_as_approver` (English,
    Chinese) is added to a refusal an approver's rights would have avoided, when they were not taken.
    """
    now = deps.clock.now()

    def refuse(target: str | None, en: str, zh: str) -> str:
        # Not a guardrail rule: the steward could not take the keep as said; the audit says so in both languages.
        deps.audit.record("decision", at=now, run_id=run_id, target=target, action="keep", status="refused",
                          reason=en, data={"by": by, "reason_zh": f"未受理保留：{zh}", **(data or {})})
        return _t(lang, en, zh)

    if isinstance(request, str):
        return refuse(None, f"Not kept: a keep needs a duration, e.g. `keep 4h <job> <reason>` (“{request or 'keep'}” "
                            f"gives none).",
                      f"未保留：保留需要时长，例如 `保留 4h <作业> <原因>`（“{request or '保留'}”没有给出时长）。")
    try:
        return _keep_job(deps, request, user, by, lang, run_id, approver, not_as_approver, context_job, data, now,
                         refuse)
    except StoreUnavailable as exc:  # the audit log could not be written: nothing was kept, and the refusal is not
        log.warning("keep from chat not taken: %s", exc)  # recorded either (the same store)
        return _t(lang, f"Not kept: the steward's records cannot be written just now ({exc.problem.reason}); nothing "
                        "was recorded. Say it again in a minute, or ask an approver to keep it in the web UI.",
                  f"未保留：巡检服务的记录暂时无法写入（{exc.problem.reason}），未作任何记录。请一分钟后再说一次，或请审批人在网页上保留。")
    except Exception as exc:  # noqa: BLE001 - the cluster could not be read: told, audited, never a 500
        log.warning("keep from chat not taken: the cluster could not be read: %s", exc)
        return refuse(getattr(request, "job", None) or context_job,
                      "Not kept: the cluster could not be read just now (the scheduler did not answer); nothing was "
                      "recorded. Say it again in a minute, or ask an approver to keep it in the web UI.",
                      "未保留：暂时无法读取集群（调度器未响应），未作任何记录。请一分钟后再说一次，或请审批人在网页上保留。")


def _keep_job(deps: StewardDeps, request: KeepRequest, user: str, by: str, lang: str, run_id: str, approver: bool,
              not_as_approver: tuple[str, str] | None, context_job: str | None, data: dict | None, now: datetime,
              refuse: Callable[[str | None, str, str], str]) -> str:
    """The keep itself, once the request parsed (see the caller)."""
    job = deps.scheduler.get_job(request.job) if request.job else None
    words = request.words if job is not None or request.job is None else [request.job, *request.words]
    if job is None and request.job and "/" in request.job:  # plainly a job name the cluster does not know
        return refuse(request.job, f"No job {request.job} runs now, so there is nothing to keep.",
                      f"当前没有作业 {request.job} 在运行，无需保留。")
    if job is None and context_job:
        job = deps.scheduler.get_job(context_job)
        if job is None:
            return refuse(context_job, f"No job {context_job} runs now, so there is nothing to keep.",
                          f"当前没有作业 {context_job} 在运行，无需保留。")
    if job is None:
        owned = [j for j in deps.scheduler.list_jobs() if j.user == user and j.state in _LIVE_STATES]
        warned = {e.target for e in deps.audit.entries(kind="execution", status="executed",
                                                       since=now - timedelta(days=1), limit=1000)
                  if e.action == "notify"}
        candidates = [j for j in owned if j.id in warned] or owned
        if len(candidates) != 1:
            names = ", ".join(j.id for j in candidates[:5])
            return refuse(None, f"Which job? Say `keep {request.duration} <job> <reason>` (yours: {names or 'none'}).",
                          f"请指明作业：`保留 {request.duration} <作业> <原因>`（你的作业：{names or '无'}）。")
        job = candidates[0]
    # A job still stopping ignored or is handling its SIGTERM: a keep holds off the forced stop that may follow.
    if job.state not in (*_LIVE_STATES, "stopping"):
        return refuse(job.id, f"{job.id} is {job.state} already, so there is nothing to keep.",
                      f"{job.id} {JOB_STATE_ZH.get(job.state, job.state)}，无需保留。")
    extra_en, extra_zh = not_as_approver or ("", "")
    if job.user != user and not approver:
        return refuse(job.id, f"Only {job.user} (the owner) or an approver can keep {job.id}.{extra_en}",
                      f"只有作业所有者 {job.user} 或审批人可以保留 {job.id}。{extra_zh}")
    limit = APPROVER_MAX_KEEP_S if approver else OWNER_MAX_KEEP_S
    if request.seconds < MIN_KEEP_S or request.seconds > limit:
        more = (extra_en, extra_zh) if request.seconds > limit else ("", "")
        return refuse(job.id, f"A keep lasts at least {format_duration(MIN_KEEP_S)} and at most "
                              f"{format_duration(limit)}.{more[0]}",
                      f"保留时长须至少 {format_duration(MIN_KEEP_S)}、不超过 {format_duration(limit)}。{more[1]}")
    reason = " ".join(words) or ("通过聊天保留" if lang == "zh" else "kept from chat")
    until = now + timedelta(seconds=request.seconds)
    deps.audit.record("exemption", at=now, run_id=run_id, target=job.id, status="granted", reason=reason,
                      data={"until": until.isoformat(), "by": by, "target_uid": job.uid or None, **(data or {})})
    from agent.planning.policy_model import owner_time  # the owner's zone, as the warning they answer

    stopping = job.state == "stopping"
    return _t(lang, f"OK: {job.id} is kept until {owner_time(until, deps.policy, 'en')} ({reason}). The steward "
                    "will not stop it before then." + (" It was already asked to stop (SIGTERM), which cannot be "
                                                       "taken back: the keep holds off a forced stop." if stopping else ""),
              f"好的：{job.id} 将保留至 {owner_time(until, deps.policy, 'zh')}（{reason}），在此之前不会被停止。"
              + ("它此前已收到停止请求（SIGTERM），这无法撤回：保留只会推迟强制停止。" if stopping else ""))
