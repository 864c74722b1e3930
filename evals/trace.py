"""Read a per-container GPU trace (CSV, gz or plain) into sorted numpy arrays per container."""

from __future__ import annotations

import csv
import gzip
import io
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from agent.detectors.idle import CUDA_CONTEXT_MB

# Common names, most specific first; matched case-insensitively after stripping.
ID_NAMES = ("container", "container_id", "containerid", "pod", "pod_name", "podname", "instance", "job",
            "job_id", "jobid", "task", "task_id", "worker", "id")
TIME_NAMES = ("timestamp", "time", "ts", "t", "time_s", "datetime", "date", "epoch", "second")
UTIL_NAMES = ("gpu_util_pct", "gpu_util", "gpu_utilization", "utilization_gpu", "gpu_duty_cycle", "duty_cycle",
              "dcgm_fi_dev_gpu_util", "util", "utilization", "util_pct", "sm_util")
MEM_NAMES = ("gpu_mem_used_bytes", "gpu_mem_used_mb", "gpu_mem_used", "gpu_memory_used", "fb_used",
             "dcgm_fi_dev_fb_used", "mem_used", "memory_used", "gpu_mem", "mem")


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file, row and column."""


@dataclass
class ContainerTrace:
    """One container's samples, sorted by time (seconds from the trace start)."""

    id: str
    t: np.ndarray  # float64 seconds since trace start
    util: np.ndarray  # float64 percent, NaN = not a valid sample
    mem_mb: np.ndarray  # float64 MB, NaN = absent

    @property
    def first(self) -> float:
        return float(self.t[0])

    @property
    def last(self) -> float:
        return float(self.t[-1])


@dataclass
class Trace:
    path: str
    start_epoch: float  # the trace's first timestamp, as written
    duration_s: float
    interval_s: float  # median gap between a container's samples
    containers: dict[str, ContainerTrace] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # role -> column used ("" = none)
    rows: int = 0  # samples read (a repeated (container, timestamp) row counts once)
    reused: int = 0  # ids split in two: a new container came back on the id after a hole (split_reused)
    act_after_s: float = 0.0  # no policy stops anything before this (--act-after): history to learn from first
    duplicates: int = 0  # rows dropped as a second sample of the same container at the same timestamp

    def ended_inside(self, c: ContainerTrace) -> bool:
        """The container really ended: its samples stop well before the trace does (3 intervals)."""
        return c.last < self.duration_s - 3 * self.interval_s

    def life_end(self, c: ContainerTrace) -> float:
        return c.last if self.ended_inside(c) else self.duration_s

    def stretched(self, factor: float) -> Trace:
        """The same cluster at another tempo: every time (and so every pause, burst and sample interval) times
        `factor`, utilisation unchanged, so each sample stands for `factor` times the work. A robustness check for
        rules and defaults fixed in minutes: what would they do where users pause 1.5 times as long?"""
        if not (factor > 0 and math.isfinite(factor)):
            raise TraceError(f"--time-scale must be a positive number, got {factor}")
        if factor == 1:
            return self
        return replace(self, path=f"{self.path} (time x{factor:g})", duration_s=self.duration_s * factor,
                       interval_s=self.interval_s * factor,
                       containers={k: replace(c, t=c.t * factor) for k, c in self.containers.items()})


    def repeated(self, times: int, act_after_s: float = 0.0) -> Trace:
        """The trace `times` times in a row, each container living through all of them (its samples shifted by the
        trace's length plus one interval each time), and no stop before `act_after_s`. Asks what a trace that ends
        in a lull cannot: is a container stopped tonight back at work tomorrow, and does the policy learn from the
        night before? (The dev trace ends in its fleet's nightly lull, docs/evals.md.)"""
        if times < 1:
            raise TraceError(f"--repeat must be at least 1, got {times}")
        if not (act_after_s >= 0 and math.isfinite(act_after_s)):
            raise TraceError(f"--act-after must be a duration of 0 or more, got {act_after_s}")
        if times == 1 and act_after_s == 0:
            return self
        period = self.duration_s + self.interval_s
        containers = {k: replace(c, t=np.concatenate([c.t + i * period for i in range(times)]),
                                 util=np.tile(c.util, times), mem_mb=np.tile(c.mem_mb, times))
                      for k, c in self.containers.items()}
        label = f" (x{times})" if times > 1 else ""
        label += f" (acting after {act_after_s / 3600:g} h)" if act_after_s else ""
        return replace(self, path=f"{self.path}{label}", duration_s=period * (times - 1) + self.duration_s,
                       containers=containers, act_after_s=act_after_s)


