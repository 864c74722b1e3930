"""Records dated ahead of the clock that reads them (a replica whose clock runs ahead, an NTP step back): what
protects or holds back counts from the moment it is written, whatever its timestamp. A keep dated ahead keeps the
job; an intent dated ahead is settled (its writer gone) or waited on, and is young for the age checks."""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import timedelta

import pytest

from agent.chatops.commands import KeepRequest, grant_keep
from agent.config.policy import parse_policy
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from evals.suite import SCENARIO_DIR
from sim.scenario import load_scenario
from tests.fault_world import Killed, kill_at
from tests.records_world import JOB, Steward
from tests.skewed_world import Skewed, SlurmLike

POOL = "a100-ondemand"


def test_a_keep_dated_a_minute_ahead_of_the_sweepers_clock_still_keeps_the_job(tmp_path):
    """An owner's keep recorded by a replica whose clock runs 3 minutes ahead (ChatOps callbacks reach any replica)
    keeps the job from the moment it is written: the sweeper, on its own clock, does not stop it at the deadline."""
    steward = Steward(tmp_path)
    cluster, deps = steward.cluster, steward.deps
    while not [e for e in deps.audit.entries(kind="execution", target=JOB, status="executed", limit=100)
               if e.action == "notify"]:
        steward.sweep(5)
    [warning] = [e for e in deps.audit.entries(kind="execution", target=JOB, limit=100) if e.action == "notify"]
    due = warning.at + timedelta(seconds=deps.policy.warning.min_notice)
    # Two minutes before the deadline the owner answers "keep 4h" in chat; the replica that takes the callback runs
    # 3 minutes ahead of the sweeper (or of the sweeper's clock after an NTP step back).
    cluster.advance_to(cluster.offset_of(due - timedelta(minutes=2)))
    api_replica = dataclasses.replace(deps, clock=Skewed(cluster, timedelta(minutes=3)))
    reply = grant_keep(api_replica, KeepRequest(seconds=4 * 3600, duration="4h", job=JOB, words=["eval", "tonight"]),
                       user="bob", approver=False, by="chatops:bob", run_id="chat", lang="en")
    assert reply.startswith("OK"), reply
    # The sweeper sweeps at the deadline, on its own clock.
    cluster.advance_to(cluster.offset_of(due))
    steward.service.sweep()
    stops = [e for e in deps.audit.entries(kind="execution", target=JOB, limit=100)
             if e.action in ("terminate", "force_terminate") and e.status == "executed"]
    assert not stops, (f"stopped at {stops[0].at:%H:%M} although its owner kept it ({reply!r}) two minutes "
                       f"before: {stops[0].reason}")
    steward.close()


def test_sigterm_not_sent_twice_when_restarted_on_a_clock_behind_the_intent(tmp_path):
    """A graceful stop whose process died right after the SIGTERM, restarted on a clock a few minutes behind: the
    intent dated "in the future" is settled (UNSURE_STOP on Slurm), and no second SIGTERM goes out."""
    first = Steward(tmp_path)
    cluster = first.cluster
    first.deps.scheduler = SlurmLike(cluster)
    kills = kill_at(first.deps.scheduler, "stop_job", after=True)  # dies right after the SIGTERM went out
    minute = 0
    with pytest.raises(Killed):
        while minute < 4 * 60:
            minute += 5 if minute < 110 else 15  # the sweep after 110 comes at 125 (a slow sweep before it)
            cluster.advance_to(minute * 60)
            first.service.sweep()
    assert kills and len([s for s in cluster.stops if not s.force]) == 1
    [intent] = [e for e in first.deps.audit.entries(kind="intent", limit=100) if e.action == "terminate"]
    first.close()

    # Restarted a minute later, on a host clock 4 minutes behind (the NTP step that the restart followed): still
    # past the stop's due time (the warning at 60 + the 1 h notice), before the intent's.
    cluster.advance_to(cluster.offset_s + 60)
    second = Steward(tmp_path, cluster=cluster)
    second.deps.scheduler = SlurmLike(cluster)
    second.deps.clock = Skewed(cluster, timedelta(minutes=-4))
    second.service.sweep()
    sigterms = [s for s in cluster.stops if not s.force and s.job == JOB]
    stops = [(e.action, e.status, (e.reason or "")[:90]) for e in second.deps.audit.entries(
        kind="execution", target=JOB, limit=100, newest_first=False) if e.action != "notify"]
    assert len(sigterms) == 1, (
        f"a second SIGTERM went out {sigterms[1].at - sigterms[0].at:g} s after the first, whose intent "
        f"(dated {intent.at:%H:%M:%S}) the restarted steward (clock {second.deps.clock.now():%H:%M:%S}) "
        f"neither settled nor waited on; outcomes: {stops}")
    second.close()


