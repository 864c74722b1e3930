"""Long-tail protection: quiet GPUs that are still part of live work are kept out of idle/zombie."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from agent.config.policy import LongTailRule
from agent.detectors.history import CoarseHistory, align_end
from agent.detectors.signals import JobSeries, JobWindow, window_slices
from core.durations import format_duration
from core.observation import LogProgress


@dataclass(frozen=True)
class LongTail:
    """Why a quiet job may still be live work. `grace_left_s` is set when the only reason is the job's own
    rhythm and the pause is already longer than any it has taken (but not yet by the quiet_factor margin): then a
    warning may go out now and the stop waits that long. None: evidence of work now, unknown data, or a pause
    within its rhythm: no warning either."""

    reason: str
    grace_left_s: float | None = None


def long_tail(
    window: JobWindow, logs: LogProgress | None, rule: LongTailRule, *, quiet_pct: float, min_coverage: float = 0.9,
    cpu: bool = True, periodic: bool = True, blip_gpu_s: float = 0.0,
) -> LongTail | None:
    """long_tail_reason with its kind: hard evidence or unknown data (grace_left_s None), or only the grace of
    the job's rhythm (how long is left of it)."""
    hard = long_tail_reason(window, logs, rule, quiet_pct=quiet_pct, min_coverage=min_coverage, cpu=cpu,
                            periodic=False)
    if hard is not None:
        return LongTail(hard)
    if not periodic or never_worked(window.series, rule, quiet_pct) is not None:
        return None
    return _periodic(window, rule, quiet_pct, min_coverage, blip_gpu_s)


def work_off_the_gpu(window: JobWindow, logs: LogProgress | None, rule: LongTailRule, *, cpu: bool = True) -> str | None:
    """The job's work beside its GPUs over the window (network, disk read or disk write at the active line, process
    CPU, a log that advanced), in the operator's words; None when it shows none. A job writing to its disk (a dataset
    copied from network storage to local disk, whose reads no counter of the job may see) works as surely as one
    reading from it."""
    span = format_duration(window.seconds)
    if window.net_max is not None and window.net_max >= rule.io_threshold_mbps:
        return (
            f"network receive up to {window.net_max:.1f} MB/s in the last {span} (>= {rule.io_threshold_mbps:g} MB/s)"
        )
    if window.disk_max is not None and window.disk_max >= rule.io_threshold_mbps:
        return f"disk read up to {window.disk_max:.1f} MB/s in the last {span} (>= {rule.io_threshold_mbps:g} MB/s)"
    if window.disk_write_max is not None and window.disk_write_max >= rule.io_threshold_mbps:
        return (f"disk write up to {window.disk_write_max:.1f} MB/s in the last {span} "
                f"(>= {rule.io_threshold_mbps:g} MB/s)")
    if cpu and window.cpu_max is not None and window.cpu_max >= rule.cpu_active_pct:
        return f"process CPU up to {window.cpu_max:.0f}% in the last {span} (>= {rule.cpu_active_pct:g}%)"
    if logs is not None and logs.advanced_since(window.at - timedelta(seconds=window.seconds)) \
            and logs.last_progress_at is not None:
        step = f" (step {logs.last_step:g})" if logs.last_step is not None else ""
        return f"log still advancing: last progress line at {logs.last_progress_at:%H:%M} UTC{step}"
    return None


