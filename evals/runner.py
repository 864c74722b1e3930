"""Run scenarios to the end on the simulated clock, sweeping at an interval; collect and score."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from agent.config.policy import Policy
from agent.graph.service import SweepService
from agent.planning.policy_model import Planner
from agent.records.approvals import ApprovalError
from agent.records.audit import AuditLog
from agent.wiring import simulated_deps
from evals.scoring import Score, score_run
from sim.cluster import SimCluster
from sim.scenario import Scenario


class ScenarioRun(BaseModel):
    name: str
    findings: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    score: Score
    sweeps: int
    notifications: int
    guardrail_refusals: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    planner: str
    model_calls: int = 0  # requests sent to the model; sweeps with nothing new to decide send none
    cached_findings: int = 0  # findings answered by a plan the model made earlier for the same state
    model_latency_s: list[float] = []  # seconds per model request

    def document(self) -> dict[str, Any]:
        """The `steward eval --json` shape from the scenario format, plus extras."""
        return {"name": self.name, "findings": self.findings, "actions": self.actions,
                "score": self.score.model_dump(), "passed": self.score.passed,
                "stats": {"sweeps": self.sweeps, "notifications": self.notifications,
                          "guardrail_refusals": self.guardrail_refusals, "tool_calls": self.tool_calls,
                          "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                          "wall_s": round(self.wall_s, 3), "planner": self.planner,
                          "model_calls": self.model_calls, "cached_findings": self.cached_findings,
                          "latency_p50_s": percentile(self.model_latency_s, 50),
                          "latency_p95_s": percentile(self.model_latency_s, 95)}}


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (None without values): what a reader can check by counting."""
    if not values:
        return None
    ranked = sorted(values)
    return ranked[min(len(ranked), max(1, math.ceil(len(ranked) * q / 100))) - 1]


def _offset(scenario: Scenario, at: Any) -> int:
    return int(round((at - scenario.start).total_seconds()))


def collect_findings(scenario: Scenario, audit: AuditLog) -> list[dict[str, Any]]:
    """One row per (job, kind): when first found, the evidence then, and `in_grace`: whether every time it was
    found the job was still in its long-tail grace (a warning may go out, no stop yet: Finding.stop_after)."""
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for e in audit.entries(kind="finding", limit=1_000_000, newest_first=False):
        key = (e.target or "", e.status or "")
        stop_after = e.data.get("stop_after")
        at = e.at if e.at.tzinfo else e.at.replace(tzinfo=UTC)
        in_grace = bool(stop_after) and datetime.fromisoformat(str(stop_after)).astimezone(UTC) > at
        if key not in first:
            first[key] = {"job": key[0], "kind": key[1], "first_at_s": _offset(scenario, e.at),
                          "evidence": e.reason or "", "in_grace": in_grace}
        elif not in_grace:
            first[key]["in_grace"] = False
    return list(first.values())


def collect_actions(scenario: Scenario, audit: AuditLog) -> list[dict[str, Any]]:
    actions: list[dict[str, Any]] = []
    approvals: dict[str, dict[str, Any]] = {}
    for e in audit.entries(limit=1_000_000, newest_first=False):
        row = {"job": e.target, "action": e.action, "level": e.level, "at_s": _offset(scenario, e.at),
               "reason": e.reason or ""}
        if e.data.get("target_uid"):
            row["uid"] = e.data["target_uid"]  # extra: tells namesakes (one id, distinct jobs) apart
        if e.kind == "execution":
            actions.append({**row, "status": e.status, "removed_nodes": int(e.data.get("removed_nodes") or 0)})
        elif e.kind == "decision" and e.status == "deny":
            actions.append({**row, "status": "blocked"})
        elif e.kind == "approval" and e.data.get("approval_id"):
            aid = e.data["approval_id"]
            if e.status == "pending":
                approvals[aid] = {**row, "status": "pending_approval"}
                actions.append(approvals[aid])
            elif aid in approvals and e.status in ("denied", "expired"):
                approvals[aid]["status"] = e.status
                approvals[aid]["reason"] = e.reason or ""
            elif aid in approvals and e.status == "approved":
                actions.remove(approvals.pop(aid))  # its execution entry tells the rest
    return actions


def reclaimed_gpu_hours(scenario: Scenario, cluster: SimCluster, actions: list[dict[str, Any]]) -> float:
    total = 0.0
    for _job_id, stopped, natural_end, gpus in cluster.stopped_runs():  # namesakes each on their own
        end = min(scenario.duration, natural_end) if natural_end is not None else scenario.duration
        total += max(0.0, end - stopped) / 3600 * gpus
    pools = {p.name: p for p in scenario.pools}
    resizes = [a for a in actions if a["action"] == "resize_pool" and a["status"] == "executed"]
    for a in resizes:
        pool = pools.get(a["job"])
        removed = int(a.get("removed_nodes", 0))
        # Freed until the pool's next executed growth (a planned scale-up back) or the scenario's end.
        later = [b["at_s"] for b in resizes if b["job"] == a["job"] and b["at_s"] > a["at_s"]
                 and not b.get("removed_nodes")]
        end = min(later, default=scenario.duration)
        if pool is not None:
            total += max(0.0, end - a["at_s"]) / 3600 * removed * pool.gpus_per_node
    return total


