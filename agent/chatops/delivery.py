"""The notification policy: working hours in the team's timezone, and one message of advice per job and violation per
period. A warning announcing a stop is the guardrail's to repeat or not (its duplicate rule): never dropped here."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Literal

from agent.config.policy import Policy

Verdict = Literal["send", "defer", "suppress"]


def dedupe_key(job_id: str | None, recipient: str, body: str, target_uid: str | None = None) -> str:
    """Job (its uid: a namesake pod is another job, and its owner must be told) + violation: the templates' first
    line names both ("[GPU Steward] <job>: <what is wrong>")."""
    first = body.strip().splitlines()[0] if body.strip() else ""
    return f"{job_id or recipient}\x00{target_uid or ''}\x00{first}"


class DeliveryPolicy:
    """Decides send / defer / suppress for a message to a job's owner; remembers what went out."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._sent: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def verdict(self, key: str, now: datetime, *, announces_stop: bool = False) -> Verdict:
        """`announces_stop`: a warning stating a stop's deadline. The guardrail decided it is due (the first, one
        about a new stretch of waste, one after a keep lapsed: its duplicate rule holds back mere repeats) and no
        stop comes without it, so it is never suppressed: its first line (job + kind) is the same as the earlier
        warning's, and its deadline may be too (the end of a job's long-tail grace), yet it is a new warning."""
        rules = self.policy.notifications
        with self._lock:
            last = self._sent.get(key)
        if (not announces_stop and last is not None
                and now - last < timedelta(seconds=self.policy.warning.repeat_every)):
            return "suppress"
        if rules.holds(now):
            return "defer"
        return "send"

    def sent(self, key: str, now: datetime) -> None:
        with self._lock:
            self._sent[key] = now
            horizon = now - timedelta(seconds=self.policy.warning.repeat_every)
            for stale in [k for k, at in self._sent.items() if at < horizon]:
                del self._sent[stale]
