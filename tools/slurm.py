"""SlurmScheduler: jobs, nodes, logs and stops on a real Slurm cluster, through squeue/scontrol/scancel/sacct.

Steward job ids are `partition/jobname`. When several listed jobs share one, each becomes
`partition/jobname-<slurm job id>`; the Slurm id is always in the label `slurm.job_id`.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from core.cluster import (
    SLURM_ARRAY_TASK_LABEL,
    SLURM_HET_JOB_LABEL,
    SLURM_JOB_ID_LABEL,
    JobInfo,
    LogLine,
    NodeInfo,
    NodesUnknown,
    StopResult,
)
from tools.slurm_cli import SlurmCli, SlurmError
from tools.slurm_logs import LogNotRead, expand_output_path, tail_log
from tools.slurm_parse import (
    SlurmJob,
    SlurmParseError,
    SlurmQueryError,
    TextListing,
    gpu_type,
    gpus_in_gres,
    jobs_from_json,
    read_text_listing,
    records,
    single_value,
    text_format,
)

log = logging.getLogger("steward.slurm")

JOB_ID_LABEL = SLURM_JOB_ID_LABEL
HET_JOB_LABEL = SLURM_HET_JOB_LABEL
ARRAY_TASK_LABEL = SLURM_ARRAY_TASK_LABEL  # an array task as squeue and scancel name it: 4242_7
_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<id>\d+(?:_(?:\d+|\[[^\]]*\]))?)$")
OutputMode = Literal["auto", "json", "text"]
_GONE_STATES = frozenset({"completed", "failed", "cancelled"})
JSON_RETRY_S = 600.0  # auto mode: after squeue --json failed (and text worked), JSON is tried again after this


class StepsUnknown(RuntimeError):
    """`squeue --steps` gave no answer: whether the job's work runs in steps is not known."""


def job_uid(job: SlurmJob) -> str:
    """The job's immutable identity: its Slurm id and when it was submitted (`slurm:25@1764690000`). The id alone
    repeats after slurmctld starts over with a fresh state directory (or the counter wraps), and a new job 25
    inherited the old one's warnings and stop. Without a submit time (squeue text without %V), the id alone."""
    if job.submitted_at is None:
        return f"slurm:{job.job_id}"
    return f"slurm:{job.job_id}@{int(job.submitted_at.timestamp())}"


def _refused(exc: SlurmError) -> bool:
    """Whether scancel said no for good (no right to signal the job), not "try again later"."""
    said = f"{exc.stderr} {exc}".lower()
    return any(word in said for word in ("permission", "denied", "invalid user", "not authorized"))


def _delivered_anyway(exc: SlurmError, sid: str) -> bool:
    """Whether a failed `scancel --signal` delivered its signal all the same: Slurm 22.05 answers a signal to an
    array task whose array still has pending tasks with exit 229 (ESLURM_TRANSITION_STATE_NO_UPDATE, 2021, as an
    exit status; at times no message, at times "Job can not be altered now") and delivers it (a real Slurm:
    tests/test_slurm_integration.py). Only those answers: any other failure (a controller that cannot be reached,
    a timeout, an error scancel printed with another status) delivered nothing, on an array task as on any job:
    the stop failed, and the job is not "ignoring SIGTERM"."""
    if "can not be altered" in f"{exc.stderr} {exc}".lower():
        return True
    return "_" in sid and exc.returncode == 229 and not _unreachable(exc)


def _unreachable(exc: SlurmError) -> bool:
    """Whether the failure says slurmctld was not reached (or answered nothing): nothing was delivered."""
    said = f"{exc.stderr} {exc}".lower()
    return any(word in said for word in ("unable to contact", "connection refused", "connect failure", "timed out",
                                         "socket timed out", "zero bytes were transmitted"))


def _base(job: SlurmJob) -> str:
    return f"{job.partition}/{job.name}"