def test_no_second_shrink_beside_an_unsettled_one_on_a_clock_behind_it():
    """A scale-down carried out by replica A (its clock 10 minutes ahead of B's) dies between its two terminate calls
    (4 -> 3 of 4 -> 2). B sees the intent dated in its future: it is neither skipped nor settled as old; the next
    approved shrink is held until the interrupted one is settled from the pool's size."""
    scenario = load_scenario(SCENARIO_DIR / "pool-forecast-scale-up.yaml")
    deps, cluster = simulated_deps(scenario, parse_policy({}, "test"), PolicyModel())  # a resize waits for a human
    killed: list[int] = []

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

    deps.pools = Pools()
    a = SweepService(deps, run_prefix="a")
    t = 0.0
    while not deps.approvals.pending():
        t += 300.0
        cluster.advance_to(t)
        a.sweep(trigger="test")
        assert t < scenario.duration
    [asked] = deps.approvals.pending()
    for _ in range(4):  # the approver answers 20 minutes later, on replica A
        t += 300.0
        cluster.advance_to(t)
        a.sweep(trigger="test")
    a.take(asked.id, "approve", by="lead")  # taken now; carried out when A's next sweep begins (complete_answers)
    t += 300.0
    cluster.advance_to(t)
    with contextlib.suppress(Killed):
        a.sweep(trigger="test")
    assert killed == [4]
    # Replica B carries on (A died), its clock 10 minutes behind A's, with the real adapter.
    deps.pools, deps.clock = cluster, Skewed(cluster, timedelta(minutes=-10))
    b = SweepService(deps, run_prefix="b")
    # A's intent is young on B's clock (dated ahead of it) until LIVE_RESIZE after its date: B neither settles it
    # nor resizes beside it before then; it settles it after, and only then may a new resize go out.
    for _ in range(6):
        t += 300.0
        cluster.advance_to(t)
        b.sweep(trigger="test")
        for request in deps.approvals.pending():
            if request.action == "resize_pool":
                b.answer(request.id, "approve", by="lead")
    resizes = [(e.at.strftime("%H:%M"), e.status, e.data.get("nodes_before"), e.data.get("nodes_after"),
                e.data.get("scale_up_nodes"), (e.reason or "")[:70])
               for e in deps.audit.entries(kind="execution", target=POOL, limit=100, newest_first=False)
               if e.action == "resize_pool"]
    intents = [(e.at.strftime("%H:%M"), e.data.get("target_nodes")) for e in
               deps.audit.entries(kind="intent", target=POOL, limit=100, newest_first=False)]
    executed = [r for r in resizes if r[1] == "executed"]
    assert executed and "interrupted" in executed[0][5], (
        f"a resize went out beside the unsettled 4 -> 2 (A's intent is dated ahead of B's clock, so B neither "
        f"settled nor waited on it): intents {intents}, outcomes {resizes}; pool now "
        f"{next(p.nodes for p in cluster.list_pools() if p.name == POOL)} nodes")