def long_tail_reason(
    window: JobWindow, logs: LogProgress | None, rule: LongTailRule, *, quiet_pct: float, min_coverage: float = 0.9,
    cpu: bool = True, periodic: bool = True, blip_gpu_s: float = 0.0,
) -> str | None:
    """Why this quiet job is probably still working, or why we cannot tell (for the explanation); None when
    nothing suggests it and the data can rule it out.

    Unknown is not idle: metrics read from a partial response, or a history that does not cover the lookback
    (short retention, gaps) while the job is quiet now, protect the job like evidence of work would.
    `cpu=False` for a hung job (its host threads spin); `periodic=False` where the window's own bursts are what
    is judged (keep-alive), not a pause after them. `blip_gpu_s`: activity under it in all is a blip, not work
    (IdleRule.blip_gpu_seconds; 0: none).
    """
    work = work_off_the_gpu(window, logs, rule, cpu=cpu)
    if work is not None:
        return work
    if window.series.degraded:
        return f"metrics incomplete ({'; '.join(window.series.degraded)}): cannot rule out a working job"
    if not periodic or never_worked(window.series, rule, quiet_pct) is not None:
        return None  # no working history to protect: a notebook opened and abandoned gets no grace
    verdict = _periodic(window, rule, quiet_pct, min_coverage, blip_gpu_s)
    return verdict.reason if verdict is not None else None


def never_worked(series: JobSeries, rule: LongTailRule, quiet_pct: float) -> float | None:
    """The most GPU-seconds of work the job can have done when that is under `rule.material_gpu_seconds` and
    its whole life was observed; None otherwise (it may have worked).

    Observed means: the job's start is known and inside the lookback, and every slice of its life has a valid
    reading for every GPU (the slice its start falls in may be empty). A slice at or below `quiet_pct` holds
    no work; any other holds at most its average (its max when the average is unknown) for the whole slice.
    Work its series shows before its start (an earlier job under the same name, a requeue) counts too: the
    claim is made only when nothing under the name worked. Coarse history is read when attached.
    """
    born = series.started_at
    if born is None or not series.gpus:
        return None
    age = (series.at - born).total_seconds()
    if age < 0 or age > rule.lookback:
        return None  # the lookback does not hold the job's whole life
    if series.history_ratio > 0 and series.history_gpus:
        step = series.slice_s * series.history_ratio
        index = {(h.node, h.gpu): h for h in series.history_gpus}
        columns = []
        for g in series.gpus:
            h = index.get((g.node, g.gpu))
            if h is None:
                return None  # a GPU without history: its past is unknown
            columns.append((h.util_max, h.util_avg, h.samples))
    else:
        step = series.slice_s
        columns = [(g.util_max, g.util_avg, g.samples) for g in series.gpus]
    life = math.ceil(age / step - 1e-9)
    span = max(life, math.ceil(rule.lookback / step - 1e-9))
    work = 0.0
    for maxes, avgs, counts in columns:
        if len(maxes) < life:
            return None  # the read does not reach back to the job's start
        n = min(span, len(maxes))
        tail_avg = align_end(avgs, n) if avgs else [None] * n
        for k, (high, mean, count) in enumerate(zip(align_end(maxes, n), tail_avg, align_end(counts, n), strict=True)):
            if high is None or not count or not 0.0 <= high <= 100.0:
                if k > n - life:
                    return None  # a gap in its life (past the slice it started in): work may hide there
                continue
            if high <= quiet_pct:
                continue
            share = mean if mean is not None and 0.0 <= mean <= high else high
            work += share / 100.0 * step
            if work >= rule.material_gpu_seconds:
                return None
    return work


def material_slices(values: list[float | None], work: Callable[[int], float], quiet_pct: float, material_gpu_s: float,
                    carry_gpu_s: float = 0.0) -> list[bool]:
    """Which slices (oldest first) hold material work; the others are quiet, blips or unknown.

    Runs of consecutive slices above `quiet_pct` are walked from the newest. A run is material when its work
    (`work(k)` GPU-seconds per slice), added to the blips since the newer material run (and `carry_gpu_s`, the
    blips of the current quiet stretch), reaches `material_gpu_s`; then the count starts again. Else it is a
    blip, part of the pause around it. With `material_gpu_s` 0 every run is material. A pause is thus the time
    between two material runs, and it holds less than a GPU-minute of work by the same measure the current quiet
    stretch is judged with (JobSeries.quiet_run).
    """
    out = [False] * len(values)
    spent = carry_gpu_s
    k = len(values) - 1
    while k >= 0:
        value = values[k]
        if value is None or value <= quiet_pct:
            k -= 1
            continue
        end, run = k, 0.0
        while k >= 0 and (value := values[k]) is not None and value > quiet_pct:
            run += work(k)
            k -= 1
        if material_gpu_s <= 0 or spent + run >= material_gpu_s:
            out[k + 1 : end + 1] = [True] * (end - k)
            spent = 0.0
        else:
            spent += run
    return out


