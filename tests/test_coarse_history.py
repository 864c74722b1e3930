"""The coarse long-tail history: quiet time extends only through surely quiet slices; past pauses count long."""

from __future__ import annotations

from datetime import timedelta

from agent.config.policy import parse_policy
from agent.detectors.history import merge_history
from agent.detectors.idle import IdleGpuDetector
from agent.detectors.pools import OversizedPoolDetector
from agent.detectors.signals import group_signals
from core.cluster import GpuHistory, NodeInfo, PoolInfo
from tests.test_detectors import AT, POLICY, SLICE, gpu, io, job, observe

COARSE = 1800.0  # 6 fine slices
FULL = 60  # samples a full coarse slice holds (6 x 10)


def hist(job_id: str | None, utils: list[float | None], *, samples: list[int] | None = None, node: str = "n1",
         index: int = 0, mins: list[float | None] | None = None) -> GpuHistory:
    counts = samples if samples is not None else [0 if u is None else FULL for u in utils]
    lows = mins if mins is not None else list(utils)  # steady by default: busy slices stay busy throughout
    return GpuHistory(job=job_id, node=node, gpu=index, slice_s=COARSE, util_max=list(utils), samples=counts,
                      expected=FULL, util_min=lows)


def quiet_job(history: list[GpuHistory]):
    # Started when its history begins (an idle stretch never starts before the job: IdleGpuDetector).
    born = AT - timedelta(seconds=max(len(h.util_max) for h in history) * COARSE) if history else AT - timedelta(hours=2)
    obs = observe([job(gpus=1, started_at=born)], [gpu("ml/train", [0.0] * 12)],
                  [io("ml/train", 12)], history=history,
                  history_slice_s=COARSE)
    return obs, IdleGpuDetector(POLICY).detect(obs)


def test_quiet_time_extends_through_full_quiet_coarse_slices_only():
    _, [f] = quiet_job([hist("ml/train", [90.0, 0.0, 0.0, 0.0, 0.0, 0.0])])
    assert f.since == AT - timedelta(hours=2.5)  # 1 h of fine slices + 3 quiet coarse ones
    # 55 of 60 samples: one fine slice inside may have been empty (the other five may hold 11 each: scrape jitter,
    # or an interval that does not divide the slice), so the quiet run stops there; 56 cannot.
    _, [f] = quiet_job([hist("ml/train", [0.0] * 5, samples=[FULL, 55, FULL, FULL, FULL])])
    assert f.since == AT - timedelta(hours=1.5)
    _, [f] = quiet_job([hist("ml/train", [0.0] * 5, samples=[FULL, 56, FULL, FULL, FULL])])
    assert f.since == AT - timedelta(hours=2.5)
    _, [f] = quiet_job([hist("ml/train", [0.0, None, 0.0, 0.0, 0.0])])
    assert f.since == AT - timedelta(hours=1.5)


def test_a_coarse_slice_needs_every_gpu_full_and_known():
    merged = merge_history([hist("j", [0.0, 0.0]), hist("j", [None, 5.0], samples=[0, 56], index=1)], 6)
    assert merged is not None and merged.util_max == [None, 5.0] and merged.full == [False, True]


def test_a_past_coarse_pause_counts_as_its_longest_possible_length():
    # Bursts around a 2-slice coarse pause whose neighbours dipped to 0 (they may hide its ends): it may
    # have lasted (2+2)*6-2 = 22 fine slices (110 min), so a 90-minute quiet run (< 1.5 x 110) is still
    # protected; read as 60 minutes it would not be.
    dips = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    obs, found = quiet_job([hist("ml/train", [80.0, 0.0, 0.0, 80.0, 0.0, 0.0, 0.0], mins=dips)])
    assert found == []
    window = group_signals(obs).jobs["ml/train"].window(3600, 1)
    assert window.series.quiet_slices(2.0) == 18
    # Neighbours busy throughout: the pause was exactly 60 minutes, and 90 quiet minutes are too long.
    _, [f] = quiet_job([hist("ml/train", [80.0, 0.0, 0.0, 80.0, 0.0, 0.0, 0.0])])
    assert f.since == AT - timedelta(hours=1.5)
    # Quiet for 3 hours now: far longer than any pause could have been.
    _, [f] = quiet_job([hist("ml/train", [80.0, 0.0, 0.0, 80.0] + [0.0] * 6, mins=[0.0] * 10)])
    assert f.since == AT - timedelta(hours=3)


