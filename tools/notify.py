"""Notifiers: where warnings and approval requests go. The recording one backs the simulator only."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime

from core.cluster import NotifyResult
from tools.protocols import Clock


@dataclass
class SentMessage:
    at: datetime
    recipient: str
    subject: str
    body: str
    job_id: str | None
    message_id: str


@dataclass
class RecordingNotifier:
    """Keeps every message in memory (the simulator's and the tests' inbox)."""

    clock: Clock
    sent: list[SentMessage] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)

    def notify(self, recipient: str, subject: str, body: str, *, job_id: str | None = None,
               deadline: datetime | None = None, target_uid: str | None = None) -> NotifyResult:
        message_id = f"msg-{next(self._ids)}"
        self.sent.append(SentMessage(self.clock.now(), recipient, subject, body, job_id, message_id))
        return NotifyResult(recipient=recipient, status="sent", channel="inbox", message_id=message_id)


@dataclass
class NoChannelNotifier:
    """What a real cluster gets when no channel reaches owners: every message fails, saying why.

    A warning nobody received is no warning, so the guardrail refuses stops (levels >= 2) with this reason.
    """

    reason: str = "no notification channel configured (set STEWARD_SMTP_HOST, or DingTalk/WeCom webhooks)"

    def notify(self, recipient: str, subject: str, body: str, *, job_id: str | None = None,
               deadline: datetime | None = None, target_uid: str | None = None) -> NotifyResult:
        return NotifyResult(recipient=recipient, status="error", channel="none", detail=self.reason)