def _pick(header: list[str], wanted: str | None, names: tuple[str, ...], role: str, source: str,
          required: bool, contains: tuple[str, ...] = ()) -> int | None:
    lowered = [h.strip().lower() for h in header]
    if wanted is not None:
        if wanted.strip().lower() not in lowered:
            raise TraceError(f"{source}: no column {wanted!r} for {role}; columns: {', '.join(header)}")
        return lowered.index(wanted.strip().lower())
    for name in names:
        if name in lowered:
            return lowered.index(name)
    for i, h in enumerate(lowered):  # then a column whose name contains a telling word
        if any(word in h for word in contains):
            return i
    if required:
        raise TraceError(f"{source}: cannot tell which column is the {role} (tried {', '.join(names[:6])}, ...); "
                         f"columns: {', '.join(header)}; name it with --{role.split()[0]}-col")
    return None


def _open(path: Path):
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return io.StringIO(raw.decode("utf-8-sig"))


def _number(text: str, source: str, row: int, column: str, allow_empty: bool) -> float:
    text = text.strip()
    if not text and allow_empty:
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{source}: row {row}, column {column!r}: {text!r} is not a number") from None
    if math.isinf(value) or (math.isnan(value) and not allow_empty):
        raise TraceError(f"{source}: row {row}, column {column!r}: {text!r} is not a finite number")
    return value


def load_trace(path: str | Path, *, id_col: str | None = None, time_col: str | None = None,
               util_col: str | None = None, mem_col: str | None = None) -> Trace:
    """Read the trace; row numbers in errors count the header as row 1, as a spreadsheet does."""
    path = Path(path)
    source = str(path)
    try:
        reader = csv.reader(_open(path))
        header = next(reader)
    except OSError as exc:
        raise TraceError(f"{source}: cannot read: {exc.strerror or exc}") from None
    except StopIteration:
        raise TraceError(f"{source}: empty file (no header row)") from None
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise TraceError(f"{source}: not a CSV text file: {exc}") from None
    i_id = _pick(header, id_col, ID_NAMES, "id column (container)", source, True)
    i_t = _pick(header, time_col, TIME_NAMES, "time column (timestamp)", source, True)
    i_u = _pick(header, util_col, UTIL_NAMES, "util column (GPU utilisation %)", source, True, ("util", "duty"))
    i_m = _pick(header, mem_col, MEM_NAMES, "mem column (GPU memory)", source, False, ("mem", "fb_used"))
    assert i_id is not None and i_t is not None and i_u is not None  # required=True raised otherwise
    names: dict[str, str] = {"id": header[i_id], "time": header[i_t], "util": header[i_u],
                             "mem": header[i_m] if i_m is not None else ""}
    ids: list[str] = []
    ts: list[float] = []
    us: list[float] = []
    ms: list[float] = []
    width = len(header)
    for row_no, row in enumerate(reader, start=2):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != width:
            raise TraceError(f"{source}: row {row_no} has {len(row)} fields, the header has {width}")
        cid = row[i_id].strip()
        if not cid:
            raise TraceError(f"{source}: row {row_no}, column {names['id']!r}: empty container id")
        ids.append(cid)
        ts.append(_number(row[i_t], source, row_no, names["time"], False))
        us.append(_number(row[i_u], source, row_no, names["util"], True))
        ms.append(_number(row[i_m], source, row_no, names["mem"] or "", True) if i_m is not None else math.nan)
    if not ids:
        raise TraceError(f"{source}: no data rows")
    t_all = np.asarray(ts)
    start = float(t_all.min())
    util = np.asarray(us)
    util[(util < 0) | (util > 100)] = np.nan  # a broken exporter's 150% is not a measurement
    mem = np.asarray(ms)
    mem_name = (names["mem"] or "").lower()
    if "byte" in mem_name or (not mem_name.endswith("mb") and np.nanmax(mem, initial=0.0) > 4e6):
        mem = mem / 2**20  # bytes -> MB (no GPU has 4 TB)
    order = np.lexsort((t_all, np.asarray(ids)))
    ids_sorted = np.asarray(ids)[order]
    # One sample per (container, timestamp): a row written twice is one sample, not twice the work. Where the
    # copies disagree, the busiest reading and the most memory stand (a busy reading is never dropped).
    first_of = np.concatenate([[True], (ids_sorted[1:] != ids_sorted[:-1]) | (np.diff(t_all[order]) != 0)])
    duplicates = int(len(order) - first_of.sum())
    if duplicates:
        starts = np.flatnonzero(first_of)
        with np.errstate(invalid="ignore"):
            util[order[starts]] = np.fmax.reduceat(util[order], starts)
            mem[order[starts]] = np.fmax.reduceat(mem[order], starts)
        order, ids_sorted = order[first_of], ids_sorted[first_of]
    cuts = np.flatnonzero(ids_sorted[1:] != ids_sorted[:-1]) + 1
    containers: dict[str, ContainerTrace] = {}
    gaps: list[np.ndarray] = []
    for block in np.split(order, cuts):
        cid = ids[block[0]]
        t = t_all[block] - start
        containers[cid] = ContainerTrace(id=cid, t=t, util=util[block], mem_mb=mem[block])
        if len(t) > 1:
            gaps.append(np.diff(t))
    diffs = np.concatenate(gaps) if gaps else np.array([60.0])
    diffs = diffs[diffs > 0]
    interval = float(np.median(diffs)) if len(diffs) else 60.0
    split, reused = split_reused(containers, interval)
    return Trace(path=source, start_epoch=start, duration_s=float(t_all.max() - start), interval_s=interval,
                 containers=split, columns=names, rows=len(ids) - duplicates, reused=reused, duplicates=duplicates)