def working_runs(values: list[float | None], work: Callable[[int], float], quiet_pct: float,
                 material_gpu_s: float) -> list[bool]:
    """Which slices (oldest first) belong to a burst of work: a run of consecutive slices above `quiet_pct`
    that on its own did at least `material_gpu_s` GPU-seconds (`work(k)` per slice). Shorter runs are blips:
    they end a quiet stretch, but set no rhythm. With `material_gpu_s` 0 every run is a burst."""
    out = [False] * len(values)
    k = 0
    while k < len(values):
        value = values[k]
        if value is None or value <= quiet_pct:
            k += 1
            continue
        start, run = k, 0.0
        while k < len(values) and (value := values[k]) is not None and value > quiet_pct:
            run += work(k)
            k += 1
        if run >= material_gpu_s:
            out[start:k] = [True] * (k - start)
    return out


def _periodic(window: JobWindow, rule: LongTailRule, quiet_pct: float, min_coverage: float,
              blip_gpu_s: float = 0.0) -> LongTail | None:
    """A job with past bursts of GPU work whose current pause is not yet long for it, with how long is left
    of its grace (a pause the gaps in the data could hide has no known end: grace_left_s None).

    Long means longer than quiet_factor x its longest past pause (and, when `quiet_share` is set, longer than
    that share of the span over which it worked in the lookback). The grace comes from the job's own
    behaviour: a job that has shown a 2-hour pause may take one again; one that never paused for more than
    half an hour is not on a break after 45 minutes of quiet.

    With a blip budget (`blip_gpu_s` > 0) blips are not work: a pause runs from one burst that reaches the
    budget to the next (material_slices), so a stretch broken only by activity under it counts as one pause,
    and the current quiet stretch counts its blips the same way.

    With a coarse history the past is read in coarse slices of r fine ones, and every count and
    length is its largest possible fine value: more bursts, a longer past pause or working span only
    protect more. A busy coarse slice whose lowest sample is quiet (or unknown) may hide a pause.

    A silence already going when the lookback began, in a job older than the lookback, is one it came back from
    (at least its seen part long, after work before the lookback): yesterday's night, for a job that works by day.

    Unknown is not idle: when valid samples cover less than `min_coverage` of the lookback (or of the
    life of a younger job), the gaps are read in the job's favour (_gaps_could_protect), and a job the
    gaps could protect is one we cannot tell from a periodic one.
    """
    series = window.series
    quiet, blips = series.quiet_run(quiet_pct, blip_gpu_s)
    if quiet == 0:
        return None  # busy now: periodicity protects pauses, not hangs
    coarse = series.history
    r = coarse.ratio if coarse is not None else 1
    values = coarse.util_max if coarse is not None else series.util_max
    gpus = len(series.gpus)
    lookback = window_slices(rule.lookback, series.slice_s * r)
    # A coarse slice only partly inside the quiet run holds the activity that ended it: it stays in.
    end = len(values) - quiet // r
    work = (lambda k: coarse.work_gpu_s(k, gpus)) if coarse is not None else series.work_gpu_s
    # The rhythm is one of work: pauses run between bursts that each did a GPU-minute (rule.material_gpu_seconds);
    # with a blip budget, between runs that reach it with the blips before them (material_slices).
    material = (material_slices(values[:end], work, quiet_pct, blip_gpu_s, blips) if blip_gpu_s > 0
                else working_runs(values[:end], work, quiet_pct, rule.material_gpu_seconds))
    first = max(0, len(values) - lookback)
    busy = [k - first for k in range(first, end) if material[k]]
    # Quiet fine slices r-1 at most, each side of a busy coarse slice that is not busy throughout.
    edge = {k: r - 1 for k in busy if coarse is not None and not coarse.solid(first + k, quiet_pct)}
    bursts = 1 if busy else 0
    longest_gap = 0
    for prev, k in zip(busy, busy[1:], strict=False):
        ends = edge.get(prev, 0) + edge.get(k, 0)
        if k - prev > 1:
            bursts += 1
            longest_gap = max(longest_gap, (k - prev - 1) * r + ends)
        elif ends:
            longest_gap = max(longest_gap, ends)
    # An inner slice that dipped may split a burst in two; the first and last may just hold the quiet
    # before the first burst and the current pause, which the fine slices would not count either.
    bursts += sum(1 for k in busy[1:-1] if k in edge)
    if blip_gpu_s <= 0 and rule.pause == "silence":
        # Like with like: the current stretch ends at any activity, so a past pause is a silence too, and only one
        # that work followed says the job may come back after it.
        back = math.ceil(window.slices / r - 1e-9)  # the idle window, in the slices `values` counts
        # A silence already going when the lookback began, in a job older than the lookback (or of unknown start),
        # began before it: unknown, so read in the job's favour, as a silence at least its seen part long that
        # followed work (yesterday's night, for a job that works by day).
        born = series.started_at
        open_start = len(values) >= lookback and (
            born is None or born <= series.at - timedelta(seconds=lookback * r * series.slice_s))
        # It lengthens a rhythm the lookback shows (two bursts or more), never makes one: a notebook idle for a day
        # and used once is stopped after that use as before (a probe: a 16-hour grace for one hour of work).
        longest_gap = _longest_silence_before_work(values[first:end], busy, coarse, first, quiet_pct, back,
                                                    open_start)
    worked = (busy[-1] - busy[0] + 1) * r if busy else 0
    needed = max(rule.quiet_factor * longest_gap, rule.quiet_share * worked)
    if bursts >= 2 and quiet < needed:
        s = series.slice_s
        share = (f" and {rule.quiet_share:.2g} x the {format_duration(worked * s)} it worked over"
                 if rule.quiet_share > 0 else "")
        # A pause no longer than one the job has taken is its rhythm: nothing to say. Once it is longer than any
        # (the margin quiet_factor gives), the owner may be told; the stop still waits for the margin to run out.
        unprecedented = quiet > longest_gap
        return LongTail(
            f"periodic GPU work: {'' if coarse is None else 'up to '}{bursts} bursts in the last "
            f"{format_duration(lookback * r * s)} with pauses up to "
            f"{format_duration(longest_gap * s)}; quiet for {format_duration(quiet * s)} now "
            f"(< {rule.quiet_factor:g} x the longest pause{share})",
            grace_left_s=(needed - quiet) * s if unprecedented else None,
        )
    gap = series.coverage(rule.lookback).gap(min_coverage)
    hidden = _gaps_could_protect(series, rule, quiet_pct, quiet, lookback, bursts, material) if gap else None
    if gap is not None and hidden is not None:
        # As with a rhythm seen whole: once the quiet is longer than any pause the gaps could hide, the owner may be
        # told; the stop waits for the margin on that longest possible pause.
        longest, needed = hidden
        return LongTail(f"{gap}; the gaps could hide a pause up to {format_duration(longest * series.slice_s)}",
                        grace_left_s=(needed - quiet) * series.slice_s if quiet > longest else None)
    return None


