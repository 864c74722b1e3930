"""Job lifecycle on the simulated clock: submit, first-fit placement, natural end, stops."""

from __future__ import annotations

from dataclasses import dataclass

from core.cluster import gpu_model_matches
from sim.logs import JobLog
from sim.scenario import Job
from sim.signals import JobSignals
from sim.topology import SimNode

ACTIVE = ("running", "stopping")


@dataclass(eq=False, slots=True)
class Run:
    """One scenario job and what has happened to it so far.

    state: waiting (not yet started, or no node has room) | running | stopping | completed | failed | cancelled.
    `end` is when the job released its GPUs; None while it holds them (or never got any).
    """

    index: int
    job: Job
    signals: JobSignals
    log: JobLog
    state: str = "waiting"
    start: float | None = None
    end: float | None = None
    node: SimNode | None = None
    gpus: tuple[int, ...] = ()
    stop_requested: float | None = None
    stopped_at: float | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def started(self) -> float:
        """Start offset of a job that has started (callers check `start` first)."""
        assert self.start is not None
        return self.start

    def running_at(self, t: float) -> bool:
        return self.start is not None and self.start <= t and (self.end is None or t < self.end)


class Lifecycle:
    """Processes starts and ends in time order up to a given offset; history before it never changes."""

    def __init__(self, jobs: list[Job], nodes: list[SimNode]) -> None:
        self.runs = [Run(i, job, sig := JobSignals(job), JobLog(sig)) for i, job in enumerate(jobs)]
        # Namesakes (one id, lifetimes that do not overlap) are distinct runs, oldest submit first.
        self.by_id: dict[str, list[Run]] = {}
        for run in sorted(self.runs, key=lambda r: (r.job.submit, r.index)):
            self.by_id.setdefault(run.job.id, []).append(run)
        self.nodes = nodes  # shared with the cluster, which adds and removes nodes
        self.settled_to = -1.0

    def current(self, job_id: str, t: float) -> Run | None:
        """The run an id names at time t: the latest submitted by then (else the first, not yet visible)."""
        runs = self.by_id.get(job_id)
        if not runs:
            return None
        due = [r for r in runs if r.job.submit <= t]
        return due[-1] if due else runs[0]

    def _next_event(self, until: float) -> float | None:
        best: float | None = None
        for run in self.runs:
            times: tuple[float | None, ...]
            if run.state == "waiting":
                times = (run.job.start_s, run.job.end)
            elif run.active:
                times = (run.job.end,)
            else:
                continue
            for t in times:
                if t is not None and self.settled_to < t <= until and (best is None or t < best):
                    best = t
        return best

    def settle(self, until: float) -> None:
        """Apply every start and natural end with time <= until."""
        while (t := self._next_event(until)) is not None:
            for run in self.runs:
                end = run.job.end
                if run.active and end is not None and end <= t:
                    self.release(run, end, "failed" if run.job.exit == "failed" else "completed")
                elif run.state == "waiting" and end is not None and end <= t:
                    run.state = "cancelled"  # never got GPUs before its end
            self.settled_to = t
            self.place_waiting(t)
        self.settled_to = max(self.settled_to, until)

    def busy_gpus(self, node: SimNode) -> set[int]:
        used: set[int] = set()
        for run in self.runs:
            if run.active and run.node is node:
                used.update(run.gpus)
        return used

    def place_waiting(self, t: float) -> None:
        """First-fit, in scenario order, for every due job still waiting."""
        for run in self.runs:
            if run.state == "waiting" and run.job.start_s <= t:
                self._place(run, t)

    def _place(self, run: Run, t: float) -> bool:
        want = run.job.gpus
        if run.job.pending_reason is not None:
            return False  # the scheduler holds it (a quota) whatever the free capacity
        candidates = [n for n in self.nodes if (run.job.node is None or n.name == run.job.node)
                      and gpu_model_matches(run.job.gpu_model, n.gpu_model)]
        for node in candidates:
            if node.created_at > t:
                continue
            free = [g for g in range(node.gpus) if g not in self.busy_gpus(node)]
            if len(free) >= want:
                run.node, run.gpus = node, tuple(free[:want])
                break
        else:
            if want > 0 or run.job.node is not None:
                return False
        run.state, run.start = "running", t
        return True

    def release(self, run: Run, t: float, state: str) -> None:
        run.state, run.end = state, t

    def jobs_on(self, node: SimNode) -> list[Run]:
        return [r for r in self.runs if r.active and r.node is node]

    def occupant(self, node: SimNode, gpu: int, t: float) -> Run | None:
        for run in self.runs:
            if run.node is node and gpu in run.gpus and run.running_at(t):
                return run
        return None