def split_reused(containers: dict[str, ContainerTrace], interval: float) -> tuple[dict[str, ContainerTrace], int]:
    """Containers as the cluster ran them, where a trace keys them by something a new container can reuse (the
    GenAI trace keys them by IP, which Kubernetes hands to a new pod): a hole in an id's samples longer than the
    one that ends a container at the trace's end (3 intervals, Trace.ended_inside) after which the id comes back
    holding no more GPU memory than a CUDA context, having held more before it, is one container ending and a new
    one starting (`<id>-2`, `-3` ...). A process never gives back the model it holds and carries on: across the
    dev trace's 17 short holes (5-17 min) memory stays a model's worth (to the byte in 16); across its two long ones (5 and 10 h) it
    falls from 24-26 GB to 0.2 GB and 9 MB. Without the split the replay showed one pod whose exporter was dark for
    10 hours, which the agent rightly protects as unknown. Where memory is absent nothing is split. Returns the
    containers and how many ids were split."""
    out: dict[str, ContainerTrace] = {}
    taken = set(containers)  # a new name never takes one the trace already uses ("a-2" may be a real id)
    reused = 0
    for cid, c in containers.items():
        hole = np.diff(c.t) > 3 * interval
        before, after = c.mem_mb[:-1], c.mem_mb[1:]
        cuts = np.flatnonzero(hole & (before > CUDA_CONTEXT_MB) & (after <= CUDA_CONTEXT_MB)) + 1  # NaN compares False
        if not len(cuts):
            out[cid] = c
            continue
        reused += 1
        suffix = 1
        for n, (lo, hi) in enumerate(zip([0, *cuts.tolist()], [*cuts.tolist(), len(c.t)], strict=True)):
            new = cid
            if n:
                suffix += 1
                while f"{cid}-{suffix}" in taken:
                    suffix += 1
                new = f"{cid}-{suffix}"
                taken.add(new)
            out[new] = ContainerTrace(id=new, t=c.t[lo:hi], util=c.util[lo:hi], mem_mb=c.mem_mb[lo:hi])
    return out, reused
