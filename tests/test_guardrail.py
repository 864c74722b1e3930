"""Example tests for the guardrail: one or more per rule, checking the verdict, rule and message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.config.policy import Policy, parse_policy
from agent.graph.report import decision_reason
from agent.guardrail import target_rules as guardrail_scope
from agent.guardrail.decide import Facts, decide, protection_reason
from core.actions import Exemption, Finding, History, HistoryEntry, ProposedAction
from core.cluster import JobInfo, PoolInfo

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
JOB_ID = "ml/train-1"


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def job(**changes) -> JobInfo:
    base = dict(
        id=JOB_ID, scheduler="kubernetes", namespace="ml", name="train-1", user="alice", project="vision", gpus=8
    )
    return JobInfo(**(base | changes))


def slurm_job(**changes) -> JobInfo:
    base = dict(
        id="gpu/sweep-7", scheduler="slurm", namespace="gpu", name="sweep-7", user="bob", project="nlp", qos="normal"
    )
    return JobInfo(**(base | changes))


def finding(kind="idle", target=JOB_ID, target_type="job") -> Finding:
    return Finding(
        kind=kind, target=target, target_type=target_type, since=ago(90), detected_at=NOW, evidence="0% for 1h"
    )


def entry(action, minutes_ago, status="executed", target=JOB_ID, **kw) -> HistoryEntry:
    return HistoryEntry(action=action, target=target, status=status, at=ago(minutes_ago), **kw)


def warning(minutes_ago=60, kind="idle", **kw) -> HistoryEntry:
    """A delivered warning: it names the kind of waste and states its deadline (the notice period later)."""
    return entry("notify", minutes_ago, finding_kind=kind, deadline=ago(minutes_ago - 60), **kw)


def warned(minutes_ago=60, *more: HistoryEntry, **kw) -> History:
    return History(entries=[warning(minutes_ago), *more], **kw)


def facts(job_info: JobInfo | None = None, findings=None, **kw) -> Facts:
    return Facts(now=NOW, job=job_info if job_info is not None else job(), findings=findings or [finding()], **kw)


def act(action="terminate", target=JOB_ID, **kw) -> ProposedAction:
    return ProposedAction(action=action, target=target, **kw)


def pool(**changes) -> PoolInfo:
    base = dict(name="a100-od", gpus_per_node=8, nodes=10, busy_nodes=4, min_nodes=1)
    return PoolInfo(**(base | changes))


def pool_facts(**changes) -> Facts:
    return Facts(now=NOW, pool=pool(**changes), findings=[finding("oversized", "a100-od", "pool")])


def resize(target_nodes=5) -> ProposedAction:
    return act("resize_pool", target="a100-od", target_nodes=target_nodes, finding_kind="oversized")


def check(decision, verdict, rule, *words):
    assert decision.verdict == verdict, decision
    assert decision.rule == rule, decision
    for word in words:
        assert word in decision.reason, decision.reason


# 1. mode


def test_observe_mode_denies_everything():
    d = decide(act("notify"), facts(), Policy(mode="observe"), History())
    check(d, "deny", "mode", "observe", "level 0")
    assert d.level == 1


def test_dry_run_allows_with_flag():
    d = decide(act(), facts(), Policy(mode="dry_run"), warned())
    check(d, "allow", "allow", "dry run")
    assert d.dry_run and d.level == 2


def test_a_dry_run_asks_no_approver():
    """An action that would wait for a human is recorded as a dry run saying so: approvers are not asked about
    actions that will not run."""
    dry = parse_policy({"mode": "dry_run", "levels": {"require_approval": [2]}})
    d = decide(act(), facts(), dry, warned())
    check(d, "allow", "approval", "dry run, not executed", "would wait for a human", "no approver is asked")
    assert d.dry_run and d.level == 2
    pool = decide(resize(5), pool_facts(), parse_policy({"mode": "dry_run"}), History())
    assert pool.verdict == "allow" and pool.dry_run and pool.rule == "approval", pool
    # Enforced, the same action waits for a human.
    check(decide(act(), facts(), parse_policy({"levels": {"require_approval": [2]}}), warned()),
          "needs_approval", "approval")


# 2. unknown_target


def test_unknown_job_is_denied():
    d = decide(act(), Facts(now=NOW, findings=[finding()]), Policy(), warned())
    check(d, "deny", "unknown_target", JOB_ID, "does not know")


def test_facts_for_another_job_are_denied():
    d = decide(act(), facts(job(id="ml/other")), Policy(), warned())
    check(d, "deny", "unknown_target", "ml/other")


def test_node_health_notice_needs_no_job():
    node = finding("node_health", "gpu-node-3", "node")
    d = decide(
        act("notify", "gpu-node-3", finding_kind="node_health"), Facts(now=NOW, findings=[node]), Policy(), History()
    )
    check(d, "allow", "allow", "node gpu-node-3")


def test_node_finding_does_not_open_stops():
    node = finding("node_health", "gpu-node-3", "node")
    d = decide(act("terminate", "gpu-node-3"), Facts(now=NOW, findings=[node]), Policy(), warned())
    check(d, "deny", "unknown_target")


def test_resize_needs_pool_facts():
    d = decide(resize(), Facts(now=NOW), Policy(), History())
    check(d, "deny", "unknown_target", "pool a100-od")


# 3. not_running


@pytest.mark.parametrize("state", ["pending", "completed", "failed", "cancelled"])
def test_only_running_jobs_are_stopped(state):
    d = decide(act(), facts(job(state=state)), Policy(), warned())
    check(d, "deny", "not_running", state)


# 4. protected


PROTECTED = [
    (job(namespace="kube-system"), Policy(), "protection.namespaces"),
    (job(user="carol"), parse_policy({"protection": {"users": ["carol"]}}), "protection.users"),
    (job(), parse_policy({"protection": {"projects": ["vision"]}}), "protection.projects"),
    (job(labels={"steward.io/protected": "TRUE"}), Policy(), "label steward.io/protected"),
    (job(annotations={"karpenter.sh/do-not-disrupt": "true"}), Policy(), "karpenter.sh/do-not-disrupt"),
    (
        job(annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "False"}),
        Policy(),
        "safe-to-evict",
    ),
    (job(priority="high"), parse_policy({"protection": {"priorities": ["high"]}}), "protection.priorities"),
    (job(), parse_policy({"protection": {"jobs": [JOB_ID]}}), "protection.jobs"),
    (slurm_job(), parse_policy({"protection": {"partitions": ["gpu"]}}), "protection.partitions"),
    (slurm_job(), parse_policy({"protection": {"accounts": ["nlp"]}}), "protection.accounts"),
    (slurm_job(qos="urgent"), parse_policy({"protection": {"qos": ["urgent"]}}), "protection.qos"),
]


@pytest.mark.parametrize(("job_info", "policy", "why"), PROTECTED)
@pytest.mark.parametrize("action", ["notify", "terminate", "force_terminate"])
def test_protected_jobs_are_never_touched(job_info, policy, why, action):
    # Otherwise everything lines up: warned, gracefully stopped, flagged, approved.
    history = History(entries=[entry("notify", 60, target=job_info.id), entry("terminate", 30, target=job_info.id)])
    d = decide(act(action, job_info.id), facts(job_info, [finding(target=job_info.id)]), policy, history, approved=True)
    check(d, "deny", "protected", why)


def test_unrelated_label_value_does_not_protect():
    assert protection_reason(job(labels={"steward.io/protected": "false"}), Policy(), History(), NOW) is None


def test_live_exemption_protects_and_expired_does_not():
    live = Exemption(target=JOB_ID, until=NOW + timedelta(hours=2), by="alice", reason="demo tomorrow")
    d = decide(act(), facts(), Policy(), warned(exemptions=[live]))
    check(d, "deny", "protected", "exempted by alice until 2025-03-01 14:00 UTC", "demo tomorrow")
    expired = live.model_copy(update={"until": NOW})
    assert decide(act(), facts(), Policy(), warned(exemptions=[expired])).verdict == "allow"


def test_a_keep_on_one_pod_of_a_distributed_job_protects_its_other_pods():
    # A stop of one pod ends the whole job (agent/detectors/gang.py): a keep or a protection on any pod holds for all.
    gang = {"training.kubeflow.org/job-name": "sft"}
    worker = job(labels=gang)
    master = job(id="ml/sft-master-0", name="sft-master-0", labels=gang)
    keep = Exemption(target=master.id, until=NOW + timedelta(hours=4), by="wecom:he", reason="debugging")
    for action in ("terminate", "force_terminate", "notify"):
        d = decide(act(action), facts(worker, gang=[master]), Policy(), warned(exemptions=[keep]), approved=True)
        check(d, "deny", "protected", "ml/sft-master-0, a pod of the same distributed job "
              "(training.kubeflow.org/job-name=sft), is protected (exempted by wecom:he until", "ends the whole job")
        assert decision_reason(d.rule, d.reason, "zh") == (
            "同一分布式作业（training.kubeflow.org/job-name=sft）中的 ml/sft-master-0 受保护（由 wecom:he 保留至 "
            "2025-03-01 16:00 UTC（debugging））：停止任何一个 pod 都会终止整个作业，故不处理")
    protected_master = master.model_copy(update={"labels": {**gang, "steward.io/protected": "true"}})
    d = decide(act(), facts(worker, gang=[protected_master]), Policy(), warned(), approved=True)
    check(d, "deny", "protected", "label steward.io/protected=true is in protection.labels")
    # A pod of another job (another gang value), or a pod that has ended, protects nothing.
    other = master.model_copy(update={"labels": {"training.kubeflow.org/job-name": "other"}})
    assert decide(act(), facts(worker, gang=[other]), Policy(), warned(exemptions=[keep])).verdict == "allow"
    ended = master.model_copy(update={"state": "completed"})
    assert decide(act(), facts(worker, gang=[ended]), Policy(), warned(exemptions=[keep])).verdict == "allow"


def test_an_exempted_pool_is_not_resized_and_an_exempted_node_not_cordoned():
    # POST /api/exemptions accepts a job, node or pool: an exemption on a pool or a node holds as one on a job does.
    keep = Exemption(target="a100-od", until=NOW + timedelta(hours=4), by="ops", reason="capacity test")
    d = decide(resize(), pool_facts(), Policy(), History(exemptions=[keep]), approved=True)
    check(d, "deny", "protected", "pool a100-od is protected: exempted by ops until 2025-03-01 16:00 UTC",
          "capacity test", "no resize_pool")
    assert decision_reason(d.rule, d.reason, "zh") == ("节点池 a100-od 已由 ops 豁免至 2025-03-01 16:00 UTC（capacity test）"
                                                      "：豁免期内不调整、不封锁")
    assert decide(resize(), pool_facts(), Policy(), History(), approved=True).verdict == "allow"
    expired = keep.model_copy(update={"until": NOW})
    assert decide(resize(), pool_facts(), Policy(), History(exemptions=[expired]), approved=True).verdict == "allow"
    node = finding("node_health", "gpu-node-3", "node")
    cordon = act("cordon", "gpu-node-3", finding_kind="node_health")
    node_keep = keep.model_copy(update={"target": "gpu-node-3"})
    d = decide(cordon, Facts(now=NOW, findings=[node]), Policy(), History(exemptions=[node_keep]), approved=True)
    check(d, "deny", "protected", "node gpu-node-3 is protected: exempted by ops", "no cordon")
    assert decide(cordon, Facts(now=NOW, findings=[node]), Policy(), History(), approved=True).verdict == "allow"


# 5. no_finding


def test_stop_needs_a_stoppable_finding():
    d = decide(act(), facts(findings=[finding("overprovisioned")]), Policy(), warned())
    check(d, "deny", "no_finding", "idle or zombie", "overprovisioned")


def test_stop_cannot_cite_an_overprovisioned_finding():
    d = decide(act(finding_kind="overprovisioned"), facts(findings=[finding("overprovisioned")]), Policy(), warned())
    check(d, "deny", "no_finding", "never justifies a stop")


def test_finding_for_another_job_does_not_count():
    d = decide(act(), facts(findings=[finding(target="ml/other")]), Policy(), warned())
    check(d, "deny", "no_finding", "the detectors did not flag it")


def test_stop_cites_a_kind_that_is_not_current():
    d = decide(act(finding_kind="zombie"), facts(), Policy(), warned())
    check(d, "deny", "no_finding", "no current zombie finding", "current findings: idle")


def test_notify_needs_a_finding():
    d = decide(act("notify"), facts(findings=[finding(target="ml/other")]), Policy(), History())
    check(d, "deny", "no_finding", "nothing to notify")


def test_resize_needs_an_oversized_finding():
    bare = pool_facts().model_copy(update={"findings": []})
    check(decide(resize(), bare, Policy(), History()), "deny", "no_finding", "oversized")


# 6. level_ceiling


def test_override_lowers_the_ceiling():
    policy = parse_policy({"levels": {"overrides": [{"namespace": "ml", "max": 1}]}})
    d = decide(act(), facts(), policy, warned())
    check(d, "deny", "level_ceiling", "level 2", "ceiling 1", "namespace 'ml'")


def test_ceiling_applies_even_when_approved():
    policy = parse_policy({"levels": {"max_auto": 1, "max": 3}})
    check(decide(resize(), pool_facts(), policy, History(), approved=True), "deny", "level_ceiling", "ceiling 3")


# 7. warning_first


def test_stop_without_warning_is_denied():
    check(decide(act(), facts(), Policy(), History()), "deny", "warning_first", "not been warned", "1h")


def test_stop_before_notice_ends_names_the_due_time():
    d = decide(act(), facts(), Policy(), warned(10))
    check(d, "deny", "warning_first", "warned at 2025-03-01 11:50 UTC", "earliest stop is 2025-03-01 12:50 UTC")


def test_failed_warning_does_not_count():
    history = History(entries=[entry("notify", 80, status="failed", detail="email to alice: error (connection refused)")])
    check(decide(act(), facts(), Policy(), history), "deny", "warning_first", "not delivered", "connection refused")


def test_promised_deadline_is_honoured():
    history = History(entries=[entry("notify", 60, deadline=NOW + timedelta(minutes=15))])
    check(decide(act(), facts(), Policy(), history), "deny", "warning_first", "12:15 UTC")


def test_warning_for_another_job_does_not_count():
    history = History(entries=[entry("notify", 120, target="ml/other")])
    check(decide(act(), facts(), Policy(), history), "deny", "warning_first")


# 8. graceful_first


def test_force_needs_a_graceful_stop_first():
    d = decide(act("force_terminate"), facts(), Policy(), warned(), approved=True)
    check(d, "deny", "graceful_first", "not been asked to stop gracefully", "5m")


def test_force_waits_for_the_grace_period():
    d = decide(act("force_terminate"), facts(job(state="stopping")), Policy(), warned(60, entry("terminate", 2)))
    check(d, "deny", "graceful_first", "ends at 2025-03-01 12:03 UTC")


def test_force_after_grace_needs_approval_then_allows():
    history = warned(60, entry("terminate", 10, gpus=8))
    stopping = facts(job(state="stopping"))
    check(decide(act("force_terminate"), stopping, Policy(), history), "needs_approval", "approval", "level 3")
    check(decide(act("force_terminate"), stopping, Policy(), history, approved=True), "allow", "allow", "approved")


# 9. duplicate / already_done


def test_one_notice_per_violation_per_period():
    d = decide(act("notify", finding_kind="idle"), facts(), Policy(), warned(60))
    check(d, "deny", "duplicate", "already notified about idle", "next after 2025-03-01 15:00 UTC")


def test_notice_about_another_violation_is_allowed():
    d = decide(act("notify", finding_kind="zombie"), facts(findings=[finding("zombie")]), Policy(), warned(60))
    check(d, "allow", "allow")


def test_notice_after_the_period_is_allowed():
    check(decide(act("notify", finding_kind="idle"), facts(), Policy(), warned(5 * 60)), "allow", "allow")


def test_terminate_twice_while_stopping_is_denied():
    d = decide(act(), facts(job(state="stopping")), Policy(), warned(60, entry("terminate", 2)))
    check(d, "deny", "already_done", "is stopping", "grace period")


def test_a_force_that_did_not_end_the_job_is_not_sent_again_and_says_why():
    """Forced and still stopping (a node that does not answer): another force changes nothing, and 'waiting for
    the grace period' was untrue."""
    history = warned(60, entry("terminate", 30), entry("force_terminate", 10))
    d = decide(act("force_terminate"), facts(job(state="stopping")), Policy(), history, approved=True)
    check(d, "deny", "already_done", "force-stopped", "still stopping", "check its node")
    assert "grace period" not in d.reason
    from agent.graph.report import decision_reason, rule_of_reason

    assert rule_of_reason(d.reason) == "already_done" and "调度器未能结束它" in decision_reason(d.rule, d.reason, "zh")