def steward_ids(jobs: list[SlurmJob]) -> dict[str, SlurmJob]:
    """Steward id -> job; a `partition/jobname` shared by several jobs gets `-<job id>` on each of them. Unique
    whatever the names: when an id so made is also another job's (a job named `nb-100` beside two `nb`, 100 and
    101), every job that would have it gets its own job id added again (`gpu/nb-100-100`, `gpu/nb-100-200`), so no
    job's name can take another job's id, and each keeps its id as long as the same jobs are listed."""
    counts: dict[str, int] = {}
    for job in jobs:
        counts[_base(job)] = counts.get(_base(job), 0) + 1
    ids = {id(job): _base(job) if counts[_base(job)] == 1 else f"{_base(job)}-{job.job_id}" for job in jobs}
    for _ in range(len(jobs) + 1):
        shared = _shared(jobs, ids)
        if not shared:
            break
        for job in shared:
            ids[id(job)] = f"{ids[id(job)]}-{job.job_id}"
    # Names made to chain collisions on and on: each job still sharing an id takes its job id again until its id is
    # longer than any other, which no other job's can then equal (the job ids themselves are unique).
    for job in sorted(_shared(jobs, ids), key=lambda j: j.job_id):
        longest = max(len(other) for key, other in ids.items() if key != id(job))
        while len(ids[id(job)]) <= longest:
            ids[id(job)] = f"{ids[id(job)]}-{job.job_id}"
    return {ids[id(job)]: job for job in sorted(jobs, key=lambda j: j.job_id)}


def _shared(jobs: list[SlurmJob], ids: dict[int, str]) -> list[SlurmJob]:
    holders: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        holders.setdefault(ids[id(job)], []).append(job)
    return [job for held in holders.values() if len(held) > 1 for job in held]


def _is_steward_id_of(steward_id: str, job: SlurmJob) -> bool:
    """Whether `steward_id` is an id steward_ids can give this job: its partition/name, then `-<its id>` repeated."""
    rest, suffix = steward_id, f"-{job.job_id}"
    while rest.endswith(suffix):
        rest = rest.removesuffix(suffix)
        if rest == _base(job):
            return True
    return steward_id == _base(job)


