"""Planned pool changes (issue 16, parts 4-5): the scale-up back after a forecast scale-down, filling a predicted
quiet window with queued low-priority work (advice), and resource credits for owners of stopped jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from agent.config.policy import Policy, parse_policy
from agent.detectors.evidence import describe
from agent.detectors.pools import PlannedScaleUpDetector, QuietFillDetector
from agent.graph.cost_report import render_html, render_markdown
from agent.graph.execute import record_credit
from agent.guardrail.decide import Facts, decide
from agent.planning.policy_model import PolicyModel
from agent.records.audit import AuditLog
from agent.records.usage import build_report
from agent.wiring import simulated_deps
from core.actions import History, HistoryEntry, ProposedAction
from core.cluster import JobInfo, NodeInfo, PoolInfo
from core.observation import Observation
from core.pool_plans import open_scale_down, scale_up_uid
from evals.runner import run_scenario
from evals.suite import SCENARIO_DIR
from sim.scenario import PoolHistory, load_scenario

HOUR = 3600.0
DAY = datetime(2026, 11, 4, tzinfo=UTC)
DAILY = [12, 12, 12, 12, 12, 12, 12, 16, 22, 26, 28, 28, 26, 28, 28, 24, 20, 14, 4, 4, 4, 4, 4, 12]
HISTORY_END = DAY.replace(hour=16)


def at(hour: int, minute: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute)


def scale_down(**kw: object) -> HistoryEntry:
    fields: dict = {"action": "resize_pool", "target": "a100", "status": "executed", "at": at(18, 30),
                    "action_id": "run-1:abc", "nodes_before": 4, "target_nodes": 2, "scale_up_at": at(22),
                    "scale_up_nodes": 4, "gpus": 16}
    fields.update(kw)
    return HistoryEntry(**fields)


def history(*entries: HistoryEntry) -> History:
    return History(entries=list(entries))


def pool_obs(now: datetime, *, nodes: int = 2, max_nodes: int | None = 8, pending: list[JobInfo] | None = None,
             busy: int = 1, with_history: bool = False) -> Observation:
    """A pool of `nodes` A100 nodes, the first `busy` running an 8-GPU job, and the given pending jobs."""
    infos, jobs = [], []
    for i in range(nodes):
        name = f"a100-{i}"
        if i < busy:
            j = JobInfo(id=f"ml/train-{i}", uid=f"u{i}", scheduler="kubernetes", namespace="ml", name=f"train-{i}",
                        user="alice", gpus=8, node=name, started_at=now - timedelta(hours=3))
            jobs.append(j)
            infos.append(NodeInfo(name=name, pool="a100", gpus=8, jobs=[j.id]))
        else:
            infos.append(NodeInfo(name=name, pool="a100", gpus=8))
    extra = {}
    if with_history:
        end, values = PoolHistory(days=21, daily=[float(v) for v in DAILY], noise=1.5, seed=11).hourly(HISTORY_END,
                                                                                                       32.0)
        extra = {"load_history": values, "load_history_end": end}
    pool = PoolInfo(name="a100", gpus_per_node=8, nodes=nodes, min_nodes=1, max_nodes=max_nodes,
                    price_per_gpu_hour=4.1, billing="on-demand", busy_nodes=busy, used_gpus=8 * busy, **extra)
    return Observation(at=now, slice_s=300.0, lookback_s=HOUR, jobs=jobs + (pending or []), nodes=infos,
                       pools=[pool], gpus=[])


def pending(job_id: str, gpus: int, *, cls: str | None = None, scheduler: str = "kubernetes", qos: str | None = None,
            waited_min: int = 20, now: datetime | None = None) -> JobInfo:
    ns, name = job_id.split("/")
    return JobInfo(id=job_id, uid=f"p-{name}", scheduler=scheduler, namespace=ns, name=name, user="bob", gpus=gpus,
                   state="pending", priority_class=cls, qos=qos,
                   submitted_at=(now or at(19)) - timedelta(minutes=waited_min))


def scale_up(target: int = 4, down: HistoryEntry | None = None) -> ProposedAction:
    return ProposedAction(action="resize_pool", target="a100", target_nodes=target, finding_kind="pool_scale_up",
                          target_uid=scale_up_uid(down or scale_down()))


def facts(obs: Observation, findings: list) -> Facts:
    return Facts(now=obs.at, pool=obs.pools[0], findings=findings, cluster_gpus=obs.cluster_gpus())


# -- the scale-up back ------------------------------------------------------------------------------------------


def test_the_scale_up_is_proposed_only_once_its_planned_time_has_come():
    h = history(scale_down())
    assert PlannedScaleUpDetector(Policy()).detect(pool_obs(at(21, 55)), h) == []
    [f] = PlannedScaleUpDetector(Policy()).detect(pool_obs(at(22)), h)
    assert f.kind == "pool_scale_up" and f.target_type == "pool" and f.metrics["target_nodes"] == 4 and f.gpus == 16
    assert "scaled down from 4 to 2 nodes at 18:30 UTC" in f.evidence and "scale back up to 4 nodes" in f.evidence
    zh = describe(f, "zh")
    assert "计划的扩容时间 22:00（UTC）已到" in zh and "扩容回 4 个节点" in zh
    beijing = describe(f, "zh", ZoneInfo("Asia/Shanghai"))
    assert "于 02:30（北京时间）为预测的低负载窗口缩容" in beijing and "计划的扩容时间 06:00（北京时间）已到" in beijing
    # The planner proposes it under the scale-down's identity: one scale-up per scale-down.
    deps = SimpleNamespace(policy=Policy(), approvals=SimpleNamespace(pending=lambda: []), language="en")
    [p] = PolicyModel().plan([f], pool_obs(at(22)), h, deps).proposals  # type: ignore[arg-type]
    assert p.action == "resize_pool" and p.target_nodes == 4 and p.target_uid == scale_up_uid(scale_down())


def test_a_models_growing_resize_is_keyed_on_the_open_scale_down():
    from agent.graph.nodes.plan import _as_scale_up

    h = history(scale_down())
    model = ProposedAction(action="resize_pool", target="a100", target_nodes=4, finding_kind="oversized",
                           proposed_by="llm")
    p = _as_scale_up(model, pool_obs(at(22)), h)
    assert p.target_uid == scale_up_uid(scale_down()) and p.finding_kind == "pool_scale_up"
    shrink = model.model_copy(update={"target_nodes": 1})
    assert _as_scale_up(shrink, pool_obs(at(22)), h) == shrink
    assert _as_scale_up(model, pool_obs(at(22)), History()) == model


def test_pending_jobs_with_no_room_bring_the_scale_up_forward():
    obs = pool_obs(at(19), busy=2, pending=[pending("ml/big", 8)])
    [f] = PlannedScaleUpDetector(Policy()).detect(obs, history(scale_down()))
    assert f.metrics["due"] == 0.0 and f.metrics["waiting_jobs"] == 1 and "ml/big (8 GPUs)" in f.evidence
    assert "找不到空位" in describe(f, "zh")
    # A job that fits the free node does not, nor one just submitted (the scheduler may be a moment behind).
    assert PlannedScaleUpDetector(Policy()).detect(pool_obs(at(19), busy=1, pending=[pending("ml/big", 8)]),
                                                   history(scale_down())) == []
    assert PlannedScaleUpDetector(Policy()).detect(
        pool_obs(at(19), busy=2, pending=[pending("ml/big", 8, waited_min=1)]), history(scale_down())) == []


def test_jobs_held_by_a_quota_or_a_gate_or_stuck_do_not_bring_the_scale_up_forward():
    """Slurm holds the jobs for their QOS group limit (QOSGrpGRES), Kueue gates the pods, one pod asks for more GPUs
    than a node has: nodes start none of them, so growing the pool early would buy GPUs that stay empty all night
    (Slurm's power saving wakes cloud nodes only for jobs it can start)."""
    held = [pending("cloud/sweep-a", 16, scheduler="slurm").model_copy(update={"pending_reason": "QOSGrpGRES"}),
            pending("cloud/sweep-b", 8, scheduler="slurm").model_copy(update={"pending_reason": "AssocGrpGRES"}),
            pending("research/gated", 8).model_copy(update={"pending_reason": "SchedulingGated"}),
            pending("vision/huge", 16).model_copy(update={"pending_reason": "Unschedulable"})]
    assert PlannedScaleUpDetector(Policy()).detect(pool_obs(at(19), busy=2, pending=held), history(scale_down())) == []
    # The same pod waiting for GPUs does.
    waits = pending("ml/big", 8).model_copy(update={"pending_reason": "Unschedulable"})
    [f] = PlannedScaleUpDetector(Policy()).detect(pool_obs(at(19), busy=2, pending=[*held, waits]),
                                                  history(scale_down()))
    assert f.metrics["waiting_jobs"] == 1 and "ml/big (8 GPUs)" in f.evidence


def test_never_above_max_nodes_and_never_twice():
    [f] = PlannedScaleUpDetector(Policy()).detect(pool_obs(at(22), max_nodes=3), history(scale_down()))
    assert f.metrics["target_nodes"] == 3 and "capped at max_nodes 3" in f.evidence
    obs = pool_obs(at(22), max_nodes=3)
    assert decide(scale_up(4), facts(obs, [f]), Policy(), history(scale_down())).rule == "reserve"
    # Done once: the executed scale-up (carrying the scale-down's identity) closes the plan.
    done = HistoryEntry(action="resize_pool", target="a100", status="executed", at=at(22, 5), action_id="run-9:def",
                        nodes_before=2, target_nodes=4, target_uid=scale_up_uid(scale_down()))
    h = history(scale_down(), done)
    assert open_scale_down(h, "a100") is None
    assert PlannedScaleUpDetector(Policy()).detect(pool_obs(at(22, 10), nodes=4, busy=1), h) == []
    assert PlannedScaleUpDetector(Policy()).detect(pool_obs(at(22, 10)), h) == []
    d = decide(scale_up(4), facts(pool_obs(at(22, 10)), [f]), Policy(), h)
    assert d.verdict == "deny" and "undoes no open forecast scale-down" in d.reason


def test_refused_when_the_pool_changed_since_the_scale_down():
    h = history(scale_down())
    [f] = PlannedScaleUpDetector(Policy()).detect(pool_obs(at(22)), h)
    changed = pool_obs(at(22), nodes=3)
    detector = PlannedScaleUpDetector(Policy())
    assert detector.detect(changed, h) == [] and "changed since" in detector.notes["a100"]
    d = decide(scale_up(4), facts(changed, [f]), Policy(), h)
    assert d.verdict == "deny" and d.rule == "reserve" and "changed since" in d.reason


def test_the_guardrail_asks_for_approval_at_level_4_and_the_policy_may_lower_it_to_3():
    h = history(scale_down())
    obs = pool_obs(at(22))
    [f] = PlannedScaleUpDetector(Policy()).detect(obs, h)
    d = decide(scale_up(4), facts(obs, [f]), Policy(), h)
    assert d.verdict == "needs_approval" and d.level == 4
    assert decide(scale_up(4), facts(obs, [f]), Policy(), h, approved=True).verdict == "allow"
    three = parse_policy({"detectors": {"pools": {"scale_up_level": 3}}, "levels": {"max_auto": 3,
                                                                                   "require_approval": [4]}})
    d = decide(scale_up(4), facts(obs, [f]), three, h)
    assert d.verdict == "allow" and d.level == 3
    # No finding, no growth; another scale-down's identity, no growth; above the recorded size, no growth.
    assert decide(scale_up(4), facts(obs, []), Policy(), h, approved=True).rule == "no_finding"
    other = scale_up(4, scale_down(action_id="run-0:zzz"))
    assert decide(other, facts(obs, [f]), Policy(), h, approved=True).rule == "reserve"
    assert decide(scale_up(5), facts(obs, [f]), Policy(), h, approved=True).rule == "reserve"


def test_through_approval_the_pool_grows_back_once_after_its_planned_time():
    r = run_scenario(load_scenario(SCENARIO_DIR / "pool-forecast-scale-up.yaml"), Policy(), PolicyModel())
    assert r.score.passed and r.score.false_kills == 0
    resized = [a for a in r.actions if a["job"] == "a100-ondemand" and a["action"] == "resize_pool"
               and a["status"] == "executed"]
    assert [a["removed_nodes"] for a in resized] == [2, 0]
    down, up = resized
    assert down["at_s"] == 150 * 60 and up["at_s"] >= 375 * 60  # after the scripted approval at 22:15
    assert up["uid"].startswith("scale-down:")
    assert any(f["kind"] == "pool_scale_up" and f["first_at_s"] == 6 * HOUR for f in r.findings)  # 22:00
    # The 16 released GPUs count as reclaimed from 18:30 to the scale-up at 22:15 only.
    assert r.score.reclaimed_gpu_hours == pytest.approx(16 * 3.75)


# -- a scale-down interrupted by a kill --------------------------------------------------------------------------

POOL = "a100-ondemand"
AUTO = {"levels": {"max_auto": 4, "require_approval": []}}  # the scale-down runs inside the sweep, no approval


def _pool_resizes(deps: SimpleNamespace) -> list:
    return [e for e in deps.audit.entries(kind="execution", target=POOL, limit=100, newest_first=False)
            if e.action == "resize_pool"]


def _run_day(pools: object | None = None) -> tuple:
    """pool-forecast-scale-up's day, swept every 5 minutes; a sweep killed (Killed) is followed by a restarted
    service. `pools(cluster)` stands in for the pool adapter."""
    from agent.graph.service import SweepService
    from tests.fault_world import Killed

    scenario = load_scenario(SCENARIO_DIR / "pool-forecast-scale-up.yaml")
    deps, cluster = simulated_deps(scenario, parse_policy(AUTO, "test"), PolicyModel())
    if pools is not None:
        deps.pools = pools(cluster)  # type: ignore[operator]
    service = SweepService(deps, run_prefix="test")
    t = 300.0
    while t <= scenario.duration:
        cluster.advance_to(t)
        try:
            service.sweep(trigger="test")
        except Killed:
            deps.pools = cluster  # the restarted process, with the real adapter
            service = SweepService(deps, run_prefix="restarted")
        t += 300.0
    return deps, cluster, next(p.nodes for p in cluster.list_pools() if p.name == POOL)


def test_a_scale_down_killed_after_its_call_keeps_its_planned_scale_up():
    """Was: settled `executed` at restart without the plan (the intent never carried it): no scale-up was ever
    proposed, and the pool stayed at 2 nodes past its quiet window."""
    from tests.fault_world import kill_at

    def dying(cluster):
        kill_at(cluster, "resize_pool", after=True)  # the call goes out; the process dies before its audit
        return cluster

    deps, _, nodes = _run_day(dying)
    down, up = [e for e in _pool_resizes(deps) if e.status == "executed"]
    assert "interrupted at 18:00" in down.reason and down.data["removed_nodes"] == 2
    assert (down.data["nodes_before"], down.data["nodes_after"], down.data["scale_up_nodes"]) == (4, 2, 4)
    assert down.data["scale_up_at"] == at(22).isoformat()
    assert up.data["target_nodes"] == 4 and up.at == at(22) and nodes == 4


def test_a_scale_down_killed_halfway_grows_back_to_the_size_before_it():
    """Killed between two terminate calls (4 -> 3 of 4 -> 2). Was: the young intent left unsettled, the restarted
    steward shrank 3 -> 2 on its own plan (back to 3), and the old intent, seeing 2 nodes, was settled as having
    removed 2: the pool ended the night at 2 nodes. Now no resize goes beside an unsettled one, the settlement
    records what changed (one node), and the further shrink keeps the first's way back, to 4."""
    from tests.fault_world import Killed

    killed: list[int] = []

    def halfway(cluster):
        class Pools:
            def list_pools(self):
                return cluster.list_pools()

            def resize_pool(self, pool, target, *, reason=""):
                now = next(p.nodes for p in cluster.list_pools() if p.name == pool)
                if not killed and target < now - 1:
                    killed.append(now)
                    cluster.resize_pool(pool, now - 1)
                    raise Killed("killed between the two terminate calls")
                return cluster.resize_pool(pool, target, reason=reason)
        return Pools()

    deps, _, nodes = _run_day(halfway)
    said = [(e.at.strftime("%H:%M"), e.status, e.data.get("nodes_before"), e.data.get("nodes_after"),
             e.data.get("removed_nodes"), e.data.get("scale_up_nodes")) for e in _pool_resizes(deps)]
    assert killed == [4] and said == [
        ("18:05", "skipped", None, None, 0, None),  # the 18:00 resize is not settled yet: nothing beside it
        ("18:10", "executed", 4, 3, 1, 4),  # settled from what changed: one node, with its plan back to 4
        ("18:10", "executed", 3, 2, 1, 4),  # the rest of the shrink keeps that way back
        ("22:00", "executed", 2, 4, 0, None)], said
    skipped = _pool_resizes(deps)[0]
    assert "has no outcome yet" in skipped.reason
    from agent.graph.report import outcome_text

    assert outcome_text("resize_pool", "skipped", skipped.data["detail"], skipped.reason, "zh").startswith(
        "未执行：该节点池之前的一次调整尚无结果")
    assert "took effect in part (4->3 of 4->2)" in _pool_resizes(deps)[1].reason
    assert nodes == 4


def test_an_interrupted_resize_is_settled_from_what_changed():
    from agent.graph.execute import settle_interrupted

    def settle(nodes_now: int, *, before: int = 4, wanted: int = 2, minutes: int = 11):
        audit = AuditLog(":memory:")
        pool = PoolInfo(name="a100", gpus_per_node=8, nodes=nodes_now, min_nodes=1)
        deps = SimpleNamespace(audit=audit, clock=SimpleNamespace(now=lambda: at(18) + timedelta(minutes=minutes)),
                               pools=SimpleNamespace(list_pools=lambda: [pool]))
        plan = {"scale_up_at": at(22).isoformat(), "scale_up_nodes": before} if wanted < before else {}
        audit.record("intent", at=at(18), run_id="killed", target="a100", action="resize_pool", level=4,
                     status="acting", reason="about to resize_pool a100",
                     data={"action_id": "a1", "target_nodes": wanted, "nodes_before": before, **plan})
        if not settle_interrupted(deps, "restart"):  # type: ignore[arg-type]
            return None
        [e] = audit.entries(kind="execution", limit=5)
        return e.status, e.data["removed_nodes"], e.data["gpus"], e.data.get("nodes_after"), \
            e.data.get("scale_up_nodes"), e.data.get("added_gpus")

    assert settle(2) == ("executed", 2, 16, 2, 4, 0)
    assert settle(3) == ("executed", 1, 8, 3, 4, 0)  # killed halfway: the one node that went, and the plan back
    assert settle(1) == ("executed", 2, 16, 2, 4, 0)  # someone shrank it further since: only its own two nodes
    assert settle(4)[:2] == settle(5)[:2] == ("skipped", 0)  # nothing went, or someone grew it meanwhile
    assert settle(4)[4] is None  # no plan without a scale-down
    assert settle(3, before=2, wanted=4) == ("executed", 0, 0, 3, None, 8)  # a scale-up back, in part
    assert settle(3, minutes=5) is None  # young and short of its target: it may still be running


# -- filling the quiet window (advice) -------------------------------------------------------------------------

FILL = parse_policy({"detectors": {"pools": {"fill_classes": ["batch-low", "preemptible"]}}})


def fill_obs(now: datetime, jobs: list[JobInfo], **kw: object) -> Observation:
    return pool_obs(now, nodes=4, busy=1, pending=jobs, with_history=True, **kw)  # type: ignore[arg-type]


def test_queued_low_priority_work_that_fits_a_predicted_window_is_suggested():
    jobs = [pending("batch/sweep-1", 8, cls="batch-low", now=at(18, 30)),
            pending("batch/sweep-2", 8, cls="preemptible", now=at(18, 30)),
            pending("ml/urgent", 8, cls="high", now=at(18, 30))]
    [f] = QuietFillDetector(FILL).detect(fill_obs(at(18, 30), jobs))
    assert f.kind == "quiet_fill" and f.target == "a100" and f.gpus == 16 and f.metrics["fill_jobs"] == 2
    assert "18:00-23:00 UTC" in f.evidence and "batch/sweep-1 (8 GPUs)" in f.evidence and "ml/urgent" not in f.evidence
    assert "24 idle GPUs" in f.evidence
    zh = describe(f, "zh")
    assert "低负载窗口 18:00-23:00（UTC）" in zh and "batch/sweep-1（8 块 GPU）" in zh and "空闲 24 块 GPU" in zh
    # Advice only: the planner proposes nothing for it.
    deps = SimpleNamespace(policy=FILL, approvals=SimpleNamespace(pending=lambda: []), language="en")
    assert PolicyModel().plan([f], fill_obs(at(18, 30), jobs), History(), deps).proposals == []  # type: ignore[arg-type]
    # Slurm: the QOS names the class.
    slurm = [pending("gpu/sim", 16, scheduler="slurm", qos="preemptible", now=at(17, 30))]
    [f] = QuietFillDetector(FILL).detect(fill_obs(at(17, 30), slurm))  # within the hour before the window
    assert f.gpus == 16 and "starting within the hour" in f.evidence


def test_no_fill_suggestion_without_a_window_a_class_or_room():
    low = [pending("batch/sweep-1", 8, cls="batch-low", now=at(12))]
    assert QuietFillDetector(FILL).detect(fill_obs(at(12), low)) == []  # busy hours: no window
    at_night = [pending("batch/sweep-1", 8, cls="batch-low", now=at(19))]
    assert QuietFillDetector(Policy()).detect(fill_obs(at(19), at_night)) == []  # no fill_classes: none
    assert QuietFillDetector(FILL).detect(fill_obs(at(19), [pending("ml/x", 8, cls="high")])) == []
    too_big = [pending("batch/huge", 16, cls="batch-low")]  # one pod larger than any node
    assert QuietFillDetector(FILL).detect(fill_obs(at(19), too_big)) == []
    assert QuietFillDetector(FILL).detect(pool_obs(at(19), nodes=4, pending=at_night)) == []  # no history


def test_gated_low_priority_pods_are_not_suggested_for_a_quiet_window():
    """A pod Kueue gates waits for its quota, not for idle GPUs: starting it is not the operators' to suggest."""
    low = pending("batch/sweep-1", 8, cls="batch-low", now=at(19))
    gated = low.model_copy(update={"pending_reason": "SchedulingGated"})
    assert QuietFillDetector(FILL).detect(fill_obs(at(19), [gated])) == []
    [f] = QuietFillDetector(FILL).detect(fill_obs(at(19), [low]))
    assert f.metrics["fill_jobs"] == 1


# -- resource credits ------------------------------------------------------------------------------------------


def _credit_deps(tmp_path: Path, policy: Policy) -> SimpleNamespace:
    return SimpleNamespace(policy=policy, audit=AuditLog(tmp_path / "audit.sqlite"))


def _stopped(job_id: str = "ml/notebook", uid: str = "u-1", user: str = "carol") -> JobInfo:
    ns, name = job_id.split("/")
    return JobInfo(id=job_id, uid=uid, scheduler="kubernetes", namespace=ns, name=name, user=user, gpus=4,
                   state="stopping")


def test_a_credit_is_audited_once_per_stop_and_none_by_default(tmp_path: Path):
    job = _stopped()
    terminate = ProposedAction(action="terminate", target=job.id, finding_kind="idle", target_uid=job.uid)
    none = _credit_deps(tmp_path / "none", Policy())
    record_credit(none, "run", job, terminate, [], at(3))  # type: ignore[arg-type]
    assert none.audit.entries(kind="credit") == []
    deps = _credit_deps(tmp_path, parse_policy({"credit": {"kind": "priority", "priority_bump": 2}}))
    record_credit(deps, "run", job, terminate, [], at(3))  # type: ignore[arg-type]
    force = terminate.model_copy(update={"action": "force_terminate"})
    record_credit(deps, "run", job, force, [], at(3, 5))  # type: ignore[arg-type]  # the same stop
    [entry] = deps.audit.entries(kind="credit")
    assert entry.data["owner"] == "carol" and entry.data["gpus"] == 4 and entry.data["gpu_hours"] == 96.0
    assert entry.data["kind"] == "priority" and entry.data["priority_bump"] == 2
    assert "priority +2 for 1d" in (entry.reason or "") or "priority +2 for 24h" in (entry.reason or "")
    # A namesake (another uid) is another stop: its own credit.
    record_credit(deps, "run", _stopped(uid="u-2"), terminate.model_copy(update={"target_uid": "u-2"}), [],  # type: ignore[arg-type]
                  at(5))
    assert len(deps.audit.entries(kind="credit")) == 2


def test_an_executed_stop_records_the_credit_and_the_report_shows_it_in_english_and_chinese(tmp_path: Path):
    from agent.graph.service import SweepService

    scenario = load_scenario(SCENARIO_DIR / "idle-notebook.yaml")
    policy = parse_policy({"credit": {"kind": "quota_grace", "valid_for": "12h"}})
    deps, cluster = simulated_deps(scenario, policy, PolicyModel(), data_dir=tmp_path)
    service = SweepService(deps, run_prefix=scenario.name)
    t = 300.0
    while t <= scenario.duration:
        cluster.advance_to(t)
        service.sweep(trigger="test")
        t += 300.0
    stops = [e for e in deps.audit.entries(kind="execution", status="executed")
             if e.action in ("terminate", "force_terminate")]
    credits = deps.audit.entries(kind="credit")
    assert stops and len(credits) == len({e.data.get("target_uid") for e in stops})
    owner, gpus = credits[0].data["owner"], credits[0].data["gpus"]
    assert credits[0].data["gpu_hours"] == gpus * 12
    until = deps.audit.entries(kind="usage", limit=1)[0].at
    report = build_report(deps.audit, until - timedelta(days=7), until)
    [row] = report.credits
    assert row.owner == owner and row.stops == len(credits) and row.kind == "quota_grace"
    en, zh = render_markdown(report, "en"), render_markdown(report, "zh")
    assert f"{owner}: 1 stop(s), {gpus} GPUs reclaimed, credit {gpus * 12:,.1f} GPU-hours (quota grace)" in en
    assert f"{owner}：1 次停止，回收 {gpus} 块 GPU，补偿 {gpus * 12:,.1f} GPU 小时（配额宽限）" in zh
    assert "Credits for reclaimed jobs" in render_html(report, "en") and "被回收作业的资源补偿" in render_html(report, "zh")
    # Without a credit policy: no entry, no line.
    assert "Credits" not in render_markdown(build_report(AuditLog(tmp_path / "empty.sqlite"), until, until), "en")
