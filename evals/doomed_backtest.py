"""Backtest of the doomed-job rules on finished-job records: precision, recall, flags and GPU-hours saved.

Each scored job is judged at its submission from the runs whose outcome was known before it: a run's
outcome counts as known at submit + duration (+ --delay, since the trace has no queue time). A flagged job
that failed "saves" its GPU-hours (the owner, warned, fixes it first); a flagged job that did not fail
saves nothing and is a false flag.

A few users make most flags, so beside the table: each precision's 95 % interval from resampling the scored
jobs' users (seeded, so the same every run), and each rule's precision on every fifth of the trace's
submissions, each judged with everything before it as history: one split is one draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agent.history.doomed import (
    DEFAULT_RULE,
    PLAIN_RULE,
    FinishedRun,
    JobToJudge,
    RunHistory,
    StreakRule,
    judge,
)
from evals.series import SeriesError, parse_time, read_header

REQUIRED = ("user", "submit_time", "gpus", "state", "duration_s")  # submit_time: seconds or ISO 8601
IDENTITY_EXTRA = ("cpus", "nodes")  # with user and gpus: the same request, the trace's nearest to "the same job"
# Final states, as the trace writes them and as Slurm does (Helios counts TIMEOUT and NODE_FAIL as failed).
FAILED_STATES = ("failed", "node_fail", "timeout", "out_of_memory")
OTHER_STATES = ("completed", "pass", "killed", "cancelled", "preempted")
SCORED_SHARE = 0.4  # without --train: the last 40% of submissions are scored; all earlier ones are history only
BASE_RATE = "base rate"
RULES = (PLAIN_RULE, DEFAULT_RULE)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
SLICES = 5  # the per-slice precisions: fifths of the trace's submissions


class JobTraceError(SeriesError):
    """A job trace that cannot be read; the message names the file, row and column."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    user: str
    submit_s: float
    gpus: int
    state: str  # normalised: failed / completed / killed / ...
    duration_s: float
    identity: str
    reason: str = ""

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.duration_s / 3600.0


def _state(text: str) -> str:
    s = text.strip().lower().split()[0] if text.strip() else ""
    if s in FAILED_STATES:
        return "failed"
    if s in OTHER_STATES:
        return "completed" if s == "pass" else "killed" if s == "cancelled" else s
    raise ValueError(f"{text!r} is not a final state (known: {', '.join(FAILED_STATES + OTHER_STATES)})")


def load_jobs(path: str | Path) -> list[TraceJob]:
    """One finished job per row, sorted by submission; row numbers count the header as row 1."""
    path = Path(path)
    source = str(path)
    header, reader = read_header(path)
    lowered = {h.lower(): h for h in header}
    missing = [c for c in REQUIRED if c not in lowered]
    if missing:
        raise JobTraceError(f"{source}: missing column(s) {', '.join(missing)}; a job trace needs "
                            f"{', '.join(REQUIRED)} (columns: {', '.join(header)})")
    extra = [lowered[c] for c in IDENTITY_EXTRA if c in lowered]
    reason_col = lowered.get("reason") or lowered.get("exit_code")
    jobs: list[TraceJob] = []
    for row_no, row in enumerate(reader, start=2):
        if None in row or any(row.get(h) is None for h in header):
            raise JobTraceError(f"{source}: row {row_no} has a different number of fields than the header")

        def number(col: str, row=row, row_no=row_no) -> float:
            text = row[lowered[col]].strip()
            try:
                value = parse_time(text) if col == "submit_time" else float(text)
            except ValueError:
                raise JobTraceError(f"{source}: row {row_no}, column {lowered[col]!r}: {text!r} is not a number") \
                    from None
            if not math.isfinite(value) or value < 0:
                raise JobTraceError(f"{source}: row {row_no}, column {lowered[col]!r}: {text!r} must be a finite "
                                    "number >= 0")
            return value

        user = row[lowered["user"]].strip()
        if not user:
            raise JobTraceError(f"{source}: row {row_no}, column {lowered['user']!r}: empty user")
        try:
            state = _state(row[lowered["state"]])
        except ValueError as exc:
            raise JobTraceError(f"{source}: row {row_no}, column {lowered['state']!r}: {exc}") from None
        gpus = number("gpus")
        if gpus != int(gpus):
            raise JobTraceError(f"{source}: row {row_no}, column {lowered['gpus']!r}: {gpus:g} is not a whole "
                                "number of GPUs")
        identity = "|".join([user, str(int(gpus)), *(row[c].strip() for c in extra)])
        jobs.append(TraceJob(user=user, submit_s=number("submit_time"), gpus=int(gpus), state=state,
                             duration_s=number("duration_s"), identity=identity,
                             reason=row[reason_col].strip() if reason_col else ""))
    if not jobs:
        raise JobTraceError(f"{source}: no data rows")
    return sorted(jobs, key=lambda j: j.submit_s)


