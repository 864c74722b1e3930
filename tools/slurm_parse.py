"""Reads Slurm's outputs: squeue JSON (OpenAPI v0.0.38 and the newer shapes), squeue text, scontrol key=value."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core.cluster import JobState

# squeue -o fields joined by the ASCII unit separator. A job name can hold it, and newlines (sbatch takes both), and
# squeue prints the name raw: see FRAMED_FIELDS and read_text_listing for how a name is kept from making rows.
SEP = "\x1f"
TEXT_FIELDS = ("%i", "%P", "%u", "%a", "%q", "%T", "%D", "%b", "%S", "%N", "%j", "%r", "%V", "%A")
_OLD_TEXT_FIELDS = 11  # output without the reason and submit time (%r, %V) still reads, and without %A
TEXT_FORMAT = SEP.join(TEXT_FIELDS)
# What SlurmScheduler asks squeue for: each record framed by a marker made afresh for each call (text_format), the
# job name (%j, the one field a job's owner writes freely) between fixed fields, and the numeric uid (%U).
FRAMED_FIELDS = ("%i", "%P", "%u", "%U", "%a", "%q", "%T", "%D", "%b", "%S", "%N", "%j", "%r", "%V", "%A")
_NAME_AT = FRAMED_FIELDS.index("%j")
_AFTER_NAME = len(FRAMED_FIELDS) - _NAME_AT - 1
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # control characters but the tab
# %i: a job, an array task (4242_7), an array's pending remainder (4242_[8-15%2]), a het job component (31+1).
_JOB_ID = re.compile(r"\d+(?:_(?:\d+|\[[\d,%-]*\])|\+\d+)?")
_STATE_WORD = re.compile(r"[A-Z_]+")

_STATES: dict[str, JobState] = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending", "RESV_DEL_HOLD": "pending", "RESIZING": "running",
    "RUNNING": "running", "SUSPENDED": "running", "SIGNALING": "running", "STAGE_OUT": "stopping",
    "COMPLETING": "stopping", "STOPPED": "stopping",
    "COMPLETED": "completed", "CANCELLED": "cancelled",
    "FAILED": "failed", "TIMEOUT": "failed", "NODE_FAIL": "failed", "PREEMPTED": "failed",
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "OUT_OF_MEMORY": "failed", "SPECIAL_EXIT": "failed",
    "REVOKED": "cancelled",
}
_NULL = {"", "(null)", "n/a", "none", "unknown"}
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")  # gres/gpu=4, gres/gpu:a100=4 (typed repeats the total)
_GPU_GRES = re.compile(r"(?:gres[:/])?gpu(?::([A-Za-z0-9_.-]+))?[:=](\d+)")  # gres:gpu:2, gpu:a100:8(S:0-1)


class SlurmParseError(ValueError):
    """Output a Slurm command printed that this adapter cannot read."""


class SlurmQueryError(SlurmParseError):
    """Slurm answered, but said it could not produce the list (slurmctld unreachable, an invalid job id)."""


@dataclass
class SlurmJob:
    """One job as squeue reports it, before it gets a steward id."""

    # What scancel takes, and the job's identity: "4242", "4242_7" for an array task, "4242_[8-15]" for an array's
    # pending remainder. Never an array task's own numeric id: `scancel 4242` cancels every task of array 4242.
    job_id: str
    name: str
    partition: str
    user: str
    account: str | None
    qos: str | None
    state: str  # Slurm's word: RUNNING, PENDING, ...
    gpus: int
    nodes: list[str] = field(default_factory=list)
    started_at: datetime | None = None
    reason: str | None = None  # squeue's Reason for a pending job: Resources, Priority, QOSMaxGRESPerUser, ...
    submitted_at: datetime | None = None
    gpu_type: str = ""  # the typed GRES the job asks for ("a100"), "" = any
    # The heterogeneous job this is a component of (squeue --json het_job_id): scancel of a component's leader
    # cancels them all, so the components are one job to judge (agent/detectors/gang.py). None: not one.
    het_job_id: str | None = None
    # An array task's own numeric id (SLURM_JOB_ID inside it, dcgm-exporter's hpc_job), when it differs from job_id.
    internal_id: str | None = None
    user_id: int | None = None  # the job user's numeric uid: Slurm writes the job's output files as this uid
    stdout: str | None = None  # StdOut as squeue --json gives it (patterns such as %j unexpanded); None: not given
    workdir: str | None = None  # the job's working directory (a relative StdOut is relative to it)

    @property
    def steward_state(self) -> JobState:
        return _STATES.get(self.state.upper(), "running" if self.nodes else "pending")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    value = str(value).strip()
    return None if value.lower() in _NULL else value


def _number(value: Any) -> int | None:
    """A plain number, or Slurm >= 23.02's {"set": true, "number": n}; unset/infinite -> None."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _epoch(value: Any) -> datetime | None:
    seconds = _number(value)
    return datetime.fromtimestamp(seconds, UTC) if seconds else None


