"""What people can say to the robot: `keep 4h <reason>`, `approve <id>`, `deny <id>`, or any question."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, Protocol

from agent.chatops.directory import UserDirectory
from agent.detectors.evidence import describe, kind_label
from agent.graph.deps import StewardDeps
from agent.records.approvals import ApprovalError
from core.actions import Finding
from core.durations import format_duration, parse_duration

Answer = Callable[[str, str, str], str]  # (question, user, language) -> reply
OWNER_MAX_KEEP_S = 24 * 3600.0  # an owner may pause the steward on their job for a day; approvers up to 30 days
APPROVER_MAX_KEEP_S = 30 * 86400.0
_CJK = re.compile(r"[\u4e00-\u9fff]")
_KEEP = re.compile(r"^(?:keep|保留)\s+(\S+)\s*(.*)$", re.IGNORECASE | re.DOTALL)
_ANSWER = re.compile(r"^(approve|deny|批准|拒绝)\s+(\S+)\s*(.*)$", re.IGNORECASE | re.DOTALL)
_DECISIONS: dict[str, Literal["approve", "deny"]] = {"approve": "approve", "deny": "deny", "批准": "approve",
                                                      "拒绝": "deny"}


class StewardService(Protocol):
    """SweepService or the server's StewardRuntime: deps and a once-only answer()."""

    deps: StewardDeps

    def answer(self, approval_id: str, decision: Literal["approve", "deny"], by: str, reason: str = "") -> Any:
        ...


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


def findings_summary(service: StewardService, lang: str) -> str:
    """The default answer: a deterministic list of what the steward sees now."""
    findings = current_findings(service)
    if not findings:
        return _t(lang, "No waste found right now.", "当前未发现浪费。")
    head = _t(lang, f"{len(findings)} finding(s) now:", f"当前发现 {len(findings)} 项：")
    if lang == "zh":
        lines = [f"- {f.target}：{kind_label(f.kind, lang)}。{describe(f, lang)}" for f in findings[:10]]
    else:
        lines = [f"- {f.target}: {f.kind}. {f.evidence}" for f in findings[:10]]
    tail = _t(lang, "Reply `keep 4h <reason>` to keep your job, `approve <id>` / `deny <id>` to answer a request.",
              "回复 `keep 4h 原因` 可暂缓你的作业；审批人回复 `approve <id>` / `deny <id>` 处理审批。")
    return "\n".join([head, *lines, tail])


@dataclass
class ChatCommands:
    service_provider: Callable[[], StewardService]
    directory: UserDirectory
    answer: Answer | None = None

    def handle(self, platform: str, chat_id: str, text: str) -> str:
        """One message from `chat_id` on `platform` ("dingtalk" / "wecom"); the reply text."""
        text = re.sub(r"^@\S+\s+", "", text.strip())  # a leading @robot mention
        lang = language_of(text)
        keep = _KEEP.match(text)
        if keep:
            return self._keep(platform, chat_id, keep.group(1), keep.group(2).strip(), lang)
        decided = _ANSWER.match(text)
        if decided:
            decision = _DECISIONS[decided.group(1).lower()]
            return self._answer(platform, chat_id, decision, decided.group(2), decided.group(3).strip(), lang)
        user = self.directory.cluster_user(platform, chat_id)
        if self.answer is not None:
            return self.answer(text, user, lang)
        return findings_summary(self.service_provider(), lang)

    def _answer(self, platform: str, chat_id: str, decision: Literal["approve", "deny"], approval_id: str,
                reason: str, lang: str) -> str:
        if not self.directory.is_approver(platform, chat_id):
            return _t(lang, "Only approvers can answer approval requests.", "只有审批人可以处理审批请求。")
        by = f"{platform}:{self.directory.cluster_user(platform, chat_id)}"
        service = self.service_provider()
        if service.deps.approvals.get(approval_id) is None:
            return _t(lang, f"No approval request {approval_id}.", f"没有编号为 {approval_id} 的审批请求。")
        try:
            service.answer(approval_id, decision, by=by, reason=reason or f"via {platform}")
        except ApprovalError as exc:
            return _t(lang, f"Not taken: {exc}", f"未受理：{exc}")
        done = service.deps.approvals.get(approval_id)
        status = done.status if done else decision
        return _t(lang, f"{approval_id}: {status} by {by}.", f"{approval_id}：已由 {by} {'批准' if decision == 'approve' else '拒绝'}（{status}）。")

    def _keep(self, platform: str, chat_id: str, duration: str, rest: str, lang: str) -> str:
        service = self.service_provider()
        deps = service.deps
        try:
            seconds = parse_duration(duration)
        except ValueError:
            return _t(lang, f"`{duration}` is not a duration; try `keep 4h <reason>`.",
                      f"`{duration}` 不是有效时长，例如 `keep 4h 原因`。")
        user = self.directory.cluster_user(platform, chat_id)
        words = rest.split()
        job = deps.scheduler.get_job(words[0]) if words else None
        if job is not None:
            words = words[1:]
        else:
            owned = [j for j in deps.scheduler.list_jobs() if j.user == user and j.state in ("running", "pending")]
            warned = {e.target for e in deps.audit.entries(kind="execution", status="executed",
                                                           since=deps.clock.now() - timedelta(days=1), limit=1000)
                      if e.action == "notify"}
            candidates = [j for j in owned if j.id in warned] or owned
            if len(candidates) != 1:
                names = ", ".join(j.id for j in candidates[:5]) or _t(lang, "none", "无")
                return _t(lang, f"Which job? Say `keep {duration} <job> <reason>` (yours: {names}).",
                          f"请指明作业：`keep {duration} <作业> <原因>`（你的作业：{names}）。")
            job = candidates[0]
        approver = self.directory.is_approver(platform, chat_id)
        if job.user != user and not approver:
            return _t(lang, f"Only {job.user} (the owner) or an approver can keep {job.id}.",
                      f"只有作业所有者 {job.user} 或审批人可以保留 {job.id}。")
        limit = APPROVER_MAX_KEEP_S if approver else OWNER_MAX_KEEP_S
        if seconds <= 0 or seconds > limit:
            return _t(lang, f"A keep lasts more than 0 and at most {format_duration(limit)}.",
                      f"保留时长须大于 0 且不超过 {format_duration(limit)}。")
        reason = " ".join(words) or _t(lang, "kept from chat", "通过聊天保留")
        now = deps.clock.now()
        until = now + timedelta(seconds=seconds)
        by = f"{platform}:{user}"
        deps.audit.record("exemption", at=now, run_id=f"chatops-{platform}", target=job.id, status="granted",
                          reason=reason, data={"until": until.isoformat(), "by": by, "chat_id": chat_id})
        return _t(lang, f"OK: {job.id} is kept until {until:%Y-%m-%d %H:%M} UTC ({reason}). The steward will not "
                        "stop it before then.",
                  f"好的：{job.id} 将保留至 {until:%Y-%m-%d %H:%M} UTC（{reason}），在此之前不会被停止。")
