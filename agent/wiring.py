"""Builds StewardDeps from settings: the simulated cluster today, real backends by setting."""

from __future__ import annotations

from pathlib import Path

from agent.approvals import ApprovalStore
from agent.audit import AuditLog
from agent.deps import StewardDeps
from agent.planner import Planner, PolicyModel
from agent.policy import Policy
from agent.settings import Settings
from sim.cluster import SimCluster
from sim.scenario import Scenario
from tools.notify import RecordingNotifier


def make_planner(settings: Settings, model_name: str | None = None) -> Planner:
    """The LLM planner when an endpoint is configured (or a model is named), else the policy model."""
    if model_name is None and not settings.llm_configured:
        return PolicyModel()
    from agent.llm_planner import LLMPlanner, make_chat_model

    if model_name is not None:
        settings = settings.model_copy(update={"llm_model": model_name})
    return LLMPlanner(make_chat_model(settings), name=settings.llm_model, max_rounds=settings.llm_max_tool_rounds)


def simulated_deps(
    scenario: Scenario,
    policy: Policy,
    planner: Planner,
    *,
    data_dir: Path | None = None,
    language: str = "en",
) -> tuple[StewardDeps, SimCluster]:
    """Deps wired to a simulated cluster; stores in `data_dir`, or in memory when None."""
    cluster = SimCluster(scenario)
    audit = AuditLog(data_dir / "audit.sqlite" if data_dir else ":memory:")
    approvals = ApprovalStore(data_dir / "approvals.sqlite" if data_dir else ":memory:", audit)
    deps = StewardDeps(
        metrics=cluster, scheduler=cluster, logs=cluster, pools=cluster,
        notifier=RecordingNotifier(cluster), clock=cluster, policy=policy, audit=audit,
        approvals=approvals, planner=planner, currency=scenario.currency, language=language,
    )
    return deps, cluster