def test_pending_approval_is_not_asked_twice():
    proposal = act("force_terminate")
    history = warned(60, entry("terminate", 10), pending_approvals=[proposal.key()])
    d = decide(proposal, facts(job(state="stopping")), Policy(), history, approved=True)
    check(d, "deny", "duplicate", "awaiting approval")


# 10. rate_limit


def test_stops_per_hour():
    policy = parse_policy({"rate_limits": {"stops_per_hour": 2}})
    history = warned(60, entry("terminate", 50, target="a"), entry("force_terminate", 20, target="b"))
    check(decide(act(), facts(), policy, history), "deny", "rate_limit", "2 stops", "12:10 UTC")
    older = warned(60, entry("terminate", 70, target="a"), entry("force_terminate", 20, target="b"))
    assert decide(act(), facts(), policy, older).verdict == "allow"


def test_zero_stops_per_hour_switches_stops_off():
    policy = parse_policy({"rate_limits": {"stops_per_hour": 0}})
    check(decide(act(), facts(), policy, warned()), "deny", "rate_limit", "switched off")


# 11. circuit_breaker


def test_breaker_trips_on_failures():
    history = warned(60, *(entry("terminate", m, status="failed", target="x") for m in (10, 20, 30)))
    check(decide(act(), facts(), Policy(), history), "deny", "circuit_breaker", "3 actions on the cluster failed",
          "12:30 UTC")
    # Warnings the mail server refused say nothing about stopping: they do not pause the stops.
    mail_down = warned(60, *(entry("notify", m, status="failed", target="x") for m in (10, 20, 30)))
    assert decide(act(), facts(), Policy(), mail_down).verdict == "allow"


