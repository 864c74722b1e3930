"""Pure incident logic: the Alertmanager v4 payload, grouping, blips vs sustained problems, impact, the message.

No I/O here: agent/alerts/store.py keeps incidents in SQLite and agent/alerts/intake.py sends and audits.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.observation import Observation
from core.text import markdown_text as shown

# An alert that resolves within this long of starting was a blip the cluster absorbed: recorded, nobody messaged.
TRANSIENT_S = 300.0
# One message per incident per this period, however often Alertmanager repeats it.
REPEAT_S = 4 * 3600.0
MAX_ALERTS = 500  # per payload; Alertmanager's webhook_config max_alerts should stay below it


class Alert(BaseModel):
    """One alert of an Alertmanager webhook (the documented v4 schema)."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = {}
    startsAt: datetime
    endsAt: datetime | None = None  # Alertmanager sends 0001-01-01T00:00:00Z while firing
    generatorURL: str = ""
    fingerprint: str = Field(min_length=1, max_length=64)


class AlertmanagerPayload(BaseModel):
    """The Alertmanager webhook body, version 4."""

    model_config = ConfigDict(extra="ignore")

    version: Literal["4"]
    groupKey: str
    status: Literal["firing", "resolved"]
    receiver: str
    groupLabels: dict[str, str] = {}
    commonLabels: dict[str, str] = {}
    commonAnnotations: dict[str, str] = {}
    externalURL: str = ""
    truncatedAlerts: int = 0
    alerts: list[Alert] = Field(min_length=1, max_length=MAX_ALERTS)


def subject_of(labels: dict[str, str]) -> str:
    """What the alert is about: its node (dcgm-exporter's Hostname, kube-state-metrics' node), else its pool."""
    node = labels.get("node") or labels.get("Hostname")
    if node:
        return f"node/{node}"
    pool = labels.get("pool")
    return f"pool/{pool}" if pool else "cluster"


def incident_key(labels: dict[str, str]) -> str:
    """Alerts about the same problem on the same node (or pool) are one incident: (alertname, node or pool)."""
    return f"{labels.get('alertname', '?')}\x00{subject_of(labels)}"


def transient(starts: datetime, ends: datetime, transient_s: float = TRANSIENT_S) -> bool:
    return ends - starts < timedelta(seconds=transient_s)


def sustained(starts: datetime, now: datetime, transient_s: float = TRANSIENT_S) -> bool:
    """A still-firing alert is a sustained problem once it has lasted `transient_s`."""
    return now - starts >= timedelta(seconds=transient_s)


class AffectedJob(BaseModel):
    id: str
    user: str
    project: str | None
    gpus: int
    node: str | None


def impact(subject: str, obs: Observation | None) -> list[AffectedJob] | None:
    """Running jobs on the incident's node (or any node of its pool) in the latest reading; None with no reading."""
    if obs is None:
        return None
    kind, _, name = subject.partition("/")
    if kind == "node":
        nodes = {name}
    elif kind == "pool":
        nodes = {n.name for n in obs.nodes if n.pool == name}
    else:
        return []
    return [AffectedJob(id=j.id, user=j.user, project=j.project, gpus=j.gpus, node=j.node)
            for j in obs.jobs if j.node in nodes and j.state == "running"]


def first_steps(remedies: str, n: int = 2) -> list[str]:
    """The first `n` numbered steps of a runbook's remedies section, one line each."""
    steps: list[str] = []
    for line in remedies.splitlines():
        stripped = line.strip()
        head, dot, rest = stripped.partition(". ")
        if dot and head.isdigit():
            steps.append(rest)
        elif steps and stripped and not stripped[0].isdigit() and len(steps) <= n:
            steps[-1] += " " + stripped
        if len(steps) > n:
            break
    return steps[:n]


class IncidentView(BaseModel):
    """What a message is made of."""

    id: int
    alertname: str
    subject: str
    severity: str
    layer: str
    started: datetime
    alerts: int
    summary: str
    evidence: list[str]
    runbook: str | None
    steps: list[str]
    jobs: list[AffectedJob] | None
    investigation: list[str] = []  # agent/alerts/investigate.py render_lines, already in the message's language


def render(view: IncidentView, language: str) -> tuple[str, str]:
    """(subject, body) of the incident's one ChatOps message, in English or Chinese. It is markdown in a chat: the
    cluster's text in it (a job's name, user or project; an alert's labels and annotations) is written as text."""
    zh = language == "zh"
    jobs = view.jobs
    teams = sorted({shown(j.project or j.user) for j in jobs or []})
    if jobs is None:
        affected = "影响未知：尚无集群读数" if zh else "impact unknown: no cluster reading yet"
    elif not jobs:
        affected = "没有正在运行的作业受影响" if zh else "no running jobs affected"
    else:
        listed = ", ".join(f"{shown(j.id)} ({shown(j.user)}{'/' + shown(j.project) if j.project else ''}, {j.gpus} GPU)"
                           for j in jobs[:10])
        more = f" +{len(jobs) - 10}" if len(jobs) > 10 else ""
        affected = (f"{len(jobs)} 个作业，团队 {', '.join(teams)}：{listed}{more}" if zh
                    else f"{len(jobs)} job(s), teams {', '.join(teams)}: {listed}{more}")
    title = f"[GPU Steward] {shown(view.severity.upper())} {shown(view.alertname)} {shown(view.subject)}"
    lines = [title, "",
             (f"摘要：{shown(view.summary)}" if zh else f"Summary: {shown(view.summary)}"),
             (f"层级：{shown(view.layer)}；自 {view.started:%Y-%m-%d %H:%M} UTC 起持续；{view.alerts} 条告警（已去重）" if zh
              else f"Layer: {shown(view.layer)}; firing since {view.started:%Y-%m-%d %H:%M} UTC; {view.alerts} alert(s), deduplicated"),
             (f"影响：{affected}" if zh else f"Impact: {affected}")]
    if view.evidence:
        lines.append("证据：" if zh else "Evidence:")
        lines.extend(f"- {shown(e)}" for e in view.evidence[:5])
    if view.runbook:
        lines.append(f"处置手册 [rb:{shown(view.runbook)}] 前几步：" if zh else f"Runbook [rb:{shown(view.runbook)}], first steps:")
        lines.extend(f"{i}. {s}" for i, s in enumerate(view.steps, 1))
    lines.extend(view.investigation)
    return title, "\n".join(lines)
