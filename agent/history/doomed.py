"""Doomed jobs: a new or running job whose recent identical runs all failed fast, the same way.

A rule is a streak over finished history: the last N runs under one key (the job's identity, or the
user and GPU count) all failed, optionally each within `fast_s`, the newest within `within_s` of now,
all with one reason. History is queried *at a moment*: a run whose outcome became known after that
moment is invisible, so a backtest that hands in the whole trace cannot leak the future.
Pure: no I/O, no clock; the caller says what time it is.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from core.durations import format_duration

KeyKind = Literal["identity", "user_gpus"]
FAILED = "failed"

# Ends the infrastructure chose, not the job: a node lost or failed, a preemption, a spot reclaim, an eviction. A
# run ended that way says nothing about whether the job works, so it is no failure in a streak (Slurm states and
# reasons, Kubernetes pod reasons and the DisruptionTarget condition).
INFRASTRUCTURE_ENDS = re.compile(r"\b(node_?fail|boot_fail|preempt\w*|evicted|nodelost|node_?shutdown|shutdown|"
                                 r"disruptiontarget|spot\w*|reclaim\w*|terminationbyk(?:ubelet)?)\b", re.IGNORECASE)


def infrastructure_end(reason: str) -> bool:
    """Whether a failure reason names an end the infrastructure chose (NODE_FAIL, Evicted, Preempted, ...)."""
    return bool(reason) and INFRASTRUCTURE_ENDS.search(reason) is not None


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """One finished run, as the scheduler reported it."""

    identity: str  # what makes two runs "the same job": user + image + command + GPUs (trace: user+gpus+cpus+nodes)
    user: str
    gpus: int
    ended_at: float  # seconds on the caller's clock: when the outcome became known
    state: str  # the final state, lower case: completed / failed / killed (cancelled) / ...
    duration_s: float
    reason: str = ""  # exit code or failure reason where the scheduler gives one; "" = unknown

    @property
    def failed(self) -> bool:
        """Failed by its own doing: a run the infrastructure ended (infrastructure_end) is not counted."""
        return self.state == FAILED and not infrastructure_end(self.reason)

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.duration_s / 3600.0


@dataclass(frozen=True, slots=True)
class JobToJudge:
    """A job just submitted or still running."""

    identity: str
    user: str
    gpus: int


@dataclass(frozen=True, slots=True)
class StreakRule:
    """Flag a job when the last `runs` finished runs under its key all failed (fast, recently, alike)."""

    name: str
    key: KeyKind
    runs: int = 3
    fast_s: float | None = None  # each failure ended within this long after its start; None = any length
    within_s: float | None = None  # the newest failure became known at most this long before now
    same_reason: bool = False  # all with one reason (when the scheduler reports reasons)

    def __post_init__(self) -> None:
        if self.key not in ("identity", "user_gpus"):
            raise ValueError(f"rule {self.name!r}: key must be 'identity' or 'user_gpus', not {self.key!r}")
        if self.runs < 1:
            raise ValueError(f"rule {self.name!r}: runs must be at least 1, not {self.runs}")
        for label, value in (("fast_s", self.fast_s), ("within_s", self.within_s)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"rule {self.name!r}: {label} must be a positive number of seconds, not {value!r}")


# The baseline the issue names: the same user's last 3 finished jobs with the same GPU count all failed.
PLAIN_RULE = StreakRule("plain rule", key="user_gpus", runs=3)
# A crash loop: a failure at start-up (bad path, import error, OOM at the first step) repeats the same way
# within minutes, while a failure after a long run (a node, a NaN) rarely repeats; 10 minutes leaves room
# for image pull and data loading. A streak older than a day says little about today's code.
CRASH_LOOP = StreakRule("crash loop", key="identity", runs=3, fast_s=600.0, within_s=86400.0, same_reason=True)
# Chosen on the dev part of the Helios trace (its first 60 %) because there it is more precise than the plain rule
# and puts fewer GPU-hours of healthy jobs under a false flag; confirmed on the held-out last 40 %, by a margin
# smaller than the spread over users and stretches of the trace (docs/doomed-jobs.md).
DEFAULT_RULE = CRASH_LOOP


def history_key(kind: KeyKind, identity: str, user: str, gpus: int) -> str:
    return identity if kind == "identity" else f"{user}\x1f{gpus}"


class RunHistory:
    """Finished runs per key, ordered by when their outcome became known."""

    def __init__(self, runs: Iterable[FinishedRun] = ()) -> None:
        self._ends: dict[tuple[str, str], list[float]] = {}
        self._runs: dict[tuple[str, str], list[FinishedRun]] = {}
        for run in runs:
            self.add(run)

    def add(self, run: FinishedRun) -> None:
        if not math.isfinite(run.ended_at):
            raise ValueError(f"run of {run.identity!r}: ended_at must be a finite time, not {run.ended_at!r}")
        kinds: tuple[KeyKind, ...] = ("identity", "user_gpus")
        for kind in kinds:
            slot = (kind, history_key(kind, run.identity, run.user, run.gpus))
            ends = self._ends.setdefault(slot, [])
            at = bisect.bisect_right(ends, run.ended_at)
            ends.insert(at, run.ended_at)
            self._runs.setdefault(slot, []).insert(at, run)

    def last(self, kind: KeyKind, key: str, now: float, n: int) -> list[FinishedRun]:
        """The newest `n` runs under the key whose outcome was known at `now` (oldest first)."""
        slot = (kind, key)
        ends = self._ends.get(slot)
        if not ends:
            return []
        known = bisect.bisect_right(ends, now)
        return self._runs[slot][max(0, known - n):known]


@dataclass(frozen=True, slots=True)
class DoomedVerdict:
    """Why a job is flagged: the rule and the runs that make the streak (oldest first)."""

    rule: StreakRule
    job: JobToJudge
    runs: tuple[FinishedRun, ...]
    now: float

    @property
    def lost_gpu_hours(self) -> float:
        return sum(r.gpu_hours for r in self.runs)

    def explain(self, lang: str = "en") -> str:
        n = len(self.runs)
        longest = max(r.duration_s for r in self.runs)
        since = max(0.0, self.now - self.runs[-1].ended_at)
        reasons = {r.reason for r in self.runs}
        reason = next(iter(reasons)) if len(reasons) == 1 else ""
        if lang == "zh":
            subject = (f"该作业最近 {n} 次运行" if self.rule.key == "identity"
                       else f"用户 {self.job.user} 最近 {n} 个 {self.job.gpus} 卡作业")
            text = f"{subject}全部失败，最长的一次运行了 {_zh(longest)}"
            text += f"（原因：{reason}）" if reason else ""
            return f"{text}；最近一次在 {_zh(since)}前结束，共占用 {self.lost_gpu_hours:.1f} GPU 小时。"
        subject = (f"The last {n} runs of this job" if self.rule.key == "identity"
                   else f"User {self.job.user}'s last {n} finished jobs with {self.job.gpus} GPUs")
        text = f"{subject} all failed, the longest after {format_duration(longest)}"
        text += f" (reason: {reason})" if reason else ""
        return (f"{text}; the latest ended {format_duration(since)} ago, and they held "
                f"{self.lost_gpu_hours:.1f} GPU-hours.")


def judge(rule: StreakRule, history: RunHistory, job: JobToJudge, now: float) -> DoomedVerdict | None:
    """The verdict if the rule flags the job at `now`, from runs known by then; None otherwise."""
    runs = history.last(rule.key, history_key(rule.key, job.identity, job.user, job.gpus), now, rule.runs)
    if len(runs) < rule.runs or not all(r.failed for r in runs):
        return None
    if rule.fast_s is not None and any(r.duration_s > rule.fast_s for r in runs):
        return None
    if rule.within_s is not None and now - runs[-1].ended_at > rule.within_s:
        return None
    if rule.same_reason and len({r.reason for r in runs}) > 1:
        return None
    return DoomedVerdict(rule=rule, job=job, runs=tuple(runs), now=now)


def _zh(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} 秒"
    if seconds < 3600:
        return f"{seconds // 60} 分钟"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} 小时 {minutes} 分钟" if minutes else f"{hours} 小时"
