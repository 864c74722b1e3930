"""A pool exemption (POST /api/exemptions naming a pool, now honoured by protected_rule and the policy model) also
refuses the scale-up back that the steward's own earlier scale-down planned: an owner who exempts the pool to keep
its nodes ("capacity test tonight") keeps it at the size the steward shrank it to, past the planned scale-up. The
exemption asks the steward not to take nodes away; restoring what it took is what the owner wants."""

from __future__ import annotations

from datetime import timedelta

from agent.config.policy import parse_policy
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from evals.suite import SCENARIO_DIR
from sim.scenario import load_scenario

POOL = "a100-ondemand"


def test_a_pool_exemption_does_not_hold_back_the_planned_scale_up_back():
    scenario = load_scenario(SCENARIO_DIR / "pool-forecast-scale-up.yaml")
    deps, cluster = simulated_deps(scenario, parse_policy({}, "test"), PolicyModel())
    service = SweepService(deps)
    exempted = False
    t = 0.0
    while t < scenario.duration - 300:
        t += 300.0
        cluster.advance_to(t)
        service.sweep(trigger="test")
        for request in deps.approvals.pending():
            if request.action == "resize_pool":
                service.answer(request.id, "approve", by="lead")
        pool = next(p for p in cluster.list_pools() if p.name == POOL)
        if not exempted and pool.nodes < 4:
            # Shrunk to 2 with its scale-up back planned; the owner exempts the pool for tonight's capacity test.
            now = deps.clock.now()
            deps.audit.record("exemption", at=now, run_id="api", target=POOL, status="granted",
                              reason="capacity test tonight, keep the pool's nodes",
                              data={"until": (now + timedelta(hours=8)).isoformat(), "by": "lead", "target_uid": None})
            exempted = True
    assert exempted, "the scenario no longer shrinks the pool"
    resizes = [(e.at.strftime("%H:%M"), e.status, e.data.get("nodes_before"), e.data.get("nodes_after"),
                (e.reason or "")[:90]) for e in deps.audit.entries(kind="execution", target=POOL, limit=100,
                                                                    newest_first=False) if e.action == "resize_pool"]
    pool = next(p for p in cluster.list_pools() if p.name == POOL)
    assert pool.nodes >= 4, f"the pool stays at {pool.nodes} nodes past its planned scale-up back: {resizes}"