class SlurmScheduler:
    """JobScheduler and LogSource over Slurm's CLIs: one squeue per sweep, scontrol for nodes and log paths."""

    def __init__(self, cli: SlurmCli | None = None, *, output: OutputMode = "auto", stop_settle_s: float = 2.0,
                 clock: Any = None, json_retry_s: float = JSON_RETRY_S, monotonic: Any = None) -> None:
        if output not in ("auto", "json", "text"):
            raise ValueError(f"output must be auto, json or text, got {output!r}")
        self.cli = cli or SlurmCli()
        self.output: OutputMode = output
        self.stop_settle_s = stop_settle_s
        self._now = clock or (lambda: datetime.now(UTC))
        self._jobs: dict[str, SlurmJob] = {}  # steward id -> job, from the latest squeue
        # Job uid (one run of one job) -> when we sent it SIGTERM. Not the Slurm id: a job that requeues itself on
        # SIGTERM, or an id slurmctld hands out again, is a new run that was never signalled.
        self._stop_sent: dict[str, datetime] = {}
        self._stdout: dict[str, tuple[Path | None, str, int | None]] = {}  # job uid -> StdOut or why not, user uid
        self._by_slurm_id: dict[str, str] = {}
        self._listed = False  # whether any squeue has filled the two maps above
        self.json_retry_s = json_retry_s
        self._monotonic = monotonic or time.monotonic
        self._json_failed_at: float | None = None  # auto mode: when squeue --json last failed while text worked
        self._ambiguous: dict[str, str] = {}  # Slurm job id -> why the latest listing cannot say which job it is
        self._ambiguous_jobs: list[SlurmJob] = []  # the records behind it
        self._notes: list[str] = []  # what the latest listing left out, and why
        self._dropped: list[str] = []  # squeue records the latest listing could not read
        self._log_notes: dict[str, str] = {}  # steward id -> why its log was not read
        self._log_unread: dict[str, str] = {}  # of those, logs that exist but could not be read as the job's own

    @property
    def warnings(self) -> list[str]:
        """Why the latest listing, and the logs read since, may be incomplete: squeue records dropped because their
        fields did not check out, job ids listed twice (never acted on), logs not read. Each names the job."""
        return [*self._notes, *(f"log of {sid} not read: {why}" for sid, why in self._log_notes.items())]

    @property
    def calls(self) -> list[tuple[str, ...]]:
        """Every Slurm command run so far, e.g. ("squeue", "--json")."""
        return self.cli.calls

    # -- reading -----------------------------------------------------------------------------------
    def _note(self, text: str) -> None:
        if text not in self._notes:
            self._notes.append(text)
            log.warning("%s", text)

    def _squeue_text(self, *extra: str) -> list[SlurmJob]:
        """squeue's text output, each record framed by a marker made for this call (tools/slurm_parse.py)."""
        marker = f"SW{secrets.token_hex(8)}"
        listing: TextListing = read_text_listing(
            self.cli.run("squeue", "-h", "-o", text_format(marker), *extra).stdout, marker)
        for dropped in listing.dropped:
            self._note(dropped)
        self._dropped.extend(listing.dropped)
        return listing.jobs

    def _json_due(self) -> bool:
        failed = self._json_failed_at
        return failed is None or self._monotonic() - failed >= self.json_retry_s

    def _squeue(self, *extra: str) -> list[SlurmJob]:
        if self.output == "json" or (self.output == "auto" and self._json_due()):
            try:
                jobs = jobs_from_json(self.cli.run("squeue", "--json", *extra).stdout)
                self._json_failed_at = None
                return jobs
            except SlurmQueryError as exc:
                # Slurm could not list the jobs (slurmctld down) and its JSON says only "failed"; the text output
                # says why ("Unable to contact slurm controller"). Never a reason to give up on JSON.
                try:
                    return self._squeue_text(*extra)
                except SlurmError as text_exc:
                    raise text_exc from exc
            except (SlurmError, SlurmParseError) as exc:
                if self.output == "json":
                    raise
                # Perhaps this Slurm has no JSON output (older, or built without the serializer plugin): text, once
                # text works (a controller that is down fails both, and proves nothing), and JSON again after
                # json_retry_s: a JSON answer that failed once (a job's odd bytes) must not leave it in text for good.
                jobs = self._squeue_text(*extra)
                self._json_failed_at = self._monotonic()
                self._note(f"squeue --json failed, squeue text read instead: {str(exc)[:200]}")
                return jobs
        return self._squeue_text(*extra)

    def _refresh(self) -> dict[str, SlurmJob]:
        self._notes, self._log_notes, self._dropped = [], {}, []
        listed = self._squeue()
        # A job id in two records: one of them is not Slurm's (a name that made a row), and which one is unknown.
        # Neither is listed, mapped to metrics, warned about or stopped; the sweep's warnings say so.
        seen: dict[str, int] = {}
        for job in listed:
            seen[job.job_id] = seen.get(job.job_id, 0) + 1
        twice = {key for key, n in seen.items() if n > 1}
        self._ambiguous, self._ambiguous_jobs = {}, [j for j in listed if j.job_id in twice]
        for job in self._ambiguous_jobs:
                self._ambiguous[job.job_id] = (f"Slurm job {job.job_id} appears in more than one squeue record: "
                                               "which is Slurm's is unknown, so it is not judged or acted on")
        for why in dict.fromkeys(self._ambiguous.values()):
            self._note(why)
        self._jobs = steward_ids([j for j in listed if j.job_id not in self._ambiguous])
        if not self._dropped:  # a whole listing: a signalled run it no longer shows has ended (or was requeued)
            runs = {job_uid(j) for j in listed}
            self._stop_sent = {uid: at for uid, at in self._stop_sent.items() if uid in runs}
        # dcgm-exporter's hpc_job is SLURM_JOB_ID: an array task's own numeric id, mapped beside its <array>_<task>.
        by_key: dict[str, set[str]] = {}
        for sid, job in self._jobs.items():
            for key in (job.job_id, job.internal_id):
                if key:
                    by_key.setdefault(key, set()).add(sid)
        self._by_slurm_id = {key: next(iter(sids)) for key, sids in by_key.items() if len(sids) == 1}
        for key, sids in by_key.items():
            if len(sids) > 1:  # an hpc_job that names two listed jobs maps to neither
                self._note(f"Slurm job id {key} names {len(sids)} listed jobs ({', '.join(sorted(sids))}): "
                           "its GPU metrics are mapped to none of them")
        self._listed = True
        return self._jobs

    def steward_id_for(self, slurm_job_id: str) -> str | None:
        """The steward id of a Slurm job id (dcgm-exporter's `hpc_job` label), from the latest squeue.
        Pass it to PrometheusMetrics(job_id_for_hpc_job=...). A sweep lists jobs before it reads metrics, so
        the ids match the jobs it judges; metrics read before any listing take one (never an empty mapping)."""
        if not self._listed:
            self._refresh()
        return self._by_slurm_id.get(str(slurm_job_id).strip())

    def _info(self, steward_id: str, job: SlurmJob) -> JobInfo:
        state = job.steward_state
        asked = self._stop_sent.get(job_uid(job))
        if asked is not None and job.started_at is not None and job.started_at > asked:
            asked = None  # started after the signal (requeued under the same id and submit time): a new run
        if asked is not None and state == "running":
            state = "stopping"  # SIGTERM sent and the job has not exited (yet)
        return JobInfo(
            id=steward_id, uid=job_uid(job), scheduler="slurm", namespace=job.partition, name=job.name, user=job.user,
            project=job.account, qos=job.qos, gpus=job.gpus, node=job.nodes[0] if job.nodes else None,
            state=state, labels={JOB_ID_LABEL: job.internal_id or job.job_id, "slurm.nodes": ",".join(job.nodes),
                                 **({ARRAY_TASK_LABEL: job.job_id} if job.internal_id else {}),
                                 **({HET_JOB_LABEL: job.het_job_id} if job.het_job_id else {})},
            owner_kind="batch", started_at=job.started_at, stop_requested_at=asked,
            submitted_at=job.submitted_at, gpu_model=job.gpu_type or None,
            pending_reason=job.reason if state == "pending" else None,
            # Suspended by the scheduler (PreemptMode=SUSPEND, `scontrol suspend`): its processes are stopped and
            # resume where they were; it reads idle, and a stop would end work the scheduler only paused.
            waiting="SUSPENDED" if job.state.upper() == "SUSPENDED" else None,
        )

    def list_jobs(self) -> list[JobInfo]:
        """Running and pending jobs that hold or ask for GPUs: one squeue call."""
        return [self._info(sid, job) for sid, job in self._refresh().items()
                if job.gpus > 0 and job.steward_state not in _GONE_STATES]

    def _find(self, job_id: str, jobs: dict[str, SlurmJob]) -> SlurmJob | None:
        if "/" not in job_id or job_id.startswith("/") or job_id.endswith("/"):
            raise ValueError(f"a Slurm job id is partition/jobname (or partition/jobname-<id>), got {job_id!r}")
        if job_id in jobs:
            return jobs[job_id]
        # A suffixed id stays valid after its namesake finished and the suffix fell away (or a collision added one).
        suffixed = _SUFFIX.match(job_id)
        if suffixed is None:
            return None
        job = next((j for j in jobs.values() if j.job_id == suffixed["id"]), None)
        return job if job is not None and _is_steward_id_of(job_id, job) else None

    def _ambiguous_reason(self, job_id: str) -> str | None:
        """Why `job_id` may name a job the latest listing had in two records (None when it names no such job)."""
        suffixed = _SUFFIX.match(job_id)
        if suffixed is not None and suffixed["id"] in self._ambiguous:
            return self._ambiguous[suffixed["id"]]
        return next((self._ambiguous[j.job_id] for j in self._ambiguous_jobs if _is_steward_id_of(job_id, j)), None)

    def get_job(self, job_id: str) -> JobInfo | None:
        """Fresh state from a new squeue; None when Slurm no longer lists it."""
        job = self._find(job_id, self._refresh())
        return self._info(job_id, job) if job is not None else None

    def finished_job(self, slurm_job_id: str) -> dict[str, str] | None:
        """sacct's record of a finished job (State, ExitCode, End), None without accounting or record."""
        try:
            out = self.cli.run("sacct", "-n", "-P", "-X", "-j", slurm_job_id, "-o", "JobID,State,ExitCode,End")
        except SlurmError:
            return None  # no slurmdbd: "Slurm accounting storage is disabled"
        for line in out.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 4 and parts[0] == slurm_job_id:
                return dict(zip(("JobID", "State", "ExitCode", "End"), parts, strict=True))
        return None

    def list_nodes(self, *, for_removal: bool = False) -> list[NodeInfo]:
        """Nodes with their GRES gpu count; jobs on each come from the latest squeue (taken if none yet).
        for_removal: from a new squeue, and every job Slurm has given nodes that has not finished counts on them,
        whatever its state (CONFIGURING while its prolog runs or its nodes boot, COMPLETING, SUSPENDED) and whatever
        it asks for; NodesUnknown when that squeue could not be read whole (records dropped, a job id listed twice)."""
        if for_removal:
            jobs = self._refresh()
            unread = [*self._dropped, *dict.fromkeys(self._ambiguous.values())]
            if unread:
                more = f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""
                raise NodesUnknown(f"squeue could not be read whole: {unread[0]}{more}")
        else:
            jobs = self._jobs or self._refresh()
        on_node: dict[str, list[str]] = {}
        for sid, job in jobs.items():
            state = job.steward_state
            if state not in _GONE_STATES if for_removal else state in ("running", "stopping"):
                for node in job.nodes:
                    on_node.setdefault(node, []).append(sid)
        out = []
        for rec in records(self.cli.run("scontrol", "show", "nodes", "-o").stdout):
            name = rec.get("NodeName")
            if not name:
                continue
            gres = rec.get("Gres", "")
            partitions = [p for p in rec.get("Partitions", "").split(",") if p and p != "(null)"]
            out.append(NodeInfo(name=name, pool=partitions[0] if partitions else None, gpus=gpus_in_gres(gres),
                                gpu_model=gpu_type(gres), jobs=sorted(on_node.get(name, []))))
        return out

    # -- logs ---------------------------------------------------------------------------------------
    def _stdout_path(self, job: SlurmJob) -> tuple[Path | None, str, int | None]:
        """The job's StdOut file, or None and why. From squeue --json where it gives one; else from `scontrol show
        job -o`, only when StdOut appears there once (a name, comment, work dir or mail user can print another
        ` StdOut=` before or after Slurm's own)."""
        key = job_uid(job)
        if key not in self._stdout:
            path, why = self._find_stdout(job)
            self._stdout[key] = (path, why, job.user_id)
        return self._stdout[key]

    def _find_stdout(self, job: SlurmJob) -> tuple[Path | None, str]:
        raw, workdir = job.stdout, job.workdir
        if not raw:
            try:
                text = self.cli.run("scontrol", "show", "job", "-o", job.job_id).stdout.strip()
            except SlurmError as exc:
                return None, f"scontrol show job failed: {str(exc)[:200]}"  # purged from slurmctld: nothing to read
            raw = single_value(text, "StdOut")
            if raw is None:
                return None, "scontrol shows no single StdOut for the job (a job field holds another `StdOut=`)"
            workdir = workdir or single_value(text, "WorkDir")
            if job.user_id is None:
                uid = re.fullmatch(r"[^(]*\((\d+)\)", single_value(text, "UserId") or "")
                job.user_id = int(uid.group(1)) if uid else None
        if raw.lower() in ("(null)", "/dev/null"):
            return None, "the job writes no StdOut"
        path = Path(expand_output_path(raw, job_id=job.job_id, user=job.user, name=job.name,
                                       node=job.nodes[0] if job.nodes else None))
        if not path.is_absolute():
            if not workdir:
                return None, f"StdOut {raw!r} is relative and the job's work dir is unknown"
            path = Path(workdir) / path
        return path, ""

    def tail(self, job_id: str, since: datetime, until: datetime, limit: int = 200) -> list[LogLine]:
        """The job's StdOut lines in [since, until]; [] when the file is missing or not readable here, and when it
        is not the job's own: Slurm writes StdOut as the job's user, so a file another uid owns is never read (the
        reason is in `warnings`)."""
        self._log_notes.pop(job_id, None)
        self._log_unread.pop(job_id, None)
        if self._ambiguous_reason(job_id):
            return []
        job = self._find(job_id, self._jobs) or self._find(job_id, self._refresh())
        if job is None:
            return []
        path, why, owner = self._stdout_path(job)
        if path is None:
            if why and job.steward_state == "running":
                self._log_notes[job_id] = why
            return []
        owner = job.user_id if job.user_id is not None else owner
        if owner is None:
            self._log_notes[job_id] = self._log_unread[job_id] = (
                f"the uid of {job.user} is unknown, so {path} cannot be checked as theirs")
            return []
        try:
            return tail_log(path, since, until, limit, owner_uid=owner)
        except LogNotRead as exc:
            self._log_notes[job_id] = self._log_unread[job_id] = str(exc)
            log.warning("log of %s not read: %s", job_id, exc)
            return []

    def unread_log(self, job_id: str) -> str | None:
        """Why the job's log, which exists, was not read by the latest `tail` (not the job's own file, its user's
        uid unknown), else None: unknown, not empty (the detectors hold the stop for a person)."""
        return self._log_unread.get(job_id)

    # -- stopping -----------------------------------------------------------------------------------
    def _still_listed(self, slurm_id: str) -> SlurmJob | None:
        try:
            jobs = self._squeue("-j", slurm_id)
        except (SlurmError, SlurmQueryError) as exc:
            said = exc.stderr if isinstance(exc, SlurmError) else str(exc)
            if "invalid job id" in said.lower():
                return None  # already purged from slurmctld
            raise
        return next((j for j in jobs if j.job_id == slurm_id and j.steward_state not in _GONE_STATES), None)

    def _steps(self, slurm_id: str) -> list[str]:
        """The job's `srun` steps that run its work; none when its steps are only shells or watchers attached beside
        work running in the batch script (then the batch script is signalled). StepsUnknown when squeue gives no
        answer: "no steps" read from a timeout would send `--full`, and the step's srun kills it after KillWait."""
        try:
            return _step_ids(self.cli.run("squeue", "--steps", "--noheader", "--format=%i %j", "--jobs",
                                          slurm_id).stdout)
        except SlurmError as exc:
            raise StepsUnknown(str(exc)) from exc

    def _reread(self, job_id: str, job: SlurmJob) -> StopResult | None:
        """A fresh `squeue -j <its id>`: None when it gives exactly one record of the job, with the user, partition
        and account the listing judged; else the stop's answer (refused, or already_gone). A record another job's
        name made in a listing is not in this job's own."""
        try:
            fresh = [j for j in self._squeue("-j", job.job_id) if j.job_id == job.job_id]
        except (SlurmError, SlurmQueryError) as exc:
            said = exc.stderr if isinstance(exc, SlurmError) else str(exc)
            if "invalid job id" in said.lower():
                return StopResult(job=job_id, status="already_gone", detail=f"job {job.job_id} was purged meanwhile")
            raise
        if not fresh:
            return StopResult(job=job_id, status="already_gone", detail=f"squeue -j {job.job_id} lists it no more")
        if len(fresh) > 1:
            return StopResult(job=job_id, status="refused",
                              detail=f"not stopped: squeue -j {job.job_id} gave {len(fresh)} records of it, not one")
        now = fresh[0]
        if (now.user, now.partition, now.account) != (job.user, job.partition, job.account):
            return StopResult(job=job_id, status="refused", detail=(
                f"not stopped: {job_id} was listed as Slurm job {job.job_id} of user {job.user}, partition "
                f"{job.partition}, account {job.account}; squeue -j {job.job_id} says user {now.user}, partition "
                f"{now.partition}, account {now.account}"))
        return None

    def stop_job(self, job_id: str, *, force: bool, grace_s: float = 0.0, reason: str = "",
                 uid: str | None = None) -> StopResult:
        """Graceful: SIGTERM, which a job can trap to checkpoint; the guardrail waits grace_s before a force. To the
        job's `srun` steps when its work runs in them (`scancel --signal=TERM`): with `--full` the batch script's
        `srun` gets it too and answers by killing its step after KillWait, cutting the checkpoint short. Else
        (no steps, or only a shell or watcher attached beside it) to the batch script and its children (`--full`),
        where the work runs. Force: plain `scancel` (Slurm's own TERM,
        KillWait, KILL) and the job ends CANCELLED. Idempotent: a finished job is already_gone."""
        job = self._find(job_id, self._refresh())
        ambiguous = self._ambiguous_reason(job_id)
        if ambiguous:
            return StopResult(job=job_id, status="refused", detail=ambiguous)
        if job is None:
            return StopResult(job=job_id, status="already_gone", detail="Slurm no longer lists the job")
        if uid and uid != job_uid(job):
            return StopResult(job=job_id, status="refused",
                              detail=f"{job_id} is now Slurm job {job_uid(job).removeprefix('slurm:')}, not "
                                     f"{uid.removeprefix('slurm:')}")
        if job.steward_state in _GONE_STATES:
            return StopResult(job=job_id, status="already_gone", detail=f"job {job.job_id} is {job.state}")
        sid = job.job_id
        reread = self._reread(job_id, job)
        if reread is not None:
            return reread
        if force or job.steward_state == "pending":
            self.cli.run("scancel", sid)
            verb = "cancelled" if force else "removed from the queue"
        else:
            try:
                steps = self._steps(sid)
            except StepsUnknown as exc:
                return StopResult(job=job_id, status="error",
                                  detail=f"slurm job {sid} not signalled: its steps could not be read ({exc}); "
                                         "SIGTERM to the batch script (--full) would let srun kill a step's "
                                         "checkpoint, so the stop waits for a sweep that can read them")
            verb = f"sent SIGTERM to {'its steps ' + ', '.join(steps) if steps else 'the batch script'}"
            try:
                self.cli.run("scancel", "--signal=TERM", *(() if steps else ("--full",)), sid)
            except SlurmError as exc:
                if _refused(exc) or not _delivered_anyway(exc, sid):
                    raise
                verb = f"{verb} (scancel: {exc})"  # whether the job ends says what happened
            self._stop_sent.setdefault(job_uid(job), self._now())
        # Give a job that exits on SIGTERM a moment, so the result says whether the GPUs are free.
        deadline = time.monotonic() + max(0.0, self.stop_settle_s)
        while True:
            left = self._still_listed(sid)
            if left is None:
                return StopResult(job=job_id, status="stopped", detail=f"slurm job {sid} {verb}; it has ended")
            if time.monotonic() >= deadline:
                return StopResult(job=job_id, status="stopping",
                                  detail=f"slurm job {sid} {verb}; still {left.state.lower()}")
            time.sleep(0.25)