def test_a_busy_slice_that_dipped_may_hide_a_pause_and_a_second_burst():
    # One coarse burst all day, but its slices dipped to 0: fine slices could have shown many bursts with
    # pauses of up to 2 x 5 fine slices (the end of one coarse slice and the start of the next: 50 minutes),
    # so the job keeps 1.5 x 50 = 75 minutes of grace; 1 hour of quiet is within it, 2 hours are not.
    busy = [80.0] * 40
    _, [held] = quiet_job([hist("ml/train", busy + [0.0] * 2, mins=[0.0] * 42)])
    assert held.stop_after == AT + timedelta(minutes=15)  # longer than a pause could have been: warned, not stoppable
    _, [f] = quiet_job([hist("ml/train", busy + [0.0] * 4, mins=[0.0] * 44)])
    assert f.since == AT - timedelta(hours=2)
    _, [f] = quiet_job([hist("ml/train", busy + [0.0] * 2)])  # busy throughout: it simply stopped
    assert f.since == AT - timedelta(hours=1)
    # quiet_share (opt-in) also waits a share of the span it worked: a third of 20 hours.
    share = parse_policy({"detectors": {"longtail": {"quiet_share": 1 / 3}}}, "test")
    obs, _ = quiet_job([hist("ml/train", busy + [0.0] * 4, mins=[0.0] * 44)])
    [held] = IdleGpuDetector(share).detect(obs)
    assert held.stop_after == AT + timedelta(hours=4, minutes=40)  # warned, no stop before 1/3 x 20 h of quiet


def test_empty_node_since_reaches_into_the_coarse_history():
    nodes = [NodeInfo(name=f"p-{i}", pool="a100", gpus=1, jobs=[]) for i in range(2)]
    pools = [PoolInfo(name="a100", gpus_per_node=1, nodes=2, price_per_gpu_hour=2.0, billing="on-demand")]
    gpus = [gpu(None, [0.0] * 12, node=n.name) for n in nodes]
    history = [hist(None, [50.0, 0.0, 0.0, 0.0], node="p-0"), hist(None, [50.0, 0.0, 0.0, 0.0], node="p-1")]
    obs = observe([], gpus, nodes=nodes, pools=pools, history=history, history_slice_s=COARSE)
    [f] = OversizedPoolDetector(POLICY).detect(obs)
    assert f.since == AT - timedelta(hours=1.5)
    without = OversizedPoolDetector(POLICY).detect(observe([], gpus, nodes=nodes, pools=pools))
    assert without[0].since == AT - timedelta(hours=1)
    assert SLICE * 6 == COARSE


def test_sim_and_trace_history_agree_with_their_own_slices_at_the_coarse_step():
    from datetime import timedelta as td

    from agent.planning.policy_model import PolicyModel
    from agent.wiring import simulated_deps
    from evals.bench_sweep import synthetic_trace
    from evals.replay import trace_deps
    from sim.scenario import load_scenario

    _, sim = simulated_deps(load_scenario("evals/scenarios/longtail-periodic.yaml"), POLICY, PolicyModel())
    trace_cluster = trace_deps(synthetic_trace(20), POLICY)[1]
    for cluster in (sim, trace_cluster):
        cluster.advance_to(4 * 3600.0)
        end = cluster.now() - td(seconds=60)  # off the coarse grid: a partial newest slice
        fine = {(s.node, s.gpu, s.job): s for s in cluster.gpu_series(end, 3 * 3600.0, COARSE)}
        history = cluster.gpu_history(end, 3 * 3600.0, COARSE)
        assert history and len(history) == len(fine)
        for h in history:
            s = fine[(h.node, h.gpu, h.job)]
            assert (h.util_max, h.samples, h.expected) == (s.util_max, s.samples, s.expected)
            assert all(lo is None or lo <= hi for lo, hi in zip(h.util_min, h.util_max, strict=True))


def test_a_coarse_silence_runs_from_the_last_activity_blips_included():
    # Coarse history: a burst, 2 h, then a burst; a 3% blip (54 GPU-s, under a GPU-minute) 30 minutes before the
    # second. Quiet for 1.5 h now (the last two coarse slices are the fine hour). The longest silence work
    # followed is 30 minutes: 1.5 h is long for it.
    utils = [80.0, 0.0, 0.0, 3.0, 0.0, 80.0, 0.0, 0.0, 0.0]
    _, [f] = quiet_job([hist("ml/train", utils)])
    assert f.since == AT - timedelta(hours=1.5) and f.stop_after is None
    # Burst to burst (pause: bursts) the pause is 2 h, and 1.5 h of quiet is within the job's rhythm.
    bursts = parse_policy({"detectors": {"longtail": {"pause": "bursts"}}}, "bursts")
    obs = observe([job(gpus=1)], [gpu("ml/train", [0.0] * 12)], [io("ml/train", 12)],
                  history=[hist("ml/train", utils)], history_slice_s=COARSE)
    assert IdleGpuDetector(bursts).detect(obs) == []
