"""Builds StewardDeps from settings: the simulated cluster today, real backends by setting."""

from __future__ import annotations

import os
from pathlib import Path

from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.deps import StewardDeps
from agent.planning.policy_model import Planner, PolicyModel
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditLog
from agent.records.changes import ChangeStore
from core.cluster import PoolInfo, ResizeResult
from sim.cluster import SimCluster
from sim.scenario import Scenario
from tools.email_notify import email_notifier_from_env
from tools.notify import NoChannelNotifier, RecordingNotifier
from tools.protocols import Clock, JobScheduler, LogSource, MetricsSource, NodePools, Notifier


def make_planner(settings: Settings, model_name: str | None = None) -> Planner:
    """The LLM planner when an endpoint is configured (or a model is named), else the policy model.
    `policy-model` names the built-in one, so `steward eval --model policy-model --model M` compares them."""
    if (model_name is None and not settings.llm_configured) or model_name == PolicyModel.name:
        return PolicyModel()
    from agent.planning.llm_planner import LLMPlanner, make_chat_model

    if model_name is not None:
        if not (settings.llm_base_url or settings.llm_api_key):
            # Else the client would try OpenAI's public endpoint, fail, and the built-in planner's results would
            # be reported under the model's name.
            raise ValueError(f"model {model_name!r} needs an endpoint: set STEWARD_LLM_BASE_URL (an OpenAI-compatible "
                             "server, e.g. `steward llm local`'s) or STEWARD_LLM_API_KEY for OpenAI itself")
        settings = settings.model_copy(update={"llm_model": model_name})
    return LLMPlanner.from_settings(settings, make_chat_model(settings))


def simulated_deps(
    scenario: Scenario,
    policy: Policy,
    planner: Planner,
    *,
    data_dir: Path | None = None,
    language: str = "en",
    database_url: str | None = None,
) -> tuple[StewardDeps, SimCluster]:
    """Deps wired to a simulated cluster; stores in Postgres (`database_url`), `data_dir`, or in memory."""
    cluster = SimCluster(scenario)
    audit = AuditLog(database_url or (data_dir / "audit.sqlite" if data_dir else ":memory:"))
    approvals = ApprovalStore(database_url or (data_dir / "approvals.sqlite" if data_dir else ":memory:"), audit)
    deps = StewardDeps(
        metrics=cluster, scheduler=cluster, logs=cluster, pools=cluster,
        notifier=RecordingNotifier(cluster), clock=cluster, policy=policy, audit=audit,
        approvals=approvals, planner=planner, currency=scenario.currency, language=language,
        changes=ChangeStore(database_url or (data_dir / "changes.sqlite" if data_dir else ":memory:")),
    )
    return deps, cluster


class NoPools:
    """A cluster whose node pools GPU Steward does not manage: nothing to list, nothing to resize."""

    def list_pools(self) -> list[PoolInfo]:
        return []

    def resize_pool(self, pool: str, target_nodes: int, *, reason: str) -> ResizeResult:
        return ResizeResult(pool=pool, status="refused", nodes_before=0, nodes_after=0,
                            detail="no pool provider configured (STEWARD_POOL_PROVIDER)")


def _chatops_or(settings: Settings, fallback: Notifier, clock: Clock, policy: Policy, jobs: JobScheduler) -> Notifier:
    if settings.dingtalk_webhook_url or settings.wecom_webhook_url:
        from agent.chatops.notifier import ChatOpsNotifier

        return ChatOpsNotifier.from_settings(settings, clock=clock, policy=policy, jobs=jobs)
    return fallback


def cluster_deps(settings: Settings, policy: Policy, planner: Planner) -> StewardDeps:
    """Deps for a real cluster (STEWARD_BACKEND=kubernetes|slurm); stores under STEWARD_DATA_DIR."""
    from tools.kubernetes import WallClock
    from tools.prometheus import prometheus_metrics_from_settings

    clock = WallClock()
    settings.ensure_data_dir()  # runbook index, caches; the stores too unless STEWARD_DATABASE_URL is set
    pools: NodePools = NoPools()
    if settings.backend == "kubernetes":
        from tools.k8s_notify import kubernetes_notifier_from_settings
        from tools.kubernetes import kubernetes_scheduler_from_settings

        k8s = kubernetes_scheduler_from_settings(settings, clock=clock)
        scheduler: JobScheduler = k8s
        logs: LogSource = k8s
        metrics: MetricsSource = prometheus_metrics_from_settings(settings)
        notifier: Notifier = kubernetes_notifier_from_settings(settings, policy.warning.min_notice, clock=clock)
        if settings.pool_provider == "capi":
            from tools.capi import CapiPoolConfig, capi_pools_from_settings

            pools = capi_pools_from_settings(settings, k8s, CapiPoolConfig(currency=settings.currency))
    elif settings.backend == "slurm":
        from tools.slurm import slurm_scheduler_from_settings

        slurm = slurm_scheduler_from_settings(settings)
        scheduler, logs = slurm, slurm
        metrics = prometheus_metrics_from_settings(settings, job_id_for_hpc_job=slurm.steward_id_for)
        # Slurm has no place on the job to leave a warning: e-mail (or ChatOps below) or nothing at all.
        notifier = email_notifier_from_env(os.environ) or NoChannelNotifier()
    else:
        raise ValueError(f"STEWARD_BACKEND={settings.backend!r}: use sim, kubernetes or slurm")
    if settings.pool_provider == "aws":
        from tools.aws_pools import AwsPoolConfig, aws_pools_from_settings

        config = AwsPoolConfig(region=settings.aws_region, endpoint_url=settings.aws_endpoint_url,
                               reserve_fraction=policy.reserve.fraction, currency=settings.currency)
        pools = aws_pools_from_settings(settings, scheduler.list_nodes, config)
    elif settings.pool_provider not in ("none", "capi"):
        raise ValueError(f"STEWARD_POOL_PROVIDER={settings.pool_provider!r}: use none, capi or aws")
    audit = AuditLog(settings.store("audit"))
    return StewardDeps(
        metrics=metrics, scheduler=scheduler, logs=logs, pools=pools,
        notifier=_chatops_or(settings, notifier, clock, policy, scheduler), clock=clock, policy=policy,
        audit=audit, approvals=ApprovalStore(settings.store("approvals"), audit), planner=planner,
        language=settings.language, changes=ChangeStore(settings.store("changes")), currency=settings.currency,
    )
