"""The scheduled cost digest (issue 16, part 6): the markdown report of the period before each cron instant,
posted once to the platform team's ChatOps route and audited.

Once per instant, across restarts and replicas: the digest for an instant is keyed `digest-<instant>` in the audit
log, only the sweep leader posts, and an instant that already has a sent entry is never posted again. A failed
post is tried again after `retry_s`, for as long as the instant is still the latest one; an instant more than
`catch_up_s` old when first seen (a server that was down, a fresh install) is skipped, not posted late.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING

from agent.graph.cost_report import render_markdown
from agent.records.usage import build_report

if TYPE_CHECKING:
    from agent.graph.deps import StewardDeps

log = logging.getLogger(__name__)

RECIPIENT = "oncall"  # the default ChatOps route: the platform team's group (as incident messages)
KIND = "digest"
# A digest is about the week that just ended: one that could not go out within a day is stale, not late.
CATCH_UP_S = 86400.0
RETRY_S = 600.0


class DigestError(ValueError):
    """A digest schedule that cannot be used (bad cron expression, non-positive period)."""


class DigestSchedule:
    def __init__(self, cron: str, *, period_s: float = 7 * 86400.0, language: str = "en", zone: tzinfo = UTC,
                 catch_up_s: float = CATCH_UP_S, retry_s: float = RETRY_S) -> None:
        from croniter import croniter

        if not croniter.is_valid(cron):
            raise DigestError(f"STEWARD_DIGEST_CRON {cron!r} is not a valid cron expression (e.g. '0 9 * * 1': "
                              "Mondays 09:00 UTC)")
        if period_s <= 0:
            raise DigestError(f"digest period must be positive, got {period_s!r}")
        self.cron, self.period_s, self.language, self.zone = cron, period_s, language, zone
        self.catch_up_s, self.retry_s = catch_up_s, retry_s
        self._done: datetime | None = None  # the newest instant already settled (sent, or skipped as stale)
        self._retry_at: datetime | None = None

    def instant(self, now: datetime) -> datetime:
        """The newest cron instant at or before `now` (cluster time, UTC)."""
        from croniter import croniter

        nxt = croniter(self.cron, now - timedelta(seconds=1)).get_next(datetime)
        return nxt if nxt <= now else croniter(self.cron, now).get_prev(datetime)

    @staticmethod
    def key(instant: datetime) -> str:
        return f"digest-{instant:%Y%m%dT%H%M%SZ}"

    def tick(self, deps: StewardDeps, now: datetime, is_leader: Callable[[], bool]) -> str:
        """Post the digest for the newest instant if it is due here; what happened: not_due, stale, done,
        not_leader, retry_later, sent, failed."""
        due = self.instant(now)
        if self._done is not None and due <= self._done:
            return "not_due"
        if (now - due).total_seconds() > self.catch_up_s:
            self._done = due
            return "stale"
        if self._retry_at is not None and now < self._retry_at:
            return "retry_later"
        key = self.key(due)
        if deps.audit.entries(kind=KIND, run_id=key, status="executed", limit=1):
            self._done = due  # another replica, or this one before a restart, posted it
            return "done"
        if not is_leader():
            return "not_leader"
        report = build_report(deps.audit, due - timedelta(seconds=self.period_s), due)
        body = render_markdown(report, self.language, zone=self.zone)
        subject = "GPU 成本周报" if self.language == "zh" else "GPU cost digest"
        result = deps.notifier.notify(RECIPIENT, subject, body)
        sent = result.status == "sent"
        deps.audit.record(KIND, at=now, run_id=key, target=RECIPIENT, action="post_digest",
                          status="executed" if sent else ("failed" if result.status == "error" else "skipped"),
                          reason=f"digest {result.status} via {result.channel}: {result.detail}".rstrip(": "),
                          data={"since": report.since.isoformat(), "until": due.isoformat(), "message": body,
                                "sweeps": report.sweeps, "language": self.language})
        if sent:
            self._done, self._retry_at = due, None
            return "sent"
        self._retry_at = now + timedelta(seconds=self.retry_s)
        log.warning("digest for %s not delivered (%s); trying again after %s", due, result.detail, self._retry_at)
        return "failed"