class ScriptedApprovals:
    """Plays a scenario's scripted human answers: each answers the first request it meets, once.

    An answer names a job id. A person answers a card they see: when a request about the id was open at the
    answer's `at`, the answer goes to the newest such request, whatever run it is about (a card about an earlier
    namesake is then answered, and the guardrail refuses to carry it out against the run now under the id). When
    none was open, the answer waits for a request about the job the id names at its `at` (namesakes): never one a
    later namesake makes.
    """

    def __init__(self, scenario: Scenario, service: SweepService, cluster: SimCluster | None = None) -> None:
        self.pending = sorted(scenario.approvals, key=lambda a: a.at)
        self.service = service
        self.cluster = cluster

    def answer_due(self, offset_s: float) -> list[Any]:
        """Answer what is due; returns the resumed runs (SweepResult)."""
        done = []
        for answer in list(self.pending):
            if answer.at > offset_s:
                continue
            about = [item for item in self.service.deps.approvals.pending() if item.target == answer.job]
            seen = [item for item in about if self._open_at(item, answer.at)]
            for item in seen[-1:] if seen else [item for item in about if self._current(item, answer.at)]:
                try:
                    done.append(self.service.answer(item.id, answer.decision, by=answer.by, reason="scripted answer"))
                except ApprovalError:
                    continue
                self.pending.remove(answer)
                break
        return done


    def _open_at(self, item: Any, answer_at: float) -> bool:
        """Whether a request was already open at the answer's time (a card its answerer could have seen)."""
        if self.cluster is None:
            return False
        return self.cluster.offset_of(item.requested_at) <= answer_at + 1e-6

    def _current(self, item: Any, answer_at: float) -> bool:
        """Whether a request is about the job its target named at the answer's time (requests without a uid: yes;
        an answer given before any run under the id was submitted: the run current now)."""
        if self.cluster is None:
            return True
        proposal = (item.payload.get("guarded_action") or {}).get("proposal") or {}
        uid = proposal.get("target_uid")
        if proposal.get("action") == "resize_pool":
            return True  # a pool's scale-up carries the scale-down it undoes, not a job's uid
        meant = self.cluster.current_uid(item.target, answer_at) or self.cluster.current_uid(item.target)
        return not uid or uid == meant


def left_running(scenario: Scenario, policy: Policy, cluster: SimCluster) -> list[str]:
    """Keyed idle or hung jobs (not must_not_kill) still running at the run's end (never stopped, or a graceful stop
    they ignored), where the run lasted the detector's window and the notice beyond the waste's start: time enough
    to act."""
    d, out = policy.detectors, []
    for t in scenario.truth:
        if t.job is None or t.waste not in ("idle", "zombie") or t.must_not_kill:
            continue
        window = d.idle.window if t.waste == "idle" else d.zombie.window
        if (t.since or 0.0) + window + policy.warning.min_notice > scenario.duration:
            continue
        job = cluster.get_job(t.job)
        if job is not None and job.state in ("running", "stopping"):  # still holding its GPUs
            out.append(t.job)
    return out


def run_scenario(scenario: Scenario, policy: Policy, planner: Planner, *, sweep_every: float = 300.0,
                 language: str = "en") -> ScenarioRun:
    started = time.perf_counter()
    deps, cluster = simulated_deps(scenario, policy, planner, language=language)
    service = SweepService(deps, run_prefix=scenario.name)
    scripted = ScriptedApprovals(scenario, service, cluster)
    sweeps = tool_calls = prompt_tokens = completion_tokens = model_calls = cached = 0
    latencies: list[float] = []
    t = sweep_every
    while t <= scenario.duration + 1e-9:
        cluster.advance_to(t)
        service.expire_due()
        scripted.answer_due(t)
        result = service.sweep(trigger="eval")
        plan = result.state.get("plan", {})
        tool_calls += int(plan.get("tool_calls", 0))
        prompt_tokens += int(plan.get("prompt_tokens", 0))
        completion_tokens += int(plan.get("completion_tokens", 0))
        model_calls += int(plan.get("model_calls", 0))
        cached += int(plan.get("cached_findings", 0))
        latencies += [float(x) for x in plan.get("model_latency_s") or []]
        sweeps += 1
        t += sweep_every
    findings = collect_findings(scenario, deps.audit)
    actions = collect_actions(scenario, deps.audit)
    score = score_run(scenario, findings, actions, reclaimed_gpu_hours(scenario, cluster, actions))
    score.left_running_targets = left_running(scenario, policy, cluster)
    refusals = sum(1 for a in actions if a["status"] == "blocked")
    notifications = sum(1 for a in actions if a["action"] == "notify" and a["status"] == "executed")
    return ScenarioRun(name=scenario.name, findings=findings, actions=actions, score=score, sweeps=sweeps,
                       notifications=notifications, guardrail_refusals=refusals, tool_calls=tool_calls,
                       prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                       wall_s=time.perf_counter() - started, planner=planner.name, model_calls=model_calls,
                       cached_findings=cached, model_latency_s=latencies)
