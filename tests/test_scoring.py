"""Scenario scoring against the answer key: a stop before the waste began (`truth.since`) is a false kill, and
only a warning sent since then announces it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agent.config.policy import Policy
from agent.planning.policy_model import PolicyModel
from evals.runner import run_scenario
from evals.scoring import score_run
from sim.scenario import load_scenario, parse_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "evals" / "scenarios"


def _scenario(since: str | None) -> Any:
    truth: dict[str, Any] = {"job": "ml/notebook", "waste": "idle"}
    if since is not None:
        truth["since"] = since
    return parse_scenario({
        "name": "since-rule", "duration": "4h",
        "pools": [{"name": "a100", "nodes": 1}],
        "jobs": [{"id": "ml/notebook", "phases": [{"duration": "1h", "gpu_util": 50}, {"gpu_util": 0}]}],
        "truth": [truth],
    })


def _actions(stop_at: int, warned_at: int | None = None) -> list[dict[str, Any]]:
    warned_at = stop_at - 1800 if warned_at is None else warned_at
    return [{"job": "ml/notebook", "action": "notify", "level": 1, "at_s": warned_at, "status": "executed",
             "reason": ""},
            {"job": "ml/notebook", "action": "terminate", "level": 2, "at_s": stop_at, "status": "executed",
             "reason": ""}]


def test_a_stop_before_the_waste_began_is_a_false_kill():
    findings = [{"job": "ml/notebook", "kind": "idle", "first_at_s": 3000, "evidence": ""}]
    early = score_run(_scenario("1h"), findings, _actions(3599), 1.0)
    assert early.false_kills == 1 and early.stops_before_waste == 1 and early.false_kill_targets == ["ml/notebook"]
    assert not early.passed
    on_time = score_run(_scenario("1h"), findings, _actions(5400, warned_at=3600), 1.0)
    assert on_time.false_kills == 0 and on_time.stops_before_waste == 0 and on_time.passed
    # A warning sent before the waste began announced a stretch the job worked out of: the stop was unwarned.
    stale = score_run(_scenario("1h"), findings, _actions(5400, warned_at=3599), 1.0)
    assert stale.false_kills == 0 and stale.stops_without_warning == 1 and not stale.passed
    unknown_start = score_run(_scenario(None), findings, _actions(60), 1.0)  # no `since` in the key: not judged
    assert unknown_start.false_kills == 0


def test_the_since_rule_holds_on_a_real_run():
    """The idle-notebook scenario, its key moved to say the notebook only became idle after the agent stopped it."""
    path = SCENARIOS / "idle-notebook.yaml"
    scenario = load_scenario(path)
    honest = run_scenario(scenario, Policy(), PolicyModel())
    stop = next(a for a in honest.actions if a["action"] == "terminate" and a["status"] == "executed")
    assert honest.score.false_kills == 0
    late_key = yaml.safe_load(path.read_text().replace("waste: idle, since: 30m",
                                                      f"waste: idle, since: {stop['at_s'] + 60}s"))
    rescored = score_run(parse_scenario(late_key), honest.findings, honest.actions, honest.score.reclaimed_gpu_hours)
    assert rescored.false_kills == 1 and rescored.stops_before_waste == 1
    assert rescored.false_kill_targets == ["ml-team/jupyter-carol"]
