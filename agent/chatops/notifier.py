"""ChatOpsNotifier: the Notifier that routes owner warnings to DingTalk and/or WeCom under the delivery policy."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from agent.chatops import dingtalk, wecom
from agent.chatops.delivery import DeliveryPolicy, dedupe_key
from agent.chatops.directory import UserDirectory
from agent.chatops.webhook import WebhookError, quoted, redact
from agent.config.policy import Policy
from agent.config.settings import Settings
from core.cluster import NotifyResult
from core.text import one_line
from tools.protocols import Clock, JobScheduler

log = logging.getLogger("steward.chatops")


@dataclass
class Route:
    """Where one team's messages go; per-project routes replace the defaults."""

    dingtalk: dingtalk.DingTalkRobot | None = None
    wecom: wecom.WeComRobot | None = None


def routes_from_settings(settings: Settings, client: httpx.Client | None = None) -> tuple[Route, dict[str, Route]]:
    """The default route and the per-project ones (STEWARD_CHATOPS_ROUTES) from settings."""
    channels = set(settings.chatops_channels or ["dingtalk", "wecom"])

    def route(ding_url: str | None, ding_secret: str | None, wecom_url: str | None) -> Route:
        return Route(
            dingtalk=dingtalk.DingTalkRobot(ding_url, ding_secret, client=client)
            if ding_url and "dingtalk" in channels else None,
            wecom=wecom.WeComRobot(wecom_url, client=client) if wecom_url and "wecom" in channels else None,
        )

    secret = settings.dingtalk_secret.get_secret_value() if settings.dingtalk_secret else None
    default = route(settings.dingtalk_webhook_url, secret, settings.wecom_webhook_url)
    per_project = {project: route(r.get("dingtalk_webhook_url"), r.get("dingtalk_secret", secret),
                                  r.get("wecom_webhook_url"))
                   for project, r in settings.chatops_routes.items()}
    return default, per_project


def as_dingtalk_markdown(body: str) -> str:
    """Each line of `body` as its own paragraph (DingTalk joins single newlines). The body's lines are the
    steward's; the cluster's or a model's text in them was made one line of plain text where it was inserted
    (core.text.markdown_text: warning_message, the model's note, the digest), so no line here is an attacker's."""
    return "\n\n".join(line for line in body.splitlines() if line.strip())


@dataclass
class ChatOpsNotifier:
    """Implements tools.protocols.Notifier; `sent` -> executed, `suppressed`/`deferred` -> skipped, `error` -> failed."""

    clock: Clock
    policy: Policy
    default: Route
    per_project: dict[str, Route] = field(default_factory=dict)
    directory: UserDirectory = field(default_factory=UserDirectory)
    jobs: JobScheduler | None = None  # to find a job's project for routing
    delivery: DeliveryPolicy | None = None

    def __post_init__(self) -> None:
        self.delivery = self.delivery or DeliveryPolicy(self.policy)

    @classmethod
    def from_settings(cls, settings: Settings, *, clock: Clock, policy: Policy, jobs: JobScheduler | None = None,
                      client: httpx.Client | None = None) -> ChatOpsNotifier:
        default, per_project = routes_from_settings(settings, client)
        return cls(clock=clock, policy=policy, default=default, per_project=per_project,
                   directory=UserDirectory.from_settings(settings), jobs=jobs)

    def route_for(self, job_id: str | None) -> Route:
        job = self.jobs.get_job(job_id) if self.jobs is not None and job_id else None
        if job is not None and job.project in self.per_project:
            return self.per_project[job.project]
        return self.default

    def notify(self, recipient: str, subject: str, body: str, *, job_id: str | None = None,
               deadline: datetime | None = None, target_uid: str | None = None) -> NotifyResult:
        """`deadline`: the message is a warning announcing a stop, one the guardrail decided to give (a first one,
        one about a new stretch of waste or after a keep lapsed, a repeat): it is never dropped as a duplicate here
        (DeliveryPolicy.verdict). Sent when any channel accepted it, whatever the others answered."""
        assert self.delivery is not None
        now = self.clock.now()
        key = dedupe_key(job_id, recipient, body, target_uid)
        verdict = self.delivery.verdict(key, now, announces_stop=deadline is not None)
        if verdict == "suppress":
            return NotifyResult(recipient=recipient, status="suppressed", channel="chatops",
                                detail="already told about this job and violation in this period")
        if verdict == "defer":
            return NotifyResult(recipient=recipient, status="deferred", channel="chatops",
                                detail="outside working hours; sent at the next sweep within them")
        sent, errors = self._send(self.route_for(job_id), recipient, subject, body)
        if sent:
            self.delivery.sent(key, now)
            return NotifyResult(recipient=recipient, status="sent", channel="+".join(sent), detail="; ".join(errors))
        return NotifyResult(recipient=recipient, status="error", channel="chatops",
                            detail="; ".join(errors) or "no DingTalk or WeCom webhook configured")

    def _send(self, route: Route, recipient: str, subject: str, body: str) -> tuple[list[str], list[str]]:
        """(channels that accepted the message, an error per channel that did not). Each channel is tried whatever
        the one before it answered: one that fails (an HTML page from a proxy, a timeout, a refusal) fails alone."""
        attempts: list[tuple[str, Callable[[], Any]]] = []
        if route.dingtalk is not None:
            staff, mobile = self.directory.chat_id("dingtalk", recipient), self.directory.mobile(recipient)
            # The title is the push preview, plain text: one line (a job's name in it holds anything).
            message = dingtalk.markdown_message(one_line(subject), as_dingtalk_markdown(body), at_user_ids=[staff] if staff else [],
                                                at_mobiles=[mobile] if mobile and not staff else [])
            attempts.append(("dingtalk", lambda: route.dingtalk.send(message)))  # type: ignore[union-attr]
        if route.wecom is not None:
            userid = self.directory.chat_id("wecom", recipient)
            card = wecom.markdown_message(body, mention_user_ids=[userid] if userid else [])
            attempts.append(("wecom", lambda: route.wecom.send(card)))  # type: ignore[union-attr]
        sent, errors = [], []
        for name, send in attempts:
            try:
                send()
                sent.append(name)
            except WebhookError as exc:  # says what the webhook answered, without its URL or token
                log.warning("%s message to %s failed: %s", name, recipient, exc)
                errors.append(f"{name}: {exc}")
            except Exception as exc:  # noqa: BLE001 - a channel's own fault must not cost the others their message
                said = quoted(redact(str(exc), *_webhook_secrets(route)))
                log.warning("%s message to %s failed: %s: %s", name, recipient, type(exc).__name__, said)
                errors.append(f"{name}: {type(exc).__name__}: {said}")
        return sent, errors


def _webhook_secrets(route: Route) -> tuple[str, ...]:
    """The route's webhook URLs and signing secret: kept out of any error text."""
    found = [getattr(robot, name, None) for robot in (route.dingtalk, route.wecom) for name in ("webhook_url", "secret")]
    return tuple(s for s in found if isinstance(s, str) and s)
