"""A keep on one pod of a distributed job protects its siblings (gang_protection_reason), but when it lapses only
the kept pod's own warnings are answered by it (keep_answered_at is per pod): the sibling is stopped at the first
sweep after the keep, on the warning it got before the keep, which ends the whole job, though the kept pod's owner
was warned again at that very sweep that the stop comes an hour later."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from agent.chatops.commands import grant_keep, parse_keep
from agent.config.policy import Policy
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from sim.scenario import load_scenario

ROOT = Path("/work/main")
GANG = "llm-sft/qwen-sft-"


def test_a_sibling_of_a_kept_pod_is_not_stopped_on_its_pre_keep_warning_when_the_keep_lapses():
    scenario = load_scenario(ROOT / "evals" / "scenarios" / "rendezvous-timeout-holding-gpus.yaml")
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel())
    service = SweepService(deps)
    kept_at = None
    for minute in range(5, 215, 5):
        cluster.advance_to(minute * 60)
        service.sweep()
        if minute == 80:  # both pods were warned at 02:00 (deadline 03:00); the owner keeps the master for 1 h
            reply = grant_keep(deps, parse_keep(f"keep 60m {GANG}master-0 debugging the rendezvous"), user="he",
                               approver=False, by="wecom:he", run_id="chatops-wecom", lang="en")
            assert reply.startswith("OK"), reply
            kept_at = deps.clock.now()
    execs = deps.audit.entries(kind="execution", limit=500, newest_first=False)
    stops = [e for e in execs if e.action in ("terminate", "force_terminate") and e.status == "executed"
             and (e.target or "").startswith(GANG)]
    assert stops, "nothing was stopped at all (the scenario no longer reaches a stop)"
    first = stops[0]
    # Every pod of the job must have been warned after the keep, with its full notice run, before any pod is
    # stopped: a stop of any pod ends the whole job the owner kept.
    late = {}
    for e in execs:
        if e.action == "notify" and e.status == "executed" and (e.target or "").startswith(GANG) and e.at > kept_at:
            late[e.target] = datetime.fromisoformat(e.data["deadline"])
    assert all(pod in late and late[pod] <= first.at for pod in (f"{GANG}master-0", f"{GANG}worker-0")), (
        f"{first.target} stopped at {first.at:%H:%M}, ending the job whose master the owner kept from "
        f"{kept_at:%H:%M} for 1 h; warnings since the keep (deadlines): "
        f"{ {k: v.strftime('%H:%M') for k, v in late.items()} }")