def test_failures_do_not_block_notices():
    history = History(entries=[entry("terminate", m, status="failed", target="x") for m in (10, 20, 30)])
    assert decide(act("notify"), facts(), Policy(), history).verdict == "allow"


def test_breaker_caps_reclaimed_gpus():
    history = warned(60, entry("terminate", 30, target="a", gpus=40), entry("terminate", 20, target="b", gpus=20))
    d = decide(act(), facts(cluster_gpus=512), Policy(), history)
    check(d, "deny", "circuit_breaker", "60 GPUs reclaimed", "+ 8", "= 68", "512", "limit of 64")


def test_force_after_terminate_counts_the_job_once():
    history = warned(60, entry("terminate", 30, target="a", gpus=48), entry("terminate", 10, gpus=8))
    d = decide(act("force_terminate"), facts(job(state="stopping")), Policy(), history, approved=True)
    check(d, "allow", "allow")


# 12. reserve


@pytest.mark.parametrize(
    ("target_nodes", "pool_changes", "words"),
    [
        (10, {}, ["does not shrink"]),
        (0, {}, ["below the minimum of 1"]),
        (3, {}, ["4 nodes", "busy node"]),
        (4, {}, ["leave 0 free GPUs", "reserve is 8"]),
        (7, {"max_nodes": 6}, ["above the maximum of 6"]),
        (None, {}, ["no target"]),
    ],
)
def test_reserve_rules(target_nodes, pool_changes, words):
    d = decide(resize(target_nodes), pool_facts(**pool_changes), Policy(), History(), approved=True)
    check(d, "deny", "reserve", *words)


