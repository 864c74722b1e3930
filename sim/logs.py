"""Log lines a simulated job writes: training loss with a growing step counter, scripted lines, or silence."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sim.signals import JobSignals, PhaseSpan, seed_of, unit_noise

_EPS = 1e-6


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class JobLog:
    """Deterministic log of one job; line times are phase start + n * log_every (n >= 1)."""

    def __init__(self, signals: JobSignals) -> None:
        self.signals = signals
        seed = seed_of(signals.job.id)
        self._seed = seed ^ 0x4444
        self.steps_per_s = 0.5 + 2.5 * unit_noise(seed, 7, 7)  # training speed differs per job
        self.loss_start = 1.8 + 1.2 * unit_noise(seed, 8, 8)
        # seconds of loss logging that happened before each phase: the step counter never goes back
        self._loss_before: list[float] = []
        total = 0.0
        for phase in signals.phases:
            self._loss_before.append(total)
            if phase.log == "loss" and math.isfinite(phase.end):
                total += phase.end - phase.start

    def _text(self, index: int, phase: PhaseSpan, n: int, at: datetime) -> str:
        if phase.log == "lines":
            return phase.lines[(n - 1) % len(phase.lines)]
        step = int((self._loss_before[index] + n * phase.log_every) * self.steps_per_s)
        noise = (unit_noise(self._seed, index, n) - 0.5) * 0.02
        loss = 0.25 + self.loss_start / (1.0 + step / 4000.0) + noise
        return f"{_stamp(at)} step={step} loss={loss:.4f} lr=3e-4"

    def lines(self, origin: datetime, run_start: float, run_end: float, since: float, until: float,
              limit: int) -> list[tuple[datetime, str]]:
        """The newest `limit` lines with since <= t <= until and run_start < t < run_end, oldest first."""
        out: list[tuple[datetime, str]] = []
        if limit <= 0:
            return out
        phases = self.signals.phases
        for index in range(len(phases) - 1, -1, -1):
            phase = phases[index]
            if phase.log == "silent" or (phase.log == "lines" and not phase.lines):
                continue
            ps = run_start + phase.start
            lo = max(since, ps + _EPS)
            hi = min(until, run_start + phase.end, run_end)
            if hi < lo:
                continue
            every = phase.log_every
            n_min = max(1, math.ceil((lo - ps) / every - _EPS))
            n_max = math.floor((hi - ps) / every + _EPS)
            if ps + n_max * every >= run_end - _EPS:  # the job is gone at run_end
                n_max -= 1
            for n in range(n_max, n_min - 1, -1):
                at = origin + timedelta(seconds=ps + n * every)
                out.append((at, self._text(index, phase, n, at)))
                if len(out) >= limit:
                    return out[::-1]
        return out[::-1]