def _timestamp(value: str | None) -> datetime | None:
    """squeue/scontrol times are local wall-clock without a zone: read them as this host's local time."""
    if not value or value.lower() in _NULL:
        return None
    try:
        return datetime.fromisoformat(value).astimezone(UTC)
    except ValueError:
        return None


def expand_hostlist(expr: str | None) -> list[str]:
    """Slurm's compressed host lists: "gpu[01-03,07],cpu1" -> gpu01, gpu02, gpu03, gpu07, cpu1."""
    if not expr or expr.strip().lower() in _NULL:
        return []
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr):
        hosts.extend(_expand_one(part.strip()))
    return [h for h in hosts if h]


def _expand_one(pattern: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end():]
    out: list[str] = []
    for item in match.group(1).split(","):
        low, _, high = item.partition("-")
        if high:
            width = len(low)
            try:
                numbers = range(int(low), int(high) + 1)
            except ValueError:
                raise SlurmParseError(f"bad host range {item!r} in {pattern!r}") from None
            out.extend(f"{head}{n:0{width}d}{rest}" for n in numbers for rest in _expand_one(tail))
        else:
            out.extend(f"{head}{low}{rest}" for rest in _expand_one(tail))
    return out


def gpus_in_gres(spec: str | None) -> int:
    """GPUs named in a GRES/TRES-per-node string: "gres:gpu:2", "gpu:a100:4(S:0-1),gpu:v100:2" -> 2, 6."""
    if not spec:
        return 0
    return sum(int(n) for _, n in _GPU_GRES.findall(spec))


def gpu_type(spec: str | None) -> str:
    """The GPU type a GRES string names ("gpu:a100:8" -> "a100"), "" when untyped."""
    for kind, _ in _GPU_GRES.findall(spec or ""):
        if kind:
            return kind
    return ""


def gpus_in_tres(spec: str | None) -> int | None:
    """GPUs in a TRES string ("cpu=8,gres/gpu=4"); None when it does not count GPUs (no gres/gpu TRES)."""
    found = _GPU_TRES.findall(spec or "")
    return max(int(n) for n in found) if found else None


def _job_gpus(raw: dict[str, Any], node_count: int) -> int:
    for key in ("tres_alloc_str", "tres_req_str"):
        counted = gpus_in_tres(raw.get(key))
        if counted is not None:
            return counted
    per_job = gpus_in_gres(raw.get("tres_per_job"))
    if per_job:
        return per_job
    per_node = gpus_in_gres(raw.get("tres_per_node"))
    if per_node:
        return per_node * max(node_count, 1)
    return sum(gpus_in_gres(d) for d in raw.get("gres_detail") or [])


def _state(raw: Any) -> str:
    """The state as squeue's text output names it. Slurm >= 23.02 JSON gives the base state first, then flags: a job
    cancelled or finished whose processes, epilog or stage-out still run on its nodes is ["CANCELLED", "COMPLETING"]
    or ["COMPLETED", "STAGE_OUT"], which the text output calls COMPLETING: it is still on its nodes."""
    if isinstance(raw, list):
        words = [str(w).upper() for w in raw]
        if any(w in ("COMPLETING", "STAGE_OUT") for w in words[1:]):
            return "COMPLETING"
        return words[0] if words else "UNKNOWN"
    return str(raw or "UNKNOWN")


def array_id(own: str, raw: dict[str, Any]) -> str:
    """The id that names this job alone (scancel, squeue -j): `<array>_<task>` for an array task, `<array>_[<tasks>]`
    for an array's pending remainder (whose numeric id is the array's: scancel of it would cancel every task), else
    the job's own id."""
    array, task = _number(raw.get("array_job_id")), _number(raw.get("array_task_id"))
    if not array:
        return own
    if task is not None:
        return f"{array}_{task}"
    tasks = (_text(raw.get("array_task_string")) or "").split("%")[0]  # "2-5%3": the %3 is a throttle
    return f"{array}_[{tasks}]" if tasks else own