def test_a_pool_is_grown_only_to_undo_its_own_planned_scale_down():
    # An oversized finding never grows a pool; a scale-up finding without an executed forecast scale-down neither
    # (the planned scale-up back is tested in tests/test_pool_plans.py).
    check(decide(resize(12), pool_facts(), Policy(), History(), approved=True), "deny", "no_finding", "not grown")
    grow = Facts(now=NOW, pool=pool(), findings=[finding("pool_scale_up", "a100-od", "pool")])
    check(decide(resize(12), grow, Policy(), History(), approved=True), "deny", "reserve",
          "undoes no open forecast scale-down")


def test_a_shrink_goes_no_further_than_the_fresh_finding_allows():
    """Was: a shrink to 2 approved at 11:25, when nothing was queued, ran at 12:00 though the fresh finding, with
    12 GPUs now queued, keeps 3 nodes: the approval (and a model's own size) was checked only against busy nodes
    and the reserve."""
    fresh = Finding(kind="oversized", target="a100-od", target_type="pool", since=ago(60), detected_at=NOW, gpus=16,
                    evidence="on-demand pool a100-od: 4 of 5 nodes empty; jobs hold 8 of 40 GPUs and 12 more are queued",
                    metrics={"nodes": 5.0, "empty_nodes": 4.0, "suggested_nodes": 3.0, "used_gpus": 8.0,
                             "queued_gpus": 12.0, "reserve_gpus": 4.0})
    five = Facts(now=NOW, pool=pool(nodes=5, busy_nodes=1, used_gpus=8, max_nodes=8), findings=[fresh],
                 cluster_gpus=40)
    d = decide(resize(2), five, Policy(), History(), approved=True, asked_at=ago(35))
    check(d, "deny", "finding_size", "2 nodes is below the 3 nodes", "12 queued", "whatever size was proposed")
    from agent.graph.report import decision_reason, rule_of_reason

    assert rule_of_reason(d.reason) == "finding_size"
    assert decision_reason(d.rule, d.reason, "zh").startswith("缩至 2 个节点低于节点池 a100-od 最新发现建议保留的 3 个节点")
    llm = resize(2).model_copy(update={"proposed_by": "llm"})  # a model's deeper cut than the policy model's
    check(decide(llm, five, Policy(), History()), "deny", "finding_size", "below the 3 nodes")
    check(decide(resize(3), five, Policy(), History(), approved=True), "allow", "allow")
    check(decide(resize(4), five, Policy(), History(), approved=True), "allow", "allow")  # a smaller cut: fine


