"""Pure incident logic: the Alertmanager v4 payload, grouping, blips vs sustained problems, impact, the message.

No I/O here: agent/alerts/store.py keeps incidents in SQLite and agent/alerts/intake.py sends and audits.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from core.observation import Observation
from core.text import markdown_text as shown

# An alert that resolves within this long of starting was a blip the cluster absorbed: recorded, nobody messaged.
TRANSIENT_S = 300.0
# One message per incident per this period, however often Alertmanager repeats it.
REPEAT_S = 4 * 3600.0
MAX_ALERTS = 500  # per payload; Alertmanager's webhook_config max_alerts should stay below it


# An alert's times are kept in UTC. Outside these bounds a time is the sender's error, and date arithmetic near
# year 1 or 9999 overflows; Alertmanager's endsAt of a firing alert is Go's zero time, which means "not ended".
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
NUL_REFUSED = "must not contain a NUL character (\\x00); the incident store cannot hold it"


def _utc(value: datetime) -> datetime:
    """A time zone-aware time within [EARLIEST, LATEST), in UTC."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("needs a time zone (Z or an offset such as +08:00): a time without one is ambiguous")
    try:
        value = value.astimezone(UTC)
    except OverflowError:
        value = ZERO_TIME if value.year < 2 else datetime.max.replace(tzinfo=UTC)
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"is out of range: an alert's time must lie between {EARLIEST:%Y-%m-%d} and "
                         f"{LATEST:%Y-%m-%d} UTC")
    return value


def _ends(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is not None and value == ZERO_TIME:
        return None  # still firing
    return None if value is None else _utc(value)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(NUL_REFUSED)
    return value


Time = Annotated[datetime, AfterValidator(_utc)]
Text = Annotated[str, AfterValidator(_no_nul)]  # Postgres text cannot hold NUL (SQLite can): refused on both


class Alert(BaseModel):
    """One alert of an Alertmanager webhook (the documented v4 schema), its times in UTC."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[Text, Text]
    annotations: dict[Text, Text] = {}
    startsAt: Time
    endsAt: Annotated[datetime | None, AfterValidator(_ends)] = None  # the zero time while firing: None
    generatorURL: str = ""
    fingerprint: Text = Field(min_length=1, max_length=64)


class _Envelope(BaseModel):
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


class AlertmanagerPayload(_Envelope):
    """The Alertmanager webhook body, version 4."""

    alerts: list[Alert] = Field(min_length=1, max_length=MAX_ALERTS)


class WebhookEnvelope(_Envelope):
    """The webhook body with its alerts not yet read: each is validated on its own (parse_webhook)."""

    alerts: list[Any] = Field(min_length=1, max_length=MAX_ALERTS)


class Rejected(BaseModel):
    """An alert of a webhook that was not taken: its place in `alerts`, the first field at fault and why."""

    index: int
    fingerprint: str | None = None
    alertname: str | None = None
    field: str
    reason: str


def error_field(error: Any, prefix: str = "") -> str:
    return ".".join(str(part) for part in (*((prefix,) if prefix else ()), *error["loc"])) or "body"


def parse_webhook(body: bytes | str) -> tuple[AlertmanagerPayload | None, list[Rejected]]:
    """The payload of the valid alerts (None when none is) and the rejected ones, each validated on its own, so
    one malformed alert does not lose the others. ValidationError when the envelope itself is not a v4 webhook."""
    envelope = WebhookEnvelope.model_validate_json(body)
    good: list[Alert] = []
    rejected: list[Rejected] = []
    for index, raw in enumerate(envelope.alerts):
        try:
            good.append(Alert.model_validate(raw))
        except ValidationError as exc:
            first = exc.errors()[0]
            labels = raw.get("labels") if isinstance(raw, dict) else None
            name = labels.get("alertname") if isinstance(labels, dict) else None
            fingerprint = raw.get("fingerprint") if isinstance(raw, dict) else None
            rejected.append(Rejected(
                index=index, field=error_field(first, f"alerts.{index}"), reason=str(first["msg"])[:300],
                fingerprint=_shown(fingerprint), alertname=_shown(name)))
    if not good:
        return None, rejected
    return AlertmanagerPayload(**envelope.model_dump(exclude={"alerts"}), alerts=good), rejected


def _shown(value: object) -> str | None:
    """A sender's value named in a rejection: text only, bounded, without NUL."""
    return value.replace("\x00", "\\x00")[:200] if isinstance(value, str) else None


def subject_of(labels: dict[str, str]) -> str:
    """What the alert is about: its node (dcgm-exporter's Hostname, kube-state-metrics' node), else its pool."""
    node = labels.get("node") or labels.get("Hostname")
    if node:
        return f"node/{node}"
    pool = labels.get("pool")
    return f"pool/{pool}" if pool else "cluster"


def incident_key(labels: dict[str, str]) -> str:
    """Alerts about the same problem on the same node (or pool) are one incident: (alertname, node or pool), as a
    JSON array (printable and unambiguous; Postgres text cannot hold the NUL separator of old keys)."""
    return json.dumps([labels.get("alertname", "?"), subject_of(labels)], ensure_ascii=False)


def legacy_incident_key(labels: dict[str, str]) -> str:
    """The key before the JSON form, NUL-separated: still found in SQLite stores written by earlier versions."""
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
    started = view.started.astimezone(UTC) if view.started.tzinfo else view.started.replace(tzinfo=UTC)
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
             (f"层级：{shown(view.layer)}；自 {started:%Y-%m-%d %H:%M} UTC 起持续；{view.alerts} 条告警（已去重）" if zh
              else f"Layer: {shown(view.layer)}; firing since {started:%Y-%m-%d %H:%M} UTC; {view.alerts} alert(s), deduplicated"),
             (f"影响：{affected}" if zh else f"Impact: {affected}")]
    if view.evidence:
        lines.append("证据：" if zh else "Evidence:")
        lines.extend(f"- {shown(e)}" for e in view.evidence[:5])
    if view.runbook:
        lines.append(f"处置手册 [rb:{shown(view.runbook)}] 前几步：" if zh else f"Runbook [rb:{shown(view.runbook)}], first steps:")
        lines.extend(f"{i}. {s}" for i, s in enumerate(view.steps, 1))
    lines.extend(view.investigation)
    return title, "\n".join(lines)
