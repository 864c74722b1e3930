"""Approval cards: when the runtime opens an approval, post it with signed approve/deny links."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from agent.approvals import Approval
from agent.chatops import dingtalk, wecom
from agent.chatops.links import ApprovalLinks
from agent.chatops.notifier import Route

log = logging.getLogger("steward.chatops")


def card_text(approval: Approval, language: str) -> tuple[str, str]:
    """(title, markdown) for one approval request."""
    proposal = approval.payload.get("guarded_action", {}).get("proposal", {})
    reason = proposal.get("reason", "")
    expires = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
    if language == "zh":
        title = f"待审批：{approval.action} {approval.target}"
        text = (f"### {title}\n\n级别 {approval.level}。原因：{reason}\n\n截止：{expires}（逾期视为拒绝）\n\n"
                f"也可回复 `approve {approval.id}` 或 `deny {approval.id}`。")
    else:
        title = f"Approval needed: {approval.action} {approval.target}"
        text = (f"### {title}\n\nLevel {approval.level}. Why: {reason}\n\nAnswer by {expires} (silence is a no).\n\n"
                f"Or reply `approve {approval.id}` / `deny {approval.id}`.")
    return title, text


def approval_card_listener(route: Route, links: ApprovalLinks, language: str = "en",
                           now_s: Callable[[], float] = time.time) -> Callable[[Any], None]:
    """A StewardRuntime listener: posts a card on each approval_requested event."""

    def listener(event: Any) -> None:
        if getattr(event, "kind", None) != "approval_requested" or event.approval is None:
            return
        approval: Approval = event.approval
        title, text = card_text(approval, language)
        labels = ("批准", "拒绝") if language == "zh" else ("Approve", "Deny")
        buttons = [(labels[0], links.url(approval.id, "approve", now_s())),
                   (labels[1], links.url(approval.id, "deny", now_s()))]
        for name, send in (("dingtalk", route.dingtalk and (lambda: route.dingtalk.send(
                               dingtalk.action_card(title, text, buttons)))),
                           ("wecom", route.wecom and (lambda: route.wecom.send(
                               wecom.approval_card(title, text.splitlines()[2] if "\n" in text else text, buttons))))):
            if not send:
                continue
            try:
                send()
            except (dingtalk.DingTalkError, wecom.WeComError, httpx.HTTPError) as exc:
                log.warning("approval card for %s to %s failed: %s", approval.id, name, exc)

    return listener