def test_reserve_rounds_up():
    # 10% of 3 nodes x 8 GPUs = 2.4 -> 3 GPUs, one full node beyond the busy ones.
    assert decide(resize(1), pool_facts(nodes=3, busy_nodes=1), Policy(), History(), approved=True).verdict == "deny"
    assert decide(resize(2), pool_facts(nodes=3, busy_nodes=1), Policy(), History(), approved=True).verdict == "allow"


def test_resize_within_reserve_needs_approval():
    check(decide(resize(5), pool_facts(), Policy(), History()), "needs_approval", "approval", "level 4")
    check(decide(resize(5), pool_facts(), Policy(), History(), approved=True), "allow", "allow", "pool a100-od")


# 13. approval and 14. allow


def test_require_approval_for_level_2():
    policy = parse_policy({"levels": {"require_approval": [2]}})
    check(decide(act(), facts(), policy, warned()), "needs_approval", "approval", "requires approval for level 2")


def test_project_override_lowers_max_auto():
    policy = parse_policy({"levels": {"overrides": [{"project": "vision", "max_auto": 1}]}})
    check(decide(act(), facts(), policy, warned()), "needs_approval", "approval", "automatic limit 1", "'vision'")


def test_warned_idle_job_is_stopped():
    d = decide(act(), facts(), Policy(), warned(61))
    check(d, "allow", "allow", "terminate on job ml/train-1", "all guardrail rules pass")
    assert not d.dry_run and d.level == 2


