"""Alertmanager webhooks in, incidents out: record, group, tell the on-call once per incident, audit each step."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from agent.alerts.incidents import (
    REPEAT_S,
    TRANSIENT_S,
    AlertmanagerPayload,
    IncidentView,
    first_steps,
    impact,
    incident_key,
    render,
    sustained,
    transient,
)
from agent.alerts.investigate import Investigation, Investigator, build, cordon_plan, render_lines
from agent.alerts.store import Incident, IncidentStore
from agent.records.audit import AuditLog
from agent.retrieval.runbooks import Runbook, load_runbooks
from core.observation import Observation
from tools.protocols import Notifier

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
            return [self._settle(incident, now) for incident in self.store.open_incidents()]

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
        result = self.notifier().notify(ONCALL, subject, body)
        if result.status != "sent":
            self.store.release_message(incident.id, incident.notified_at)
        self._audit(incident, now, "executed" if result.status == "sent" else
                    ("failed" if result.status == "error" else "skipped"),
                    f"incident message {result.status} via {result.channel}: {result.detail}".rstrip(": "),
                    jobs=[j.id for j in jobs or []], runbook=view.runbook, message=body,
                    investigation=found.model_dump(mode="json") if found else None)
        return {**out, "outcome": f"message_{result.status}", "jobs": [j.id for j in jobs or []]}

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