def after(earlier: list[TraceJob], later: list[TraceJob]) -> list[TraceJob]:
    """`later` on the same clock as `earlier`: shifted to start just after it when both count from their own zero."""
    if not earlier or not later or later[0].submit_s > earlier[-1].submit_s:
        return later
    shift = earlier[-1].submit_s - later[0].submit_s + 1.0
    return [TraceJob(j.user, j.submit_s + shift, j.gpus, j.state, j.duration_s, j.identity, j.reason) for j in later]


@dataclass
class RuleScore:
    name: str
    flagged: int
    hits: int  # flagged jobs that failed
    failed: int  # failed jobs among the scored
    gpu_hours_saved: float  # GPU-hours of flagged jobs that failed
    false_flag_gpu_hours: float  # GPU-hours of flagged jobs that did not fail
    largest_false_flag: float = 0.0  # GPU-hours of the biggest single falsely flagged job
    by_user: dict[str, tuple[int, int]] = field(default_factory=dict)  # user -> (flagged, hits)

    @property
    def precision(self) -> float:
        return self.hits / self.flagged if self.flagged else 0.0

    @property
    def recall(self) -> float:
        return self.hits / self.failed if self.failed else 0.0


def beats_plain_rule(candidate: RuleScore, plain: RuleScore) -> bool:
    """A doomed-job flag tells a person their job will fail, so a wrong one costs most: a rule beats the plain
    rule only if it is more precise and puts fewer GPU-hours of healthy jobs under a false flag."""
    return candidate.precision > plain.precision and candidate.false_flag_gpu_hours < plain.false_flag_gpu_hours


@dataclass
class DoomedBacktest:
    scored: int  # GPU jobs judged
    failed: int
    failed_gpu_hours: float
    first_scored_s: float
    last_scored_s: float
    delay_s: float
    scores: list[RuleScore]
    default: str
    users: list[str] = field(default_factory=list)  # the scored GPU jobs' users, the bootstrap's units

    @property
    def beats_plain(self) -> bool:
        by = {s.name: s for s in self.scores}
        return beats_plain_rule(by[self.default], by[PLAIN_RULE.name])


def backtest(scored: list[TraceJob], history: list[TraceJob], *, delay_s: float = 0.0,
             rules: tuple[StreakRule, ...] = RULES) -> DoomedBacktest:
    """Judge every GPU job in `scored` at its submission; `history` holds the jobs before them (may overlap)."""
    if delay_s < 0 or not math.isfinite(delay_s):
        raise ValueError(f"delay must be a finite number of seconds >= 0, not {delay_s!r}")
    seen: set[int] = set()
    runs = RunHistory()
    for job in [*history, *scored]:
        if id(job) in seen:
            continue
        seen.add(id(job))
        runs.add(FinishedRun(identity=job.identity, user=job.user, gpus=job.gpus,
                             ended_at=job.submit_s + job.duration_s + delay_s, state=job.state,
                             duration_s=job.duration_s, reason=job.reason))
    gpu_jobs = [j for j in scored if j.gpus > 0]
    if not gpu_jobs:
        raise ValueError("no GPU jobs to score (every job has gpus = 0)")
    failed = [j for j in gpu_jobs if j.failed]
    scores = []
    for rule in (None, *rules):
        s = RuleScore(BASE_RATE if rule is None else rule.name, 0, 0, len(failed), 0.0, 0.0)
        for j in gpu_jobs:
            # Known strictly before the submission: the job's own outcome (ending at or after it) never counts.
            now = math.nextafter(j.submit_s, -math.inf)
            if rule is not None and judge(rule, runs, JobToJudge(j.identity, j.user, j.gpus), now) is None:
                continue
            s.flagged += 1
            flags, hits = s.by_user.get(j.user, (0, 0))
            s.by_user[j.user] = (flags + 1, hits + int(j.failed))
            if j.failed:
                s.hits += 1
                s.gpu_hours_saved += j.gpu_hours
            else:
                s.false_flag_gpu_hours += j.gpu_hours
                s.largest_false_flag = max(s.largest_false_flag, j.gpu_hours)
        scores.append(s)
    return DoomedBacktest(scored=len(gpu_jobs), failed=len(failed), failed_gpu_hours=scores[0].gpu_hours_saved,
                          first_scored_s=gpu_jobs[0].submit_s, last_scored_s=gpu_jobs[-1].submit_s, delay_s=delay_s,
                          scores=scores, default=DEFAULT_RULE.name, users=sorted({j.user for j in gpu_jobs}))


