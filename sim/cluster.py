"""SimCluster: a scenario played on a simulated clock behind the metrics, scheduler, log and pool protocols."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from core.cluster import (
    FinishedJob,
    GpuHistory,
    GpuSeries,
    JobInfo,
    JobIoSeries,
    JobState,
    LogLine,
    NodeInfo,
    PoolInfo,
    ResizeResult,
    StopResult,
    gpu_model_matches,
)
from sim import exporter
from sim.lifecycle import Lifecycle, Run
from sim.metrics import MetricSlices
from sim.scenario import Scenario
from sim.topology import build_nodes, new_pool_node

StopStatus = Literal["stopped", "stopping", "already_gone", "refused", "error"]
ResizeStatus = Literal["resized", "unchanged", "refused", "error"]


@dataclass(frozen=True, slots=True)
class StopRecord:
    """One stop_job call, for tests and scorers."""

    job: str
    at: float  # scenario offset, seconds
    force: bool
    status: str
    grace_s: float = 0.0
    reason: str = ""


class SimCluster:
    """Implements MetricsSource, JobScheduler, LogSource, NodePools and Clock over one scenario."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.offset_s = 0.0
        self.backend_calls = 0
        self.stops: list[StopRecord] = []
        nodes, self._next_index = build_nodes(scenario)
        self._pools = {p.name: p.model_copy() for p in scenario.pools}
        self._history_cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._lifecycle = Lifecycle(scenario.jobs, nodes)
        self._metrics = MetricSlices(self._lifecycle, scenario.start, scenario.step)
        self._lifecycle.settle(0.0)

    # -- clock -----------------------------------------------------------------------------------
    def now(self) -> datetime:
        return self.scenario.start + timedelta(seconds=self.offset_s)

    def advance_to(self, offset_s: float) -> None:
        """Move the clock forward (never back: what happened stays happened)."""
        if offset_s < self.offset_s:
            raise ValueError(f"the simulated clock only moves forward ({offset_s} < {self.offset_s})")
        self._lifecycle.settle(offset_s)
        self.offset_s = float(offset_s)
        self._metrics.prune(self.offset_s)

    def keep_metrics_for(self, seconds: float | None) -> None:
        """Metrics retention, like Prometheus' --storage.tsdb.retention.time (None: keep the whole scenario)."""
        self._metrics.retention_s = seconds

    def advance(self, seconds: float) -> None:
        self.advance_to(self.offset_s + seconds)

    def offset_of(self, at: datetime) -> float:
        return (at - self.scenario.start).total_seconds()

    # -- metrics ---------------------------------------------------------------------------------
    def gpu_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuSeries]:
        self.backend_calls += 1
        return self._metrics.gpu_series(self.offset_of(end), self.offset_s, lookback_s, slice_s)

    def gpu_history(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuHistory]:
        self.backend_calls += 1
        return self._metrics.gpu_history(self.offset_of(end), self.offset_s, lookback_s, slice_s)

    def job_io_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[JobIoSeries]:
        self.backend_calls += 1
        return self._metrics.job_io_series(self.offset_of(end), self.offset_s, lookback_s, slice_s)

    def exporter_text(self) -> str:
        """What dcgm-exporter's /metrics would serve right now."""
        return exporter.render(self._lifecycle, self.offset_s, self.scenario.step)

    @property
    def lifecycle(self) -> Lifecycle:
        """The jobs' runs and nodes, read-only, for renderers such as sim/cadvisor.py."""
        return self._lifecycle

    # -- scheduler -------------------------------------------------------------------------------
    def _visible(self, run: Run) -> bool:
        return run.job.submit <= self.offset_s

    def _state(self, run: Run) -> JobState:
        return "pending" if run.state == "waiting" else cast(JobState, run.state)

    def _pending_reason(self, run: Run) -> tuple[str | None, str | None]:
        """Why a waiting job waits, in its scheduler's words: scripted (a quota), else from the nodes now."""
        job = run.job
        if job.pending_reason is not None:
            return job.pending_reason, job.pending_message
        nodes = [n for n in self._lifecycle.nodes if n.created_at <= self.offset_s]
        if job.scheduler == "slurm":
            return "Resources", None
        wrong = [n for n in nodes if (job.node is not None and n.name != job.node)
                 or not gpu_model_matches(job.gpu_model, n.gpu_model)]
        short = [n for n in nodes if n not in wrong and n.gpus - len(self._lifecycle.busy_gpus(n)) < job.gpus]
        parts = ([f"{len(short)} Insufficient nvidia.com/gpu"] if short else []) + (
            [f"{len(wrong)} node(s) didn't match Pod's node affinity/selector"] if wrong else [])
        return "Unschedulable", f"0/{len(nodes)} nodes are available: {', '.join(parts)}."

    def _info(self, run: Run) -> JobInfo:
        job = run.job
        # As the Kubernetes adapter reads it (tools/k8s_pods.owner_kind): a ReplicaSet's pods carry pod-template-hash.
        owner = ("batch" if job.scheduler == "slurm" else "Job" if "job-name" in job.labels
                 else "Deployment" if "pod-template-hash" in job.labels else "Pod")
        owned = job.owner  # a scripted ownerReference (an operator's custom resource, a StatefulSet) wins
        if owned is not None:
            # Kubeflow's notebook controller labels the pods of a Notebook's StatefulSet: read as the Notebook's, as
            # the adapter reads them.
            owner = "Notebook" if owned.kind == "StatefulSet" and "notebook-name" in job.labels else owned.kind
        at = self.scenario.start
        reason, message = self._pending_reason(run) if run.state == "waiting" else (None, None)
        return JobInfo(
            id=job.id, uid=f"sim:{job.id}@{job.submit:g}", scheduler=job.scheduler, namespace=job.namespace, name=job.name, user=job.user,
            project=job.project or job.namespace, gpus=job.gpus, node=run.node.name if run.node else None,
            state=self._state(run), priority=job.priority, labels=dict(job.labels),
            priority_class=job.priority_class if job.scheduler == "kubernetes" else None,
            qos=job.qos if job.scheduler == "slurm" else None,
            annotations=dict(job.annotations), owner_kind=owner,
            owner_name=owned.name if owned is not None else None,
            owner_uid=f"sim:{job.namespace}/{owned.kind}/{owned.name}" if owned is not None else "",
            started_at=at + timedelta(seconds=run.start) if run.start is not None else None,
            stop_requested_at=at + timedelta(seconds=run.stop_requested) if run.stop_requested is not None else None,
            submitted_at=at + timedelta(seconds=job.submit), gpu_model=job.gpu_model,
            pending_reason=reason, pending_message=message, image=job.image, command=job.command,
            ended_at=at + timedelta(seconds=run.end) if run.end is not None and not run.active else None,
            **self._restarts(run),
        )

    def _restarts(self, run: Run) -> dict[str, Any]:
        """What the kubelet reports of a container restarting in place (RestartLoop), at the simulated now: the
        restarts so far, the last run's termination and, between runs, CrashLoopBackOff."""
        loop = run.job.restart_loop
        if loop is None or run.start is None or not run.active:
            return {}
        cycle = loop.run + loop.backoff
        done, into = divmod(self.offset_s - run.start, cycle)
        ended = int(done) + (1 if into >= loop.run else 0)  # runs that have exited
        if ended == 0:
            return {}
        last_end = run.start + (ended - 1) * cycle + loop.run
        return {"restarts": int(done), "last_exit": loop.reason, "last_run_s": loop.run,
                "last_exit_at": self.scenario.start + timedelta(seconds=last_end),
                "waiting": "CrashLoopBackOff" if into >= loop.run else None}

    def list_jobs(self) -> list[JobInfo]:
        self.backend_calls += 1
        return [self._info(r) for r in self._lifecycle.runs
                if self._visible(r) and (r.active or r.state == "waiting")]

    def get_job(self, job_id: str) -> JobInfo | None:
        self.backend_calls += 1
        run = self._lifecycle.current(job_id, self.offset_s)
        return self._info(run) if run is not None and self._visible(run) else None

    def list_nodes(self) -> list[NodeInfo]:
        self.backend_calls += 1
        return [NodeInfo(name=n.name, pool=n.pool, gpus=n.gpus, gpu_model=n.gpu_model,
                         jobs=[r.job.id for r in self._lifecycle.jobs_on(n)], labels=n.labels_at(self.offset_s))
                for n in self._lifecycle.nodes]

    def failed_jobs(self, since: datetime) -> list[JobInfo]:
        """Jobs that ended failed at or after `since` (a scenario job with `exit: failed`): one call, like listing
        Kubernetes pods in phase Failed or `sacct --state=FAILED` (docs/changes.md)."""
        self.backend_calls += 1
        start = self.offset_of(since)
        return [self._info(r) for r in self._lifecycle.runs
                if r.state == "failed" and r.end is not None and start <= r.end <= self.offset_s]

    def list_finished(self, since: datetime) -> list[FinishedJob]:
        """Runs that ended (completed, failed or stopped) at or after `since`, oldest end first, with what they ran
        and the failure reason (docs/doomed-jobs.md): one call, like `sacct` or a Job's pod history."""
        self.backend_calls += 1
        at, start, out = self.scenario.start, self.offset_of(since), []
        for run in self._lifecycle.runs:
            if (run.end is None or run.start is None or run.state not in ("completed", "failed", "cancelled")
                    or not start <= run.end <= self.offset_s):
                continue
            job = run.job
            out.append(FinishedJob(
                id=job.id, uid=f"sim:{job.id}@{job.submit:g}", user=job.user, project=job.project or job.namespace,
                gpus=job.gpus, node=run.node.name if run.node else None, image=job.image, command=job.command,
                started_at=at + timedelta(seconds=run.start), ended_at=at + timedelta(seconds=run.end),
                state=cast(Any, run.state), reason=(job.exit_reason or "") if run.state == "failed" else ""))
        return sorted(out, key=lambda f: f.ended_at)

    def scripted_changes(self, since: datetime) -> list[dict[str, object]]:
        """The scenario's `changes:` due after `since` and by now, as a person would record them (no backend call)."""
        start, out = self.offset_of(since), []
        for c in self.scenario.changes:
            if start < c.at <= self.offset_s:
                out.append({"kind": c.kind, "target": c.target, "description": c.description, "by": c.by,
                            "at": self.scenario.start + timedelta(seconds=c.at)})
        return out

    def stop_job(self, job_id: str, *, force: bool, grace_s: float = 0.0, reason: str = "",
                 uid: str | None = None) -> StopResult:
        """SIGTERM (a job that ignores it keeps running as `stopping`) or a forced reclaim; idempotent."""
        run = self._lifecycle.current(job_id, self.offset_s)
        now = self.offset_s
        status: StopStatus
        if uid and run is not None and self._info(run).uid != uid:
            status, detail = "refused", f"{job_id} is another job now (uid {self._info(run).uid}, not {uid})"
        elif run is None or not self._visible(run) or run.state in ("completed", "failed", "cancelled"):
            status, detail = "already_gone", "no such job" if run is None else "job already ended"
        elif run.state == "waiting":
            run.state = "cancelled"  # it never held GPUs, so stop_offset stays None
            status, detail = "stopped", "pending job removed from the queue"
        elif force or run.job.sigterm == "exits":
            self._lifecycle.release(run, now, "cancelled")
            run.stopped_at = now
            if run.stop_requested is None:
                run.stop_requested = now
            self._lifecycle.place_waiting(now)
            status, detail = "stopped", "killed" if force else "exited on SIGTERM"
        else:
            if run.stop_requested is None:
                run.stop_requested = now
            run.state = "stopping"
            status, detail = "stopping", "SIGTERM sent; the job has not exited"
        self.stops.append(StopRecord(job_id, now, force, status, grace_s, reason))
        return StopResult(job=job_id, status=status, detail=detail)

    # -- logs ------------------------------------------------------------------------------------
    def tail(self, job_id: str, since: datetime, until: datetime, limit: int = 200) -> list[LogLine]:
        self.backend_calls += 1
        run = self._lifecycle.current(job_id, self.offset_s)
        if run is None or run.start is None:
            return []
        end = min(run.end if run.end is not None else float("inf"), self.offset_s + 1.0)
        lines = run.log.lines(self.scenario.start, run.start, end, self.offset_of(since),
                              min(self.offset_of(until), self.offset_s), limit)
        return [LogLine(at=at, text=text) for at, text in lines]

    # -- pools -----------------------------------------------------------------------------------
    def list_pools(self) -> list[PoolInfo]:
        self.backend_calls += 1
        out = []
        for pool in self._pools.values():
            nodes = [n for n in self._lifecycle.nodes if n.pool == pool.name]
            busy = sum(1 for n in nodes if self._lifecycle.jobs_on(n))
            used = sum(len(r.gpus) for n in nodes for r in self._lifecycle.jobs_on(n))
            out.append(PoolInfo(name=pool.name, provider=pool.provider, gpu_model=pool.gpu_model,
                                gpus_per_node=pool.gpus_per_node, nodes=len(nodes), min_nodes=pool.min_nodes,
                                max_nodes=pool.max_nodes, price_per_gpu_hour=pool.price_per_gpu_hour,
                                billing=pool.billing, busy_nodes=busy, used_gpus=used,
                                currency=self.scenario.currency, **self._load_history(pool)))
        return out

    def _load_history(self, pool: Any) -> dict[str, Any]:
        """The pool's past load from the scenario's `history` extension: it ends at the scenario's start."""
        if pool.history is None:
            return {}
        key = ("history", pool.name)
        if key not in self._history_cache:
            end, values = pool.history.hourly(self.scenario.start, float(pool.nodes * pool.gpus_per_node))
            self._history_cache[key] = {"load_history": values, "load_history_end": end}
        return self._history_cache[key]

    def resize_pool(self, pool: str, target_nodes: int, *, reason: str = "") -> ResizeResult:
        """Grow with new `<pool>-<i>` nodes or shrink by removing empty nodes, newest first."""
        spec = self._pools.get(pool)
        nodes = [n for n in self._lifecycle.nodes if n.pool == pool]
        before = len(nodes)

        def result(status: ResizeStatus, after: int = before, removed: list[str] | None = None,
                   detail: str = "") -> ResizeResult:
            return ResizeResult(pool=pool, status=status, nodes_before=before, nodes_after=after,
                                removed_nodes=removed or [], detail=detail)
        if spec is None:
            return result("error", detail=f"unknown pool {pool!r}")
        if target_nodes == before:
            return result("unchanged")
        if target_nodes < spec.min_nodes or (spec.max_nodes is not None and target_nodes > spec.max_nodes):
            return result("refused", detail=f"target {target_nodes} is outside [{spec.min_nodes}, "
                                            f"{spec.max_nodes if spec.max_nodes is not None else 'unbounded'}]")
        if target_nodes > before:
            for _ in range(target_nodes - before):
                i = self._next_index[pool]
                self._next_index[pool] = i + 1
                uid = max((n.uid for n in self._lifecycle.nodes), default=-1) + 1
                self._lifecycle.nodes.append(new_pool_node(uid, f"{pool}-{i}", spec, self.offset_s))
            self._lifecycle.place_waiting(self.offset_s)
            return result("resized", target_nodes)
        empty = [n for n in reversed(nodes) if not self._lifecycle.jobs_on(n)]
        need = before - target_nodes
        if len(empty) < need:
            return result("refused", detail=f"only {len(empty)} of {before} nodes run no job; {need} would have to go")
        gone = empty[:need]
        self._lifecycle.nodes[:] = [n for n in self._lifecycle.nodes if n not in gone]
        return result("resized", target_nodes, [n.name for n in gone])

    # -- answers for scorers ---------------------------------------------------------------------
    def job_end_offset(self, job_id: str) -> float | None:
        """When the job (the run current now, for a reused id) would have ended on its own (its `end`),
        None if it runs past the scenario."""
        run = self._lifecycle.current(job_id, self.offset_s)
        return run.job.end if run is not None else None

    def stop_offset(self, job_id: str) -> float | None:
        """When a stop actually freed the job's GPUs (None: never stopped, or only SIGTERM'd); the run
        current now, for a reused id (`stopped_runs` has every run)."""
        run = self._lifecycle.current(job_id, self.offset_s)
        return run.stopped_at if run is not None else None

    def current_uid(self, job_id: str, at_s: float | None = None) -> str | None:
        """The uid of the run `job_id` names now, or at scenario offset `at_s` (namesakes are distinct jobs); no
        backend call. None when no run under the id was submitted by then."""
        t = self.offset_s if at_s is None else at_s
        run = self._lifecycle.current(job_id, t)
        return self._info(run).uid if run is not None and run.job.submit <= t else None

    def stopped_runs(self) -> list[tuple[str, float, float | None, int]]:
        """(id, stop offset, natural end, GPUs) of every run a stop freed, namesakes each on their own."""
        return [(r.job.id, r.stopped_at, r.job.end, r.job.gpus) for r in self._lifecycle.runs
                if r.stopped_at is not None]
