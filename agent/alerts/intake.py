"""Alertmanager webhooks in, incidents out: record, group, tell the on-call once per incident, audit each step."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from agent.alerts.incidents import (
    REPEAT_S,
    TRANSIENT_S,
    AffectedJob,
    AlertmanagerPayload,
    IncidentView,
    Rejected,
    first_steps,
    impact,
    incident_key,
    render,
    sustained,
    transient,
)
from agent.alerts.investigate import Investigation, Investigator, build, cordon_plan, render_lines
from agent.alerts.store import Incident, IncidentStore, StoredAlert
from agent.records.audit import AuditLog
from agent.records.store import StoreUnavailable
from agent.retrieval.runbooks import Runbook, load_runbooks
from core.cluster import NotifyResult
from core.observation import Observation
from tools.protocols import Notifier

log = logging.getLogger("steward.alerts")

ONCALL = "oncall"  # the recipient of incident messages: the default ChatOps route (the platform team's group)


class AlertIntake:
    def __init__(self, store: IncidentStore, *, notifier: Callable[[], Notifier], audit: Callable[[], AuditLog],
                 observation: Callable[[], Observation | None], language: str = "en",
                 runbooks: list[Runbook] | None = None, transient_s: float = TRANSIENT_S,
                 repeat_s: float = REPEAT_S, investigator: Investigator | None = None) -> None:
        self.store, self.notifier, self.audit, self.observation = store, notifier, audit, observation
        self.investigator = investigator
        self.language, self.transient_s, self.repeat_s = language, transient_s, repeat_s
        books = runbooks if runbooks is not None else load_runbooks()
        self.books: dict[tuple[str, str], Runbook] = {(b.id, b.language): b for b in books}
        self.by_alert = {name: b.id for b in books for name in b.alerts}
        self._lock = threading.Lock()

    def receive(self, payload: AlertmanagerPayload, now: datetime) -> list[dict[str, object]]:
        """Record the payload's alerts and settle every open incident; what happened to each, for the reply."""
        with self._lock:
            for alert in payload.alerts:
                self.store.add(incident_key(alert.labels), alert)
            return [self._settle_one(incident, now) for incident in self.store.open_incidents()]

    def refuse(self, rejected: list[Rejected], received: int, now: datetime, group: str = "") -> None:
        """Audit the alerts of a webhook that were not taken (the reply lists them too)."""
        if not rejected:
            return
        listed = "; ".join(f"{r.field}: {r.reason}" for r in rejected[:5])
        self.audit().record("alert_rejected", at=now, run_id=f"alerts-{now:%Y%m%dT%H%M%S}", action="receive_alert",
                            status="skipped", reason=f"{len(rejected)} of {received} alert(s) refused: {listed}"[:1000],
                            data={"received": received, "group_key": group[:300],
                                  "rejected": [r.model_dump() for r in rejected[:100]]})

    def _settle_one(self, incident: Incident, now: datetime) -> dict[str, object]:
        """One incident settled; one that cannot be (a bad stored time, a bug) is logged and audited, and the
        others are settled all the same. A store that is down is not one incident's problem: it is raised."""
        try:
            return self._settle(incident, now)
        except StoreUnavailable:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
            log.exception("alert incident %s (%s %s) could not be settled", incident.id, incident.alertname,
                          incident.subject)
            self._audit(incident, now, "failed", f"incident could not be settled: {error}")
            return {"incident": incident.id, "alertname": incident.alertname, "subject": incident.subject,
                    "outcome": "error", "error": error}

    def _settle(self, incident: Incident, now: datetime) -> dict[str, object]:
        alerts = self.store.alerts(incident.id)
        firing = [a for a in alerts if a.status == "firing"]
        out: dict[str, object] = {"incident": incident.id, "alertname": incident.alertname,
                                  "subject": incident.subject, "alerts": len(alerts)}
        if not firing:
            ends = max((a.ends_at or now for a in alerts), default=now)
            blip = incident.notified_at is None and all(
                transient(a.starts_at, a.ends_at or now, self.transient_s) for a in alerts)
            outcome = "transient" if blip else "resolved"
            if self.store.close(incident.id, ends, outcome):
                self._audit(incident, now, "skipped" if blip else "resolved",
                            "resolved within the transient window: no message" if blip else "all alerts resolved")
            return {**out, "outcome": outcome}
        starts = min(a.starts_at for a in firing)
        if not sustained(starts, now, self.transient_s):
            return {**out, "outcome": "waiting", "message_due": starts + timedelta(seconds=self.transient_s)}
        if not self.store.claim_message(incident.id, now, now - timedelta(seconds=self.repeat_s)):
            return {**out, "outcome": "already_told"}
        try:
            jobs, view, found, body, result = self._message(incident, starts, firing)
        except BaseException as exc:  # the slot goes back whatever failed, so the next webhook tries again
            self.store.release_message(incident.id, incident.notified_at)
            if not isinstance(exc, Exception):
                raise
            error = f"{type(exc).__name__}: {exc}"[:300]
            log.exception("alert incident %s (%s %s): its message failed", incident.id, incident.alertname,
                          incident.subject)
            self._audit(incident, now, "failed", f"incident message failed: {error}")
            return {**out, "outcome": "message_error", "error": error}
        if result.status != "sent":
            self.store.release_message(incident.id, incident.notified_at)
        self._audit(incident, now, "executed" if result.status == "sent" else
                    ("failed" if result.status == "error" else "skipped"),
                    f"incident message {result.status} via {result.channel}: {result.detail}".rstrip(": "),
                    jobs=[j.id for j in jobs or []], runbook=view.runbook, message=body,
                    investigation=found.model_dump(mode="json") if found else None)
        return {**out, "outcome": f"message_{result.status}", "jobs": [j.id for j in jobs or []]}

    def _message(self, incident: Incident, starts: datetime, firing: list[StoredAlert]
                 ) -> tuple[list[AffectedJob] | None, IncidentView, Investigation | None, str, NotifyResult]:
        """The incident's message built and handed to the notifier (its slot already claimed)."""
        jobs = impact(incident.subject, self.observation())
        book = self._runbook(incident)
        view = IncidentView(
            id=incident.id, alertname=incident.alertname, subject=incident.subject, severity=incident.severity,
            layer=incident.layer, started=starts, alerts=len(firing), summary=incident.summary,
            evidence=[f"{a.labels.get('alertname', '?')} {_evidence(a.labels)} {a.annotations.get('description', '')}"
                      .strip() for a in firing],
            runbook=book.id if book else incident.runbook,
            steps=first_steps(book.sections["remedies"]) if book else [], jobs=jobs)
        found = self._investigate(incident, book)
        if found is not None:
            view.investigation = render_lines(found, self.language)
        subject, body = render(view, self.language)
        return jobs, view, found, body, self.notifier().notify(ONCALL, subject, body)

    def _investigate(self, incident: Incident, book: Runbook | None) -> Investigation | None:
        """Jobs on the incident's node, their progress and the runbook's cordon through the guardrail."""
        kind, _, node = incident.subject.partition("/")
        if self.investigator is None or kind != "node":
            return None
        proposes = frozenset(book.proposes) if book else frozenset()
        plan = cordon_plan(node, proposes, f"incident {incident.id}: {incident.alertname} on {node}")
        try:
            obs, findings, decided = self.investigator(plan, book.id if book else incident.runbook, proposes)
        except Exception as exc:  # the message still goes out, saying the investigation failed and why
            return Investigation(node=node, error=f"{type(exc).__name__}: {exc}"[:300])
        return build(node, obs, findings, decided, proposes)

    def _runbook(self, incident: Incident) -> Runbook | None:
        book_id = incident.runbook or self.by_alert.get(incident.alertname)
        if book_id is None:
            return None
        return self.books.get((book_id, self.language)) or self.books.get((book_id, "en"))

    def _audit(self, incident: Incident, now: datetime, status: str, reason: str, **data: object) -> None:
        self.audit().record("alert_incident", at=now, run_id=f"incident-{incident.id}", target=incident.subject,
                            action="notify_incident", status=status, reason=reason,
                            data={"incident": incident.id, "alertname": incident.alertname,
                                  "severity": incident.severity, "layer": incident.layer, **data})


def _evidence(labels: dict[str, str]) -> str:
    shown = ("gpu", "xid", "UUID", "model_name", "namespace", "reason", "value")
    return " ".join(f"{k}={labels[k]}" for k in shown if k in labels)
