"""Approval cards: when the runtime opens an approval, post it with signed approve/deny links."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, tzinfo
from typing import Any

from agent.chatops import dingtalk, wecom
from agent.chatops.directory import UserDirectory
from agent.chatops.links import ApprovalLinks
from agent.chatops.notifier import Route
from agent.chatops.webhook import WebhookError
from agent.detectors.evidence import describe
from agent.graph.report import action_label, approval_why
from agent.records.approvals import Approval
from core.actions import Finding
from core.text import markdown_text
from core.zones import zone_suffix

log = logging.getLogger("steward.chatops")

_EN_ACTION = {"force_terminate": "forced stop of", "terminate": "graceful stop of", "resize_pool": "resize of pool",
              "notify": "warning to"}
# Text from a job or a model (a target's name, a reason that quotes a log) must not become a link, an image, a
# mention or a line of its own in a card an approver taps: core.text.markdown_text shows it as text.
_plain = markdown_text


def card_text(approval: Approval, language: str, finding: Finding | None = None,
              zone: tzinfo = UTC) -> tuple[str, str]:
    """(title, markdown) for one approval request. `finding`: the sweep's finding on the target, whose evidence
    the Chinese card shows in Chinese (the proposal keeps the detector's English); `zone`: the display time zone."""
    ga = approval.payload.get("guarded_action", {})
    proposal, decision = ga.get("proposal", {}), ga.get("decision", {})
    reason = _plain(proposal.get("reason", ""))
    target = _plain(approval.target)
    nodes = proposal.get("target_nodes")
    expires = f"{approval.expires_at.astimezone(zone):%Y-%m-%d %H:%M}{zone_suffix(zone, language)}"
    whom = ", ".join(approval.approvers)
    if language == "zh":
        size = f" → {nodes} 个节点" if nodes is not None else ""
        title = f"待审批：{action_label(approval.action, language)} {target}{size}"
        why = _plain(approval_why(approval.action, str(decision.get("rule") or "approval"),
                                  str(decision.get("reason") or ""), language))
        evidence = _plain(describe(finding, language, zone)) if finding is not None else ""
        text = (f"### {title}\n\n级别 {approval.level}。原因：{why}\n\n"
                + (f"依据：{evidence}\n\n" if evidence else "")
                + f"截止：{expires}（逾期未答复则本次请求失效，不会执行）\n\n请求编号：`{approval.id}`")
        if approval.round > 1:
            text += f"\n\n第 {approval.round} 次询问：之前的请求无人答复，浪费仍在。"
        if whom:
            text += f"\n\n请以下审批人处理：{'、'.join(approval.approvers)}"
    else:
        size = f" -> {nodes} nodes" if nodes is not None else ""
        title = f"Approval needed: {_EN_ACTION.get(approval.action, approval.action)} {target}{size}"
        text = (f"### {title}\n\nLevel {approval.level}. Why: {reason}\n\nAnswer by {expires} (unanswered by then, "
                f"this request lapses and nothing is done).\n\nRequest `{approval.id}`")
        if approval.round > 1:
            text += f"\n\nAsked for the {_ordinal(approval.round)} time: the earlier request went unanswered and " \
                    "the waste goes on."
        if whom:
            text += f"\n\nFor: {whom}"
    return title, text


def _proposal(approval: Approval) -> dict[str, Any]:
    return dict(approval.payload.get("guarded_action", {}).get("proposal", {}))


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def approval_card_listener(route: Route, links: ApprovalLinks, language: str = "en",
                           now_s: Callable[[], float] = time.time,
                           directory: UserDirectory | None = None, zone: tzinfo = UTC) -> Callable[[Any], None]:
    """A StewardRuntime listener: posts a card on each approval_requested event.

    A request addressed to an escalation group (policy approvals.escalation) is followed by a message that
    @-mentions that group's members (chat ids from `directory`; names without one are mentioned as given).
    """

    def chat_ids(platform: str, names: list[str]) -> list[str]:
        return [(directory.chat_id(platform, n) if directory else None) or n for n in names]

    def listener(event: Any) -> None:
        if getattr(event, "kind", None) != "approval_requested" or event.approval is None:
            return
        approval: Approval = event.approval
        state = getattr(getattr(event, "result", None), "state", None) or {}
        found = next((f for f in state.get("findings", []) if f.get("target") == approval.target
                      and f.get("kind") == _proposal(approval).get("finding_kind")), None)
        title, text = card_text(approval, language, Finding.model_validate(found) if found else None, zone)
        labels = ("批准", "拒绝") if language == "zh" else ("Approve", "Deny")
        # The buttons live as long as the request they answer ("Answer by" on the card), at least the configured
        # lifetime: they died an hour in while the card said four. An answered or expired request refuses them anyway.
        at = now_s()
        ttl = max(links.ttl_s, approval.expires_at.timestamp() - at)
        buttons = [(labels[0], links.url(approval.id, "approve", at, ttl_s=ttl)),
                   (labels[1], links.url(approval.id, "deny", at, ttl_s=ttl))]
        ding, wecom_robot = route.dingtalk, route.wecom
        # DingTalk does not sign who sent a reply, so only the card's buttons answer there; a WeCom app callback is
        # signed, so its users may also reply. WeCom's text card holds a few lines: the reason and the evidence.
        reply = (f"也可回复 `approve {approval.id}` 或 `deny {approval.id}`。" if language == "zh"
                 else f"Or reply `approve {approval.id}` / `deny {approval.id}`.")
        lines = [line for line in text.splitlines()[1:] if line.strip()]
        # WeCom cuts the card's text at 400 characters: the way to answer goes first, the evidence is what is cut.
        messages: list[tuple[str, dingtalk.DingTalkRobot | wecom.WeComRobot | None, dict[str, Any]]] = [
            ("dingtalk", ding, dingtalk.action_card(title, text, buttons)),
            ("wecom", wecom_robot, wecom.approval_card(title, lines[0] if lines else title,
                                                       "\n".join([reply, *lines[1:]]), buttons, links.public_url + "/")),
        ]
        if approval.approvers:  # route the question to its escalation group: @-mention each member
            ping = f"{approval.id}：{title}" if language == "zh" else f"{approval.id}: {title}"
            messages += [
                ("dingtalk", ding, dingtalk.markdown_message(
                    title, ping, at_user_ids=chat_ids("dingtalk", approval.approvers))),
                ("wecom", wecom_robot, wecom.markdown_message(
                    ping, mention_user_ids=chat_ids("wecom", approval.approvers))),
            ]
        for name, robot, message in messages:
            if robot is None:
                continue
            try:
                robot.send(message)
            except WebhookError as exc:  # refused, unreachable, or an answer that is not the platform's JSON
                log.warning("approval card for %s to %s failed: %s", approval.id, name, exc)

    return listener