@dataclass
class UserBootstrap:
    """95 % intervals from resampling the scored jobs' users with replacement (every rule on the same draws)."""

    precision: dict[str, tuple[float, float]]  # rule -> (2.5 %, 97.5 %)
    difference: tuple[float, float]  # the default's precision minus the plain rule's
    default_ahead: float  # share of draws in which the default is the more precise


def by_user_bootstrap(result: DoomedBacktest, resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> UserBootstrap:
    """Flags from one user are not independent draws (a user's loop makes many), so the user is the unit."""
    users = result.users
    draws = np.random.default_rng(seed).integers(0, len(users), size=(resamples, len(users)))
    precision: dict[str, np.ndarray] = {}
    for s in result.scores:
        flags = np.array([s.by_user.get(u, (0, 0))[0] for u in users], dtype=float)[draws].sum(axis=1)
        hits = np.array([s.by_user.get(u, (0, 0))[1] for u in users], dtype=float)[draws].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision[s.name] = np.where(flags > 0, hits / flags, np.nan)

    def interval(x: np.ndarray) -> tuple[float, float]:
        x = x[np.isfinite(x)]
        if not len(x):
            return math.nan, math.nan
        lo, hi = np.quantile(x, (0.025, 0.975))
        return float(lo), float(hi)

    diff = precision[result.default] - precision[PLAIN_RULE.name]
    finite = diff[np.isfinite(diff)]
    return UserBootstrap(precision={name: interval(p) for name, p in precision.items()}, difference=interval(diff),
                         default_ahead=float((finite > 0).mean()) if len(finite) else math.nan)


def by_slice(jobs: list[TraceJob], earlier: list[TraceJob], *, delay_s: float = 0.0, parts: int = SLICES,
             rules: tuple[StreakRule, ...] = RULES) -> list[tuple[float, float, DoomedBacktest]]:
    """Each `parts`-th of `jobs` (in submission order) scored with `earlier` and the jobs before it as history;
    a slice without GPU jobs is left out. (from, to) are shares of `jobs`."""
    out = []
    for k in range(parts):
        a, b = round(len(jobs) * k / parts), round(len(jobs) * (k + 1) / parts)
        if not any(j.gpus > 0 for j in jobs[a:b]):
            continue
        out.append((k / parts, (k + 1) / parts, backtest(jobs[a:b], [*earlier, *jobs[:a]], delay_s=delay_s,
                                                         rules=rules)))
    return out


def split(jobs: list[TraceJob], scored_share: float = SCORED_SHARE) -> tuple[list[TraceJob], list[TraceJob]]:
    """(history only, scored): the first submissions, then the last `scored_share` of them, in time order."""
    cut = int(round(len(jobs) * (1.0 - scored_share)))
    return jobs[:cut], jobs[cut:]


def rows(result: DoomedBacktest) -> list[dict]:
    return [{"name": s.name, "precision": round(s.precision, 4), "recall": round(s.recall, 4),
             "flagged": s.flagged, "gpu_hours_saved": round(s.gpu_hours_saved, 2)} for s in result.scores]


def to_json(result: DoomedBacktest, boot: UserBootstrap,
            slices: list[tuple[float, float, DoomedBacktest]]) -> dict:
    return {"rows": rows(result), "default": result.default,
            "by_user_interval": {name: [round(lo, 4), round(hi, 4)] for name, (lo, hi) in boot.precision.items()},
            "slices": [{"from": a, "to": b, "scored": r.scored,
                        "precision": {s.name: round(s.precision, 4) for s in r.scores},
                        "flagged": {s.name: s.flagged for s in r.scores}} for a, b, r in slices]}


DESCRIPTIONS = {
    BASE_RATE: "every GPU job flagged",
    PLAIN_RULE.name: "the same user's last 3 finished jobs with the same GPU count all failed",
    DEFAULT_RULE.name: "the same job's last 3 runs (user, GPUs, CPUs, nodes) all failed within 10 min, "
                       "the latest in the last 24 h, with one reason where known",
}


def print_table(result: DoomedBacktest, trace: str, split_note: str) -> None:
    print(f"Doomed-job backtest on {trace}: {result.scored} GPU jobs scored ({split_note}), submitted from "
          f"day {result.first_scored_s / 86400:.1f} to day {result.last_scored_s / 86400:.1f}")
    print(f"Base rate: {result.failed / result.scored:.1%} of them failed, holding {result.failed_gpu_hours:.1f} "
          f"GPU-h. An outcome counts as known at submit + duration + {result.delay_s:g} s.")
    header = (f"{'rule':<14} {'precision':>9} {'recall':>7} {'flagged':>8} {'GPU-h saved':>12} "
              f"{'GPU-h falsely flagged':>22}")
    print(header)
    print("-" * len(header))
    for s in result.scores:
        name = s.name + (" *" if s.name == result.default else "")
        print(f"{name:<14} {s.precision:>9.1%} {s.recall:>7.1%} {s.flagged:>8} {s.gpu_hours_saved:>12.1f} "
              f"{s.false_flag_gpu_hours:>22.1f}")
    for name, text in DESCRIPTIONS.items():
        print(f"  {name}: {text}")
    verdict = "yes" if result.beats_plain else "NO"
    print(f"* default. It beats the plain rule on this trace (more precise, fewer GPU-h falsely flagged): {verdict}")
    for s in result.scores[1:]:
        if s.false_flag_gpu_hours:
            print(f"  {s.name}: the largest single false flag holds {s.largest_false_flag:.1f} GPU-h, "
                  f"{s.largest_false_flag / s.false_flag_gpu_hours:.0%} of its falsely flagged GPU-h")


def print_spread(result: DoomedBacktest, boot: UserBootstrap, slices: list[tuple[float, float, DoomedBacktest]],
                 scored_from: float | None) -> None:
    """How far the precisions would move on other users and other stretches of the trace."""
    print(f"Precision, 95 % interval over {BOOTSTRAP_RESAMPLES} resamples of the {len(result.users)} scored users "
          f"(seed {BOOTSTRAP_SEED}): " + "; ".join(f"{name} {lo:.1%}-{hi:.1%}"
                                                  for name, (lo, hi) in boot.precision.items()))
    lo, hi = boot.difference
    print(f"  {result.default} minus plain rule: {100 * lo:+.1f} to {100 * hi:+.1f} points; {result.default} the more "
          f"precise in {boot.default_ahead:.0%} of resamples")
    if not slices:
        return
    names = [s.name for s in slices[0][2].scores]
    print("Precision on each fifth of the submissions, judged with everything before it as history (flagged):")
    for a, b, r in slices:
        held = " (scored above)" if scored_from is not None and a >= scored_from - 1e-9 else ""
        cells = ", ".join(f"{s.name} {s.precision:.1%} ({s.flagged})" for s in r.scores if s.name in names[1:])
        print(f"  {a:.0%}-{b:.0%}{held}: {r.scored} GPU jobs, base rate {r.failed / r.scored:.1%}; {cells}")