def jobs_from_json(text: str) -> list[SlurmJob]:
    """Jobs in `squeue --json` output."""
    try:
        data = json.loads(text)
        raw_jobs = data["jobs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SlurmParseError(f"squeue --json printed no job list: {exc}") from None
    errors = data.get("errors") if isinstance(data, dict) else None
    if errors:
        # Slurm 22.05 exits 0 with an empty job list when slurmctld is down: that list is not "no jobs".
        said = "; ".join(f"{e.get('source', '')}: {e.get('description') or e.get('error', '')}".strip(": ")
                         if isinstance(e, dict) else str(e) for e in errors)
        raise SlurmQueryError(f"squeue --json reported errors and no reliable job list: {said}")
    jobs = []
    for raw in raw_jobs:
        nodes = expand_hostlist(_text(raw.get("nodes")))
        count = _number(raw.get("node_count")) or len(nodes)
        own = str(_number(raw.get("job_id")) or "")
        job_id = array_id(own, raw)
        state = _state(raw.get("job_state"))
        jobs.append(SlurmJob(
            job_id=job_id, internal_id=own if own != job_id else None, name=str(raw.get("name") or ""),
            partition=str(raw.get("partition") or ""), user=_text(raw.get("user_name")) or str(raw.get("user_id", "")),
            account=_text(raw.get("account")), qos=_text(raw.get("qos")), state=state,
            # A pending job's start_time is when Slurm expects to start it, as in the text form: not a start.
            gpus=_job_gpus(raw, count), nodes=nodes,
            started_at=_epoch(raw.get("start_time")) if state.upper() != "PENDING" else None,
            reason=_text(raw.get("state_reason")), submitted_at=_epoch(raw.get("submit_time")),
            gpu_type=gpu_type(",".join(str(raw.get(k) or "") for k in ("tres_per_job", "tres_per_node"))),
            het_job_id=str(_number(raw.get("het_job_id"))) if _number(raw.get("het_job_id")) else None,
            user_id=_number(raw.get("user_id")), stdout=_text(raw.get("standard_output")),
            workdir=_text(raw.get("current_working_directory")),
        ))
    return jobs


@dataclass
class TextListing:
    """squeue text output read: the jobs whose records check out, and a note for each record that did not."""

    jobs: list[SlurmJob] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def text_format(marker: str) -> str:
    """The squeue -o format whose records start and end with `marker` (made afresh for each call: a job name
    written before the call cannot contain it)."""
    return SEP.join((marker, *FRAMED_FIELDS, marker))


def _shown(text: str, limit: int = 120) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _row_problem(job_id: str, user: str, state: str, count: str, own: str, fixed: list[str]) -> str | None:
    """Why a record's fixed fields do not check out (None when they do): they are Slurm's, never a job's own
    text, so anything odd in them means the record was not read as squeue printed it."""
    if any(_CONTROL.search(value) for value in fixed):
        return "control characters in a field"
    if not _JOB_ID.fullmatch(job_id):
        return f"job id {job_id!r} is not a Slurm job id"
    if not user or not _STATE_WORD.fullmatch(state) or (count and not count.isdigit()):
        return "user, state or node count not as squeue prints them"
    if own:
        if not own.isdigit():
            return f"%A {own!r} is not a number"
        plain = job_id.isdigit()
        if plain and own != job_id:
            return f"%A {own} does not match %i {job_id}"
        if "_[" in job_id and own != job_id.split("_")[0]:
            return f"%A {own} is not the array's id in %i {job_id}"
    return None


def _text_job(parts: list[str], name: str, tail: list[str], uid: str | None) -> SlurmJob:
    job_id, partition, user, account, qos, state, count, per_node, start, nodes = parts
    reason, submitted, own = (tail + [None, None, None])[:3]
    own = (own or "").strip()
    node_list = expand_hostlist(nodes)
    n = int(count) if count.strip().isdigit() else len(node_list)
    # In a multi-partition submission squeue prints the partition list: the job runs in the first.
    # %i names an array task <array>_<task> and a pending remainder <array>_[<tasks>%<throttle>].
    job_id = re.sub(r"%\d+\]$", "]", job_id.strip())
    return SlurmJob(
        job_id=job_id, internal_id=own if own and own != job_id else None, name=name,
        partition=partition.split(",")[0], user=user, account=_text(account), qos=_text(qos), state=state,
        gpus=gpus_in_gres(per_node) * max(n, 1), nodes=node_list,
        started_at=_timestamp(start) if state.upper() != "PENDING" else None,
        reason=_text(reason), submitted_at=_timestamp(submitted), gpu_type=gpu_type(per_node),
        user_id=int(uid) if uid and uid.isdigit() else None,
    )


def _framed(text: str, marker: str) -> TextListing:
    """Records framed by the marker: a record runs from a line that starts with it to the marker that ends it, so a
    name with newlines or separators stays inside its own record (the name is what lies between the fixed fields)."""
    out = TextListing()
    head = marker + SEP
    if text.strip() and not text.startswith(head):
        out.dropped.append(f"squeue printed text outside a record: {_shown(text.split(head)[0])}")
    for chunk in ("\n" + text).split("\n" + head)[1:]:
        chunk = chunk.removesuffix("\n")
        parts = chunk.split(SEP)
        if parts[-1] != marker or len(parts) < len(FRAMED_FIELDS) + 1:
            out.dropped.append(f"a squeue record without its end, or fields missing: {_shown(chunk)}")
            continue
        parts = parts[:-1]
        before, after = parts[:_NAME_AT], parts[len(parts) - _AFTER_NAME:]
        name = SEP.join(parts[_NAME_AT:len(parts) - _AFTER_NAME])
        job_id, partition, user, uid, *rest = before
        problem = _row_problem(job_id, user, rest[2], rest[3], after[2], [*before, *after])
        if problem is None and not uid.isdigit():
            problem = f"uid {uid!r} is not a number"
        if problem is not None:
            out.dropped.append(f"squeue record dropped ({problem}): {_shown(chunk)}")
            continue
        out.jobs.append(_text_job([job_id, partition, user, *rest], name, after, uid))
    return out


def _rows(text: str) -> TextListing:
    """Rows of TEXT_FORMAT (or its older, shorter forms), one a line: a row whose fields do not check out is
    dropped and named, never read (a name with a newline or a separator in it ends its row and makes another)."""
    out = TextListing()
    for line in text.split("\n"):
        if not line.strip():
            continue
        parts = line.split(SEP)
        if len(parts) not in (len(TEXT_FIELDS), len(TEXT_FIELDS) - 1, _OLD_TEXT_FIELDS):
            out.dropped.append(f"squeue printed {len(parts)} fields, expected {len(TEXT_FIELDS)}: {_shown(line)}")
            continue
        fixed, name, tail = parts[:10], parts[10], parts[11:]
        problem = _row_problem(fixed[0].strip(), fixed[2], fixed[5], fixed[6], tail[2].strip() if len(tail) > 2
                               else "", [*fixed, *tail])
        if problem is None and _CONTROL.search(name):
            problem = "control characters in the name"
        if problem is not None:
            out.dropped.append(f"squeue row dropped ({problem}): {_shown(line)}")
            continue
        out.jobs.append(_text_job(fixed, name, tail, None))
    return out


def read_text_listing(text: str, marker: str | None = None) -> TextListing:
    """squeue text output: framed records when `marker` is given (text_format(marker)), else one row a line.
    Output that holds records but not one that reads is not a listing at all: SlurmParseError."""
    listing = _framed(text, marker) if marker else _rows(text)
    if listing.dropped and not listing.jobs:
        raise SlurmParseError("squeue printed no record this adapter can read: " + "; ".join(listing.dropped[:3]))
    return listing


def jobs_from_text(text: str, marker: str | None = None) -> list[SlurmJob]:
    """Jobs in `squeue -h -o TEXT_FORMAT` output (Slurm built without JSON support); rows that do not check out are
    left out (read_text_listing names them)."""
    return read_text_listing(text, marker).jobs


def key_values(line: str) -> dict[str, str]:
    """`Key=value Key2=value with spaces` (scontrol -o) -> dict; a value runs to the next ` Key=`."""
    marks = list(re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=", line))
    out = {}
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out[mark.group(1)] = line[mark.end():end].strip()
    return out


def single_value(text: str, key: str) -> str | None:
    """The value of `key` in one scontrol -o record, when the key appears exactly once: a job's own text (its name,
    comment, work dir, mail user) can hold ` StdOut=...` before or after the real key, and then neither is known
    to be Slurm's. None when the key is missing or appears more than once."""
    marks = list(re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=", text))
    found = [i for i, mark in enumerate(marks) if mark.group(1) == key]
    if len(found) != 1:
        return None
    i = found[0]
    end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
    return text[marks[i].end():end].strip()


def records(text: str) -> list[dict[str, str]]:
    """scontrol show ... -o output: one record per line."""
    return [key_values(line) for line in text.splitlines() if line.strip()]