# Step names (the program srun started) that are a person's shell or a watcher beside the work, not the work: a job
# whose steps are only these runs its work in the batch script (`srun --jobid N --overlap --pty bash` attached).
_SIDE_STEPS = frozenset({"bash", "sh", "zsh", "fish", "csh", "tcsh", "ksh", "dash", "interactive", "nvidia-smi",
                         "nvtop", "top", "htop", "watch", "sleep", "tail", "tmux", "screen"})


def _step_ids(squeue_steps: str) -> list[str]:
    """The `srun` steps that run the job's work, from `squeue --steps -o "%i %j"` lines ("4.0 python"): not the
    batch or extern step (ids like 4.batch, 4.4294967295), nor a shell or watcher attached beside the work."""
    out = []
    for line in squeue_steps.splitlines():
        step, _, name = line.strip().partition(" ")
        number = re.fullmatch(r"[\w\[\]-]+\.(\d+)", step)
        if number and int(number.group(1)) < 4_294_967_000 and name.strip().lower() not in _SIDE_STEPS:
            out.append(step)
    return out


def slurm_scheduler_from_settings(settings: Any) -> SlurmScheduler:
    """The Slurm backend from Settings: STEWARD_SLURM_BIN_DIR names where the CLIs live (else PATH)."""
    return SlurmScheduler(SlurmCli(getattr(settings, "slurm_bin_dir", None)))
