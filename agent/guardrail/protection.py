"""Whether a job is protected from the steward, and which policy rule protects it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from agent.config.policy import Policy
from core.actions import DeniedAnswer, History, KeptAt, last_keep
from core.cluster import JobInfo, job_gang, names_job


def as_utc(moment: datetime) -> datetime:
    """An aware UTC datetime; naive ones are taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def when(moment: datetime) -> str:
    """A time as operators read it in messages: 2024-05-01 14:30 UTC."""
    moment = as_utc(moment)
    fmt = "%Y-%m-%d %H:%M:%S UTC" if moment.second else "%Y-%m-%d %H:%M UTC"
    return moment.strftime(fmt)


def _norm(value: str) -> str:
    return value.strip().lower()


def _matching(wanted: dict[str, str], actual: dict[str, str]) -> tuple[str, str] | None:
    """The first (key, value) of `wanted` that `actual` carries; values compare case-insensitively."""
    for key, value in wanted.items():
        if key in actual and _norm(actual[key]) == _norm(value):
            return key, actual[key]
    return None


def protection_reason(job: JobInfo, policy: Policy, history: History, now: datetime) -> str | None:
    """Why `job` must not be touched (naming the rule), or None when nothing protects it."""
    rules = policy.protection
    if job.scheduler == "slurm" and job.waiting == "SUSPENDED":
        return "suspended by Slurm (SUSPENDED): it resumes where it stopped"
    # On Slurm by its partition/jobname too (names_job): another job's name never unprotects it. The entry that
    # matched is named (gpu/train for gpu/train-11).
    listed = job.id if job.id in rules.jobs else next((name for name in rules.jobs if names_job(name, job)), None)
    if listed is not None:
        return f"job {listed} is listed in protection.jobs"
    if job.namespace in rules.namespaces:
        return f"namespace {job.namespace!r} is in protection.namespaces"
    if job.namespace in rules.partitions:
        return f"partition {job.namespace!r} is in protection.partitions"
    if job.user in rules.users:
        return f"user {job.user!r} is in protection.users"
    if job.project is not None and job.project in rules.projects:
        return f"project {job.project!r} is in protection.projects"
    if job.project is not None and job.project in rules.accounts:
        return f"account {job.project!r} is in protection.accounts"
    if job.qos is not None and job.qos in rules.qos:
        return f"QOS {job.qos!r} is in protection.qos"
    if job.priority in rules.priorities:
        return f"priority {job.priority!r} is in protection.priorities"
    label = _matching(rules.labels, job.labels)
    if label:
        return f"label {label[0]}={label[1]} is in protection.labels"
    annotation = _matching(rules.annotations, job.annotations)
    if annotation:
        return f"annotation {annotation[0]}={annotation[1]} is in protection.annotations"
    now = as_utc(now)
    kept = _keep_until(job, now)
    if kept:
        return kept
    # By the job's uid where the keep recorded it (a Slurm name-based id changes when a namesake comes, and a later
    # job under the kept one's name is not the job that was kept), else by name.
    live = [e for e in history.exemptions if _same_target(e.target, e.target_uid, job) and as_utc(e.until) > now]
    if live:
        # The longest-running exemption is the one the owner will ask about.
        exemption = max(live, key=lambda e: as_utc(e.until))
        why = f" ({exemption.reason})" if exemption.reason else ""
        return f"exempted by {exemption.by} until {when(exemption.until)}{why}"
    return None


def gang_protection(job: JobInfo, jobs: list[JobInfo], policy: Policy, history: History,
                    now: datetime) -> tuple[JobInfo, str] | None:
    """(a pod of `job`'s distributed job, why it is protected) when one is: a stop of any pod of the job ends the
    whole job (agent/detectors/gang.py), so a keep or a protection rule on one pod holds for every pod of it. `jobs`
    is what was read of the cluster (the job itself may be among them); the first protected live pod, by id."""
    for other in gang_siblings(job, jobs):
        why = protection_reason(other, policy, history, now)
        if why:
            return other, why
    return None


def gang_protection_reason(job: JobInfo, jobs: list[JobInfo], policy: Policy, history: History,
                           now: datetime) -> str | None:
    """gang_protection in words (naming the protected pod and its distributed job), or None."""
    found = gang_protection(job, jobs, policy, history, now)
    if found is None:
        return None
    other, why = found
    group = job_gang(job)
    label = f" ({group[0][1]}={group[0][2]})" if group is not None else ""
    return (f"{other.id}, a pod of the same distributed job{label}, is protected ({why}), and a stop of any pod "
            f"ends the whole job")


