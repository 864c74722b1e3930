"""detect: run the detectors on the sweep's reading, attach the best runbook to each finding, audit them."""

from __future__ import annotations

import re
from typing import Any

from agent.detectors.engine import run_detectors
from agent.graph.deps import StewardDeps
from agent.graph.state import StewardState
from agent.records.audit import SERVED
from agent.records.usage import usage_sample
from core.actions import Finding
from core.observation import Observation

_NUMBERS = re.compile(r"\d+(?:[.:]\d+)*")


def detect(deps: StewardDeps, state: StewardState) -> dict[str, Any]:
    obs = deps.observation(state["run_id"])
    history = deps.audit.history(obs.at, denials_for=deps.policy.approvals.denials_lookback()) if obs.pools else None
    findings = run_detectors(obs, deps.policy, history=history)
    if deps.runbook_search is not None:
        searched: dict[str, str | None] = {}
        findings = [_with_runbook(deps, f, searched) for f in findings]
    uids = {j.id: j.uid for j in obs.jobs if j.uid}
    for f in findings:
        deps.audit.record("finding", at=obs.at, run_id=state["run_id"], target=f.target, action=None,
                          status=f.kind, reason=f.evidence,
                          data={"kind": f.kind, "since": f.since.isoformat(), "gpus": f.gpus,
                                "target_uid": uids.get(f.target),  # which run of a reused name it was about
                                "owner": f.owner,  # whose it was, after the job is gone ("why did you stop my notebook?")
                                "waste_gpu_hours": f.waste_gpu_hours, "waste_cost": f.waste_cost,
                                "runbook": f.runbook, "metrics": f.metrics,  # the numbers evidence is rendered from
                                "stop_after": f.stop_after.isoformat() if f.stop_after else None})
    remember_answered(deps, obs, state["run_id"])
    if obs.jobs or obs.pools:
        record_usage(deps, obs, state["run_id"])
    return {"findings": [f.model_dump(mode="json") for f in findings]}


# request_path's own words (tools/log_progress.py), in Chinese; a method and path or a request id stay as written.
_PATH_ZH = {"engine stats (tokens served)": "推理引擎统计行（有 token 输出）",
            "Prompt executed (ComfyUI)": "ComfyUI 的 Prompt executed 行"}


def remember_answered(deps: StewardDeps, obs: Observation, run_id: str) -> None:
    """One `served` audit entry per job uid whose log shows it answering requests for the first time: a server stays
    one for its life, after its request lines leave the log read (agent/detectors/serving.py). A job without a uid
    is not remembered (a name is reused; a record under it would speak for the next job)."""
    for job in obs.jobs:
        logs = obs.logs.get(job.id)
        if not job.uid or job.id in obs.answered or logs is None or not logs.requests:
            continue
        deps.audit.record(SERVED, at=obs.at, run_id=run_id, target=job.id, status="answered_requests",
                          reason=f"its log shows it answering requests ({logs.requests} in the log read, e.g. "
                                 f"{logs.request_path}): a service for as long as it runs",
                          data={"target_uid": job.uid, "requests": logs.requests,
                                "failed_requests": logs.failed_requests, "request_path": logs.request_path,
                                "reason_zh": f"其日志显示它在响应请求（读取的日志中 {logs.requests} 个，例如 "
                                             f"{_PATH_ZH.get(logs.request_path or '', logs.request_path)}）：作业存续期间始终视为服务"})


def record_usage(deps: StewardDeps, obs: Observation, run_id: str) -> None:
    """One `usage` audit entry per sweep: the GPU jobs and pools as seen, the cost report's samples
    (agent/records/usage.py integrates them over time)."""
    pool_of = {n.name: n.pool for n in obs.nodes}
    deps.audit.record("usage", at=obs.at, run_id=run_id, data=usage_sample(obs, pool_of))


def _with_runbook(deps: StewardDeps, f: Finding, searched: dict[str, str | None]) -> Finding:
    # Findings that differ only in their numbers share one search: hundreds of idle jobs, a few queries.
    query = f"{f.kind} {_NUMBERS.sub('#', f.evidence)}"
    if query not in searched:
        try:
            hits = deps.runbook_search(f"{f.kind} {f.evidence}", f.kind, 1)
        except Exception:  # retrieval is advisory; a broken index must not stop a sweep
            hits = []
        searched[query] = hits[0]["id"] if hits else None
    runbook = searched[query]
    return f.model_copy(update={"runbook": runbook}) if runbook else f