def _longest_silence_before_work(values: list[float | None], busy: list[int], coarse: CoarseHistory | None,
                                 first: int, quiet_pct: float, back: int, open_start: bool = False) -> int:
    """The longest silence (slices with no activity, blips included as activity) the job came back from with
    work: one whose end is followed by a burst slice in `busy` (indices into `values`, the lookback before the
    current quiet stretch) within `back` slices (the idle window), blips in between allowed: a model load or
    CUDA init that touches the GPU before the real work is part of coming back. A silence that only blips
    followed for longer than that shows nothing worth waiting for. Coarse slices not busy throughout may hide up
    to r-1 quiet fine slices at each end, counted in.

    A silence before the lookback's first activity counts only with `open_start` (the job was alive before the
    lookback began): it is at least its seen part long. Otherwise it ran from the job's start, a set-up, not a
    pause."""
    r = coarse.ratio if coarse is not None else 1
    work = busy  # ascending, as _periodic builds it

    def edge(k: int) -> int:
        return r - 1 if k >= 0 and coarse is not None and not coarse.solid(first + k, quiet_pct) else 0

    longest = 0
    last_active: int | None = -1 if open_start else None  # -1: the work before the lookback, if any
    w = 0  # the first burst slice at or after k
    for k, value in enumerate(values):
        if value is None or value <= quiet_pct:
            continue
        while w < len(work) and work[w] < k:
            w += 1
        if last_active is not None and w < len(work) and work[w] - k <= back:
            longest = max(longest, (k - last_active - 1) * r + edge(last_active) + edge(k))
        last_active = k
    return longest