def test_a_keepalive_finding_alone_never_licenses_a_stop_without_a_human():
    keepalive = finding().model_copy(update={"stop_needs_approval": "a keep-alive pattern"})
    everything_automatic = parse_policy({"levels": {"max_auto": 4, "require_approval": []}})
    for policy in (Policy(), everything_automatic):
        # The owner may be warned (level 1) without anyone's approval...
        assert decide(act("notify", finding_kind="idle"), facts(findings=[keepalive]), policy, History()).verdict == "allow"
        # ...but a warned, due stop waits for a human, at any automatic level, and so does a forced one.
        for action, history in (("terminate", warned(61)),
                                ("force_terminate", warned(60, entry("terminate", 20)))):
            d = decide(act(action, finding_kind="idle"), facts(findings=[keepalive]), policy, history)
            check(d, "needs_approval", "approval", "needs a human", "keep-alive")
            check(decide(act(action, finding_kind="idle"), facts(findings=[keepalive]), policy, history,
                         approved=True), "allow", "allow", "approved by a human")
    # Approval does not skip the warning: still denied without one.
    check(decide(act(), facts(findings=[keepalive]), Policy(), History(), approved=True), "deny", "warning_first")
    # A plain idle or zombie finding beside it licenses the stop on its own.
    both = [keepalive, finding("zombie")]
    assert decide(act(), facts(findings=both), everything_automatic, warned(61)).verdict == "allow"


def test_naive_times_are_read_as_utc():
    naive = Facts(now=NOW.replace(tzinfo=None), job=job(), findings=[finding()])
    assert decide(act(), naive, Policy(), warned(61)).verdict == "allow"


