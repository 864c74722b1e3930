"""Planned pool changes from forecast low-load windows (issue 16, part 4): detectors.pools.scale_down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agent.config.policy import Policy, parse_policy
from agent.detectors.evidence import describe
from agent.detectors.pools import OversizedPoolDetector
from agent.planning.policy_model import PolicyModel
from core.actions import History, HistoryEntry
from core.cluster import GpuSeries, JobInfo, NodeInfo, PoolInfo
from core.observation import Observation
from evals.runner import run_scenario
from sim.scenario import PoolHistory, load_scenario

HOUR = 3600.0
SLICE = 300.0
# The demo pool's day: busy working hours, a quiet evening 18:00-23:00 UTC, the nightly batch queue after it.
DAILY = [12, 12, 12, 12, 12, 12, 12, 16, 22, 26, 28, 28, 26, 28, 28, 24, 20, 14, 4, 4, 4, 4, 4, 12]
HISTORY_END = datetime(2026, 11, 4, 16, 0, tzinfo=UTC)
FORECAST = parse_policy({"detectors": {"pools": {"scale_down": "forecast"}}})
SCENARIO = Path(__file__).resolve().parent.parent / "evals" / "scenarios" / "pool-forecast-quiet-window.yaml"


def gpu(job: str | None, node: str, index: int, utils: list[float]) -> GpuSeries:
    return GpuSeries(job=job, node=node, gpu=index, slice_s=SLICE, util_max=utils, util_avg=utils,
                     samples=[10] * len(utils), expected=10)


def history(days: int = 21) -> tuple[datetime, list[float]]:
    return PoolHistory(days=days, daily=[float(v) for v in DAILY], noise=1.5, seed=11).hourly(HISTORY_END, 32.0)


def pool_obs(at: datetime, *, empty: int = 3, nodes: int = 4, min_nodes: int = 1, days: int | None = 21,
             busy_empty_node: bool = False) -> Observation:
    """A 4-node on-demand pool, the first nodes busy and the last `empty` ones quiet for 70 minutes."""
    node_infos, gpus, jobs = [], [], []
    for i in range(nodes):
        name = f"a100-{i}"
        if i < nodes - empty:
            j = JobInfo(id=f"ml/j{i}", scheduler="kubernetes", user="alice", namespace="ml", name=f"j{i}", node=name, gpus=8,
                        started_at=at - timedelta(hours=5))
            jobs.append(j)
            node_infos.append(NodeInfo(name=name, pool="a100", gpus=8, jobs=[j.id]))
            gpus += [gpu(j.id, name, g, [80.0] * 14) for g in range(8)]
        else:
            node_infos.append(NodeInfo(name=name, pool="a100", gpus=8))
            util = [0.0] * 13 + [50.0] if busy_empty_node and i == nodes - 1 else [0.0] * 14
            gpus += [gpu(None, name, g, util) for g in range(8)]
    extra = {}
    if days is not None:
        end, values = history(days)
        extra = {"load_history": values, "load_history_end": end}
    pool = PoolInfo(name="a100", gpus_per_node=8, nodes=nodes, min_nodes=min_nodes, price_per_gpu_hour=4.1,
                    billing="on-demand", **extra)
    return Observation(at=at, slice_s=SLICE, lookback_s=HOUR, jobs=jobs, nodes=node_infos, pools=[pool], gpus=gpus)


def at(hour: int, minute: int = 0) -> datetime:
    return HISTORY_END.replace(hour=hour, minute=minute)


def test_a_forecast_scale_down_is_proposed_inside_the_predicted_window_only():
    d = OversizedPoolDetector(FORECAST)
    assert d.detect(pool_obs(at(17, 30))) == []
    assert "outside its predicted low-load windows" in d.notes["a100"] and "18:00-23:00" in d.notes["a100"]
    [f] = OversizedPoolDetector(FORECAST).detect(pool_obs(at(18, 5)))
    m = f.metrics
    assert m["forecast"] == 1.0 and m["suggested_nodes"] == 2
    assert datetime.fromtimestamp(m["window_start"], UTC) == at(18)
    assert datetime.fromtimestamp(m["window_end"], UTC) == at(23)
    assert datetime.fromtimestamp(m["scale_up_at"], UTC) == at(22)  # one hour's lead before the window ends
    assert m["scale_up_nodes"] == 4
    # After the planned scale-up time, no scale-down: the window is about to end.
    assert OversizedPoolDetector(FORECAST).detect(pool_obs(at(22, 10))) == []


def test_no_scale_down_with_less_than_the_lead_left_before_its_scale_up():
    """Window 18:00-23:00, scale-up planned at 22:00 (the window's end less the 1 h lead): at 21:05 a shrink would
    release the nodes for 55 minutes, less than it takes to bring them back, so it is not worth its risk (a
    remove-then-add of GPU nodes minutes before the load returns). Before, anything up to 22:00 was proposed."""
    [f] = OversizedPoolDetector(FORECAST).detect(pool_obs(at(21)))
    assert datetime.fromtimestamp(f.metrics["scale_up_at"], UTC) == at(22)
    d = OversizedPoolDetector(FORECAST)
    assert d.detect(pool_obs(at(21, 5))) == []
    assert "leaves less than the scale-up lead (1h) before its planned scale-up at 22:00 UTC" in d.notes["a100"]
    # The fixed window plans its way back a lead before the window ends, and the same holds.
    fixed = parse_policy({"detectors": {"pools": {"scale_down": "fixed", "scale_down_start": "20:00",
                                                  "scale_down_end": "07:00"}}})
    [f] = OversizedPoolDetector(fixed).detect(pool_obs(at(5) + timedelta(days=1)))
    assert datetime.fromtimestamp(f.metrics["scale_up_at"], UTC) == at(6) + timedelta(days=1)
    d = OversizedPoolDetector(fixed)
    assert d.detect(pool_obs(at(5, 30) + timedelta(days=1))) == []
    assert "less than the scale-up lead (1h) is left before its scale-up at 06:00 UTC" in d.notes["a100"]


def test_the_proposal_carries_the_saving_and_the_risk_in_english_and_chinese():
    [f] = OversizedPoolDetector(FORECAST).detect(pool_obs(at(18)))
    m = f.metrics
    # 2 nodes of 8 GPUs released from 18:00 to the 22:00 scale-up, at 4.1 per GPU-hour.
    assert m["saving_gpu_hours"] == pytest.approx(16 * 4) and m["saving"] == pytest.approx(16 * 4 * 4.1)
    assert 0.0 <= m["forecast_risk"] < 0.2 and m["backtest_origins"] >= 7
    assert "saves 64.0 GPU-hours, 262.40 USD" in f.evidence
    assert f"{m['forecast_risk']:.1%} of backtest hours" in f.evidence
    assert "scale back up to 4 nodes at 22:00 UTC" in f.evidence
    zh = describe(f, "zh")
    assert "低负载窗口 18:00-23:00（UTC）" in zh and "22:00（UTC）扩容回 4 个节点" in zh and "262.40 USD" in zh
    assert f"{m['forecast_risk']:.1%}" in zh
    # A Beijing team reads the window in its own hours, said so; the English evidence (the audit's) stays UTC.
    beijing = describe(f, "zh", ZoneInfo("Asia/Shanghai"))
    assert "低负载窗口 02:00-07:00（北京时间）" in beijing and "06:00（北京时间）扩容回 4 个节点" in beijing
    assert describe(f, "en", ZoneInfo("Asia/Shanghai")) == f.evidence.replace("18:00-23:00 UTC", "02:00-07:00 Asia/Shanghai"
                                                                               ).replace("22:00 UTC", "06:00 Asia/Shanghai")


def test_no_forecast_no_scale_down_and_the_note_says_why():
    d = OversizedPoolDetector(FORECAST)
    assert d.detect(pool_obs(at(18), days=None)) == []
    assert "no load history" in d.notes["a100"]
    d = OversizedPoolDetector(FORECAST)
    assert d.detect(pool_obs(at(18), days=2)) == []
    assert "48 h of load history; forecasting a pool takes 72 h" in d.notes["a100"]
    # Stale: the history ended more than 24 h ago.
    d = OversizedPoolDetector(FORECAST)
    assert d.detect(pool_obs(at(18) + timedelta(days=1))) == []
    assert "no forecast" in d.notes["a100"]


def test_min_nodes_and_only_empty_nodes_are_kept():
    [f] = OversizedPoolDetector(FORECAST).detect(pool_obs(at(19), min_nodes=3))
    assert f.metrics["suggested_nodes"] == 3 and f.gpus == 8
    assert OversizedPoolDetector(FORECAST).detect(pool_obs(at(19), min_nodes=4)) == []
    # A node whose GPUs just worked is not empty: only two nodes are candidates, and the reserve keeps it at 3.
    [f] = OversizedPoolDetector(FORECAST).detect(pool_obs(at(19), busy_empty_node=True))
    assert f.metrics["empty_nodes"] == 2 and f.metrics["suggested_nodes"] == 2
    assert "a100-3" not in f.evidence


def test_auto_uses_the_forecast_with_enough_history_and_the_fixed_window_without():
    auto = parse_policy({"detectors": {"pools": {"scale_down_start": "20:00", "scale_down_end": "07:00"}}})
    assert auto.detectors.pools.scale_down == "auto"
    # History: the forecast decides (19:00 is in its window, outside the fixed one).
    assert len(OversizedPoolDetector(auto).detect(pool_obs(at(19)))) == 1
    # No history: the fixed window, as before.
    assert OversizedPoolDetector(auto).detect(pool_obs(at(19), days=None)) == []
    assert len(OversizedPoolDetector(auto).detect(pool_obs(at(21), days=None))) == 1


def test_fixed_mode_is_unchanged_whatever_the_history():
    fixed = parse_policy({"detectors": {"pools": {"scale_down": "fixed", "scale_down_start": "20:00",
                                                  "scale_down_end": "07:00"}}})
    assert OversizedPoolDetector(fixed).detect(pool_obs(at(19))) == []
    [f] = OversizedPoolDetector(fixed).detect(pool_obs(at(21)))
    assert "forecast" not in f.metrics and "forecast" not in f.evidence
    # No clock window and no history: any hour, exactly as before.
    assert len(OversizedPoolDetector(Policy()).detect(pool_obs(at(12), days=None))) == 1


def test_a_further_scale_down_keeps_the_way_back_of_the_open_scale_down_that_left_the_pool():
    """Was: a second shrink (the pool left at 3 by a 4 -> 3 scale-down, 2 of its 3 nodes empty) planned its way back
    to 3, its own size, and superseded the first's plan back to 4: the pool came back to less than it had (a
    probe's restarted steward, after a shrink killed halfway)."""
    first = HistoryEntry(action="resize_pool", target="a100", status="executed", at=at(18, 10), action_id="r:1",
                         nodes_before=4, target_nodes=2, nodes_after=3, scale_up_at=at(21, 30), scale_up_nodes=4)
    obs = pool_obs(at(19), nodes=3, empty=2)
    [alone] = OversizedPoolDetector(FORECAST).detect(obs)
    assert alone.metrics["scale_up_nodes"] == 3 and datetime.fromtimestamp(alone.metrics["scale_up_at"], UTC) == at(22)
    [f] = OversizedPoolDetector(FORECAST, History(entries=[first])).detect(obs)
    m = f.metrics
    assert m["suggested_nodes"] == 2 and m["scale_up_nodes"] == 4
    assert datetime.fromtimestamp(m["scale_up_at"], UTC) == at(21, 30)  # the earlier of the two plans
    assert "scale back up to 4 nodes (its size before the scale-down at 18:10 UTC) at 21:30 UTC" in f.evidence
    assert "21:30（UTC）扩容回 4 个节点" in describe(f, "zh")
    # The pool is not as that scale-down left it (someone resized it since): its plan is not the pool's way back.
    bigger = first.model_copy(update={"nodes_before": 6, "scale_up_nodes": 6})
    [other] = OversizedPoolDetector(FORECAST, History(entries=[bigger])).detect(pool_obs(at(19), nodes=4, empty=3))
    assert other.metrics["scale_up_nodes"] == 4 and "its size before" not in other.evidence
    # Its planned scale-up is less than the lead away (or due): no further scale-down beside it.
    for now in (at(20, 45), at(21, 35)):
        d = OversizedPoolDetector(FORECAST, History(entries=[first]))
        assert d.detect(pool_obs(now, nodes=3, empty=2)) == [] and "no further scale-down" in d.notes["a100"]


def test_the_history_extension_is_deterministic_and_ends_at_the_start():
    end, values = history()
    assert end == HISTORY_END and len(values) == 21 * 24 and values == history()[1]
    assert all(0 <= v <= 32 for v in values)
    with pytest.raises(ValueError):
        PoolHistory(days=3, daily=[1.0] * 23)


def test_through_approval_the_pool_is_resized_once_in_the_window():
    r = run_scenario(load_scenario(SCENARIO), Policy(), PolicyModel())
    assert r.score.passed and r.score.false_kills == 0
    f = next(f for f in r.findings if f["job"] == "a100-ondemand" and f["kind"] == "oversized")
    assert f["first_at_s"] == 2 * HOUR  # 18:00, when the predicted window opens; three nodes were empty at 17:00
    resized = [a for a in r.actions if a["job"] == "a100-ondemand" and a["action"] == "resize_pool"
               and a["status"] == "executed"]
    assert len(resized) == 1 and resized[0]["at_s"] >= 150 * 60 and resized[0]["removed_nodes"] == 2