def _gaps_could_protect(
    series: JobSeries, rule: LongTailRule, quiet_pct: float, quiet: int, lookback: int, bursts: int,
    material: list[bool],
) -> tuple[int, float] | None:
    """Whether some filling of the unknown slices in the lookback would make the job periodic and its
    current pause not yet long for it (the most protective reading of the gaps): then (the longest pause it could
    hide, the quiet that filling would need, both in fine slices), else None.

    Unknown: a slice inside the job's life (all of the lookback when its start is unknown) with no valid
    reading, or a quiet coarse slice with samples missing (a burst may hide in them). A slice before the
    job started is not a gap. A blip (`material` False) is quiet. The longest possible pause runs between two
    slices that may have been busy with no known busy slice in between; the longest possible working span from
    the first slice that may have been busy to the last. Both are reached by one filling, so the bound is tight
    up to the fine structure inside a coarse slice, which is read in the job's favour too.
    """
    coarse = series.history
    r = coarse.ratio if coarse is not None else 1
    step = series.slice_s * r
    values = coarse.util_max if coarse is not None else series.util_max
    frame = lookback - quiet // r  # the lookback's slices before the current quiet run
    if frame <= 0:
        return None
    start = series.at - timedelta(seconds=lookback * step)
    born = series.started_at
    kinds: list[str] = []  # "B" busy, "b" busy but not throughout, "U" unknown, "Q" quiet, "X" before the job
    for p in range(frame):
        k = len(values) - lookback + p
        value = values[k] if k >= 0 else None
        alive = born is None or start + timedelta(seconds=p * step) >= born - timedelta(seconds=1e-3)
        if value is not None and k < len(material) and material[k]:
            kinds.append("B" if coarse is None or coarse.solid(k, quiet_pct) else "b")
        elif not alive:
            kinds.append("X")
        elif value is None or (coarse is not None and not coarse.full[k]):
            kinds.append("U")
        else:
            kinds.append("Q")
    if "U" not in kinds:
        return None  # nothing unknown in the job's life: the reading above stands
    maybe = [p for p, kind in enumerate(kinds) if kind in "BbU"]
    ends = [0 if kind == "B" else r - 1 for kind in kinds]  # quiet fine slices a slice may hide at each end
    worked = (maybe[-1] - maybe[0] + 1) * r
    longest = max(0, r - 2)  # burst, pause, burst inside one unknown coarse slice
    last_busy: int | None = None
    for p in maybe:
        i = last_busy if last_busy is not None else maybe[0]
        if i < p:
            longest = max(longest, (p - i - 1) * r + ends[i] + ends[p])
        if kinds[p] != "U":
            last_busy = p
    # Two bursts need a slice that may have been quiet between two that may have been busy, or room for
    # a pause inside an unknown coarse slice.
    between = any(kind not in "Bb" for kind in kinds[maybe[0] + 1 : maybe[-1]])
    if bursts < 2 and not (between or r >= 3 or (r >= 2 and len(maybe) >= 2)):
        return None
    needed = max(rule.quiet_factor * longest, rule.quiet_share * worked)
    return (longest, needed) if quiet < needed else None