def exemption_reason(target: str, history: History, now: datetime) -> str | None:
    """Why a pool or a node (by name) is exempted now: an exemption the API or chat granted on it, in force."""
    now = as_utc(now)
    live = [e for e in history.exemptions if e.target == target and as_utc(e.until) > now]
    if not live:
        return None
    exemption = max(live, key=lambda e: as_utc(e.until))
    why = f" ({exemption.reason})" if exemption.reason else ""
    return f"exempted by {exemption.by} until {when(exemption.until)}{why}"


KEEP_UNTIL = "steward.io/keep-until"


def _same_target(target: str, target_uid: str | None, job: JobInfo) -> bool:
    """A record about `target` is about `job`: by uid when both have one and they match, else by name where a name
    is an identity only the owner's team can take: a Kubernetes pod's, in its namespace (a notebook recreated under
    its name is the notebook its owner kept), not a Slurm job's, which any user of the partition can choose (a
    later job named like a kept one is another user's job)."""
    if target_uid and job.uid and target_uid != job.uid:
        return target == job.id and job.scheduler == "kubernetes"
    # Recorded without a uid (it could not be read): by name, on Slurm whatever suffix a namesake adds (names_job).
    return names_job(target, job) or bool(target_uid and target_uid == job.uid)


def _annotated_until(job: JobInfo) -> datetime | None:
    """The time of the job's keep-until annotation; ValueError when it is there but unreadable."""
    raw = job.annotations.get(KEEP_UNTIL)
    if raw is None:
        return None
    try:
        return as_utc(datetime.fromisoformat(raw.strip().replace("Z", "+00:00")))
    except OverflowError as exc:  # 9999-12-31T23:59:59-23:59 parses, and overflows in UTC
        raise ValueError(f"{raw!r} is out of range") from exc


def _keep_until(job: JobInfo, now: datetime) -> str | None:
    """An owner's own time-boxed exemption, written on the pod as an ISO 8601 time."""
    try:
        until = _annotated_until(job)
    except ValueError:
        # Unreadable is not expired: protect, and say why, so the owner can fix it.
        return f"annotation {KEEP_UNTIL}={job.annotations.get(KEEP_UNTIL)!r} is not an ISO 8601 time; kept until it is fixed"
    return f"annotation {KEEP_UNTIL} keeps it until {when(until)}" if until is not None and until > now else None


def keep_answered_at(history: History, job: JobInfo | None, target: str, uid: str | None,
                     now: datetime, gang: Sequence[JobInfo] = ()) -> KeptAt | None:
    """When a keep last answered this job's warnings: an audited keep's grant (`last_keep`: its time and its place
    in the audit log), or a keep-until annotation's time once it has passed. A stop after it needs a warning sent
    since (`KeptAt.answers`: one recorded after the keep and not dated before it), with its full notice.

    `gang`: the other pods of its distributed job as read now. A keep on any of them answered this pod's warnings
    too (it protected the whole job: gang_protection), so once it lapses every pod needs a new warning and its notice."""
    marks = []
    for one, name, key in [(job, target, uid)] + [(o, o.id, o.uid or None) for o in gang_siblings(job, gang)]:
        kept = last_keep(history, name, key, one)
        if kept is not None:
            marks.append(kept)
        try:
            until = _annotated_until(one) if one is not None else None
        except ValueError:
            until = None  # unreadable: the job is kept (protection_reason), nothing lapsed
        if until is not None and until <= as_utc(now):
            marks.append(KeptAt(until))
    return KeptAt.latest(marks)


def gang_siblings(job: JobInfo | None, jobs: Sequence[JobInfo]) -> list[JobInfo]:
    """The other live pods of `job`'s distributed job (core.cluster.job_gang) among `jobs`, by id; [] for a job of
    its own."""
    gang = job_gang(job) if job is not None else None
    if job is None or gang is None:
        return []
    return [o for o in sorted(jobs, key=lambda j: j.id)
            if o.id != job.id and o.state in ("pending", "running", "stopping") and job_gang(o) == gang]


def denial_in_force(history: History, action: str, target: str, uid: str | None, now: datetime,
                    hold_s: float) -> DeniedAnswer | None:
    """The latest human denial of `action` on this target identity still holding at `now` (None: none holds).

    A denial recorded without a uid holds for any job of that name; one with a uid only for that very job.
    """
    if hold_s <= 0:
        return None
    start = as_utc(now) - timedelta(seconds=hold_s)
    held = [d for d in history.denials if d.action == action
            and ((d.target == target and (d.target_uid is None or uid is None or d.target_uid == uid))
                 or (d.target_uid is not None and d.target_uid == uid))  # that very job, under a new name too
            and start < as_utc(d.at) <= as_utc(now)]
    return max(held, key=lambda d: as_utc(d.at), default=None)