def test_a_guardrail_bug_fails_closed(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(guardrail_scope, "protection_reason", broken)
    check(decide(act(), facts(), Policy(), warned()), "deny", "internal_error", "boom")


def test_a_resize_ignores_job_facts():
    stray = pool_facts().model_copy(update={"job": job(namespace="kube-system")})
    policy = parse_policy({"levels": {"overrides": [{"namespace": "kube-system", "max": 1}]}})
    check(decide(resize(5), stray, policy, History(), approved=True), "allow", "allow")


# Later additions: dry runs, stale warnings, scheduler refusals


def test_dry_run_escalates_as_if_the_warning_had_been_sent():
    dry = parse_policy({"mode": "dry_run"})
    history = History(entries=[entry("notify", 60, status="dry_run", finding_kind="idle", deadline=ago(30))])
    decision = decide(act(), facts(), dry, history)
    assert decision.verdict == "allow" and decision.dry_run
    # In enforce mode a dry-run warning is no warning at all.
    check(decide(act(), facts(), Policy(), history), "deny", "warning_first", "has not been warned")


def test_a_stale_warning_does_not_announce_a_stop():
    policy = Policy()
    stale = (policy.warning.repeat_every + policy.warning.min_notice) / 60 + 10
    check(decide(act(), facts(), policy, warned(stale)), "deny", "warning_first", "has not been warned")
    assert decide(act(), facts(), policy, warned(60)).verdict == "allow"


def test_a_warning_about_an_earlier_lull_does_not_announce_a_stop_in_this_one():
    """Warned in a lull at minute -200, the job worked again; its new quiet stretch began 90 minutes ago. The old
    warning announced the old lull: the stop needs a warning sent in this stretch, and that one is no repeat."""
    policy = Policy()
    history = warned(200)
    check(decide(act(), facts(), policy, history), "deny", "warning_first", "has not been warned")
    assert decide(act("notify", finding_kind="idle"), facts(), policy, history).verdict == "allow"
    # Warned within this stretch (90 minutes ago it began; warned 70 minutes ago): the stop stands.
    assert decide(act(), facts(), policy, warned(70)).verdict == "allow"


def test_a_warning_just_before_the_last_activity_does_not_announce_a_stop():
    """The stretch began 90 minutes ago: the end of the slice that held the last activity. A warning sent 92
    minutes ago, inside that slice, may have come before the activity (the dev trace: warned at 19.50 h, a 15 %
    burst at 19.55 h, stopped 1.3 h later without another word). It announced the lull before; the one sent as
    the stretch began counts."""
    policy = Policy()
    check(decide(act(), facts(), policy, warned(92)), "deny", "warning_first", "has not been warned")
    assert decide(act(), facts(), policy, warned(90)).verdict == "allow"
    from agent.planning.policy_model import PolicyModel

    step = PolicyModel._next_step(finding(), "running", warned(92), policy, NOW)
    assert step is not None and step.action == "notify"


def test_a_warning_the_steward_failed_to_replace_no_longer_licenses_a_stop():
    """Warned 80 minutes ago; 70 minutes ago the steward tried to warn again (a new stretch the sweep saw, or a
    repeat) and the message failed. What the owner last heard may not be what the stop is about: the stop waits
    for a delivered warning, and the planner keeps trying to send one. A failed attempt before the delivered
    warning changes nothing."""
    failed = entry("notify", 70, status="failed", finding_kind="idle", detail="webhook 502")
    check(decide(act(), facts(), Policy(), warned(80, failed)), "deny", "warning_first", "was not delivered",
          "webhook 502")
    assert decide(act(), facts(), Policy(), warned(70, entry("notify", 85, status="failed", finding_kind="idle"))
                  ).verdict == "allow"
    from agent.planning.policy_model import PolicyModel

    step = PolicyModel._next_step(finding(), "running", warned(80, failed), Policy(), NOW)
    assert step is not None and step.action == "notify"


def test_an_approval_asked_about_an_earlier_stretch_does_not_license_a_stop_in_this_one():
    """Asked 2 hours ago, approved now; the job worked since and its current stretch began 90 minutes ago. The
    human judged the evidence of the earlier lull: the stop needs a new request. Asked within this stretch, the
    approval stands."""
    history = warned(70)
    check(decide(act(), facts(), Policy(), history, approved=True, asked_at=ago(120)), "deny", "approval_stale",
          "before the current stretch of waste began", "needs a new request")
    assert decide(act(), facts(), Policy(), history, approved=True, asked_at=ago(10)).verdict == "allow"
    # A warning is no stop: an approval's age says nothing about it.
    assert decide(act("notify", finding_kind="idle"), facts(), Policy(), History(), approved=True,
                  asked_at=ago(120)).verdict == "allow"


def test_a_job_without_a_uid_is_not_licensed_by_a_namesakes_warning():
    """The backend gave no uid: a warning recorded for a job with one (an earlier pod under the name) is that
    job's, not this one's. One recorded without a uid still counts."""
    old = History(entries=[warning(70, target_uid="old-pod-uid")])
    check(decide(act(), facts(), Policy(), old), "deny", "warning_first", "has not been warned")
    assert decide(act(), facts(), Policy(), warned(70)).verdict == "allow"
    # The planner reads the records the same way: it warns this job instead of proposing a stop it cannot make.
    from agent.planning.policy_model import PolicyModel

    step = PolicyModel._next_step(finding(), "running", old, Policy(), NOW)
    assert step is not None and step.action == "notify"


def test_the_planner_warns_again_when_its_warning_was_about_an_earlier_lull():
    from agent.planning.policy_model import PolicyModel

    step = PolicyModel._next_step(finding(), "running", warned(200), Policy(), NOW)
    assert step is not None and step.action == "notify"
    step = PolicyModel._next_step(finding(), "running", warned(70), Policy(), NOW)
    assert step is not None and step.action == "terminate"


def test_a_refused_stop_does_not_trip_the_circuit_breaker():
    refusals = [entry("terminate", m, status="refused", target=f"ml/other-{m}") for m in (5, 10, 15, 20)]
    assert decide(act(), facts(), Policy(), warned(60, *refusals)).verdict == "allow"
    failures = [entry("terminate", m, status="failed", target=f"ml/other-{m}") for m in (5, 10, 15, 20)]
    check(decide(act(), facts(), Policy(), warned(60, *failures)), "deny", "circuit_breaker")


def test_keep_until_annotation_protects_until_its_time():
    kept = job(annotations={"steward.io/keep-until": "2025-03-01T14:00:00Z"})
    check(decide(act(), facts(kept), Policy(), warned()), "deny", "protected", "keep-until", "2025-03-01 14:00 UTC")
    past = job(annotations={"steward.io/keep-until": "2025-03-01T11:00:00+00:00"})
    assert decide(act(), facts(past), Policy(), warned()).verdict == "allow"
    garbled = job(annotations={"steward.io/keep-until": "next tuesday"})
    check(decide(act(), facts(garbled), Policy(), warned()), "deny", "protected", "not an ISO 8601 time")
    # A keep-until that passed after the warning answered it, as an audited keep does: the owner is warned again
    # and has the full notice (a reviewer: the annotation lapsed straight into a stop on the answered warning).
    answered = job(annotations={"steward.io/keep-until": "2025-03-01T11:30:00+00:00"})
    check(decide(act(), facts(answered), Policy(), warned()), "deny", "warning_first", "has not been warned")
    assert decide(act("notify", finding_kind="idle"), facts(answered), Policy(), warned()).verdict == "allow"


def test_a_keep_until_out_of_range_protects_and_is_named_not_a_crash():
    """`9999-12-31T23:59:59-23:59` parses, then overflows in UTC: it raised OverflowError out of the plan step, so one
    user's annotation failed every sweep for everyone. It is unreadable, and unreadable protects and says so."""
    odd = job(annotations={"steward.io/keep-until": "9999-12-31T23:59:59-23:59"})
    check(decide(act(), facts(odd), Policy(), warned()), "deny", "protected", "not an ISO 8601 time")


def test_a_keep_recorded_by_uid_protects_that_job_only_not_a_later_namesake():
    """An approver kept bob's Slurm job gpu/train (uid recorded) for 30 days: mallory naming her idle job `train`
    in the same partition inherited the keep by name. A record with a uid is matched by the uid."""
    keep = Exemption(target="gpu/train", until=NOW + timedelta(days=29), by="oncall-lead", reason="bob's run",
                     target_uid="slurm:300@1793600000", at=NOW - timedelta(days=1))
    mallory = slurm_job(id="gpu/train", name="train", user="mallory", uid="slurm:512@1793690000")
    assert protection_reason(mallory, Policy(), History(exemptions=[keep]), NOW) is None
    bob = slurm_job(id="gpu/train-300", name="train", uid="slurm:300@1793600000")  # renamed when a namesake came
    assert "exempted by oncall-lead" in (protection_reason(bob, Policy(), History(exemptions=[keep]), NOW) or "")
    by_name = keep.model_copy(update={"target_uid": None})
    assert protection_reason(mallory, Policy(), History(exemptions=[by_name]), NOW) is not None
    # A pod recreated under its name in its namespace (a notebook after a node drain) is the job its owner kept:
    # only the namespace's team can take that name.
    nb_keep = Exemption(target="ml/nb-0", until=NOW + timedelta(days=29), by="oncall-lead", target_uid="old-uid",
                        at=NOW - timedelta(days=1))
    nb = job(id="ml/nb-0", name="nb-0", uid="new-uid", owner_kind="Notebook")
    assert protection_reason(nb, Policy(), History(exemptions=[nb_keep]), NOW) is not None


def test_a_warning_may_go_out_in_the_long_tail_grace_but_the_stop_waits_for_it():
    """A job idle for the window but quiet for less than its own rhythm allows (stop_after 40 minutes away): its
    owner may be warned now, stating that time as the deadline; a stop is refused until it passes, even when
    warned long enough ago, and even when a human approves."""
    from agent.planning.policy_model import PolicyModel, stop_deadline

    in_grace = finding().model_copy(update={"stop_after": NOW + timedelta(minutes=40)})
    policy = Policy()
    assert decide(act("notify", finding_kind="idle"), facts(findings=[in_grace]), policy, History()).verdict == "allow"
    assert stop_deadline(in_grace, policy, NOW) == NOW + timedelta(minutes=60)  # the notice is later: it decides
    late = in_grace.model_copy(update={"stop_after": NOW + timedelta(hours=3)})
    assert stop_deadline(late, policy, NOW) == NOW + timedelta(hours=3)  # the grace is later: the deadline says so
    for action, history in (("terminate", warned(70)), ("force_terminate", warned(70, entry("terminate", 20)))):
        check(decide(act(action, finding_kind="idle"), facts(findings=[in_grace]), policy, history), "deny",
              "long_tail_grace", "no stop before 2025-03-01 12:40 UTC")
        check(decide(act(action, finding_kind="idle"), facts(findings=[in_grace]), policy, history, approved=True),
              "deny", "long_tail_grace")
    # Once the grace has passed, the warning sent in it licenses the stop.
    over = in_grace.model_copy(update={"stop_after": NOW - timedelta(minutes=1)})
    assert decide(act(), facts(findings=[over]), policy, warned(70)).verdict == "allow"
    # The planner: a warning now; no stop while the grace runs; a stop once it has run out.
    assert PolicyModel._next_step(in_grace, "running", History(), policy, NOW).action == "notify"
    assert PolicyModel._next_step(in_grace, "running", warned(70), policy, NOW) is None
    assert PolicyModel._next_step(over, "running", warned(70), policy, NOW).action == "terminate"
    # A grace that ends more than a repeat period away: one warning per stop, so none yet.
    far = in_grace.model_copy(update={"stop_after": NOW + timedelta(seconds=policy.warning.repeat_every + 60)})
    assert PolicyModel._next_step(far, "running", History(), policy, NOW) is None


def test_the_history_index_reads_a_jobs_own_entries_and_follows_appends() -> None:
    """History.of_job / of_action, which every decision reads instead of the whole day's log: a job's entries by
    uid (under any name), a uid-less job's by name only among uid-less entries, and entries appended during the
    sweep (a warning just sent) seen by the next decision."""
    from core.actions import History, HistoryEntry

    at = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    entries = [HistoryEntry(action="notify", target="ml/a", status="executed", at=at, target_uid="u1"),
               HistoryEntry(action="notify", target="ml/a-renamed", status="executed", at=at, target_uid="u1"),
               HistoryEntry(action="notify", target="ml/a", status="executed", at=at),
               HistoryEntry(action="terminate", target="ml/b", status="refused", at=at, target_uid="u2")]
    history = History(entries=entries)
    assert [e.target for e in history.of_job("u1", "ml/a")] == ["ml/a", "ml/a-renamed"]
    assert history.of_job(None, "ml/a") == [entries[2]]
    assert history.of_action(("terminate",), ("executed",)) == []
    history.entries.append(HistoryEntry(action="terminate", target="ml/b", status="executed", at=at, target_uid="u2"))
    assert [e.status for e in history.of_job("u2", "ml/b")] == ["refused", "executed"]
    assert len(history.of_action(("terminate", "force_terminate"), ("executed",))) == 1
    copy = history.model_copy(update={"entries": entries[:1]})
    assert copy.of_job("u2", "ml/b") == [] and len(copy.of_job("u1", "ml/a")) == 1
    shared = history.model_copy()  # the same list: an append read through both is counted once in each
    history.entries.append(HistoryEntry(action="notify", target="ml/b", status="executed", at=at, target_uid="u2"))
    assert len(history.of_job("u2", "ml/b")) == 3 and len(shared.of_job("u2", "ml/b")) == 3
    assert len(history.of_job("u2", "ml/b")) == 3
