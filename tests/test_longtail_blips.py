"""Blips under a budget are not work (opt-in: `detectors.idle.blip_gpu_seconds`); grace comes from the job's own
pauses (docs/detectors.md, "Quiet stretches, blips and the long-tail grace").

Hand-built 1-GPU series of 5-minute slices: a slice's work is its average x 300 s, so a 7% max with a 1.4%
average is 4.2 GPU-seconds, and a 20% average is 60 (a GPU-minute: material on its own).
"""

from __future__ import annotations

from datetime import timedelta

from agent.config.policy import parse_policy
from agent.detectors.evidence import describe
from agent.detectors.idle import IdleGpuDetector
from agent.detectors.longtail import long_tail_reason, material_slices
from agent.detectors.signals import group_signals
from core.cluster import GpuSeries
from tests.test_detectors import AT, EXPECTED, POLICY, SLICE, io, job, observe

BLIPS = parse_policy({"detectors": {"idle": {"blip_gpu_seconds": 60}}}, "blips")  # a GPU-minute

BLIP = (7.0, 1.4)  # max, average: 4.2 GPU-seconds in a slice
BURST = (80.0, 60.0)  # 180 GPU-seconds in a slice


def one_gpu(slices: list[tuple[float, float] | None], *, samples: list[int] | None = None) -> GpuSeries:
    counts = samples if samples is not None else [0 if s is None else EXPECTED for s in slices]
    return GpuSeries(job="ml/svc", node="n1", gpu=0, slice_s=SLICE, util_max=[None if s is None else s[0] for s in slices],
                     util_avg=[None if s is None else s[1] for s in slices], samples=counts, expected=EXPECTED,
                     mem_used_mb=20_000.0)


def quiet(n: int) -> list[tuple[float, float] | None]:
    return [(0.0, 0.0)] * n


def detect(slices: list[tuple[float, float] | None], policy=BLIPS, **kw):
    started = kw.pop("started", timedelta(seconds=len(slices) * SLICE))
    obs = observe([job("ml/svc", gpus=1, started_at=None if started is None else AT - started)],
                  [one_gpu(slices, **kw)], [io("ml/svc", len(slices))])
    return obs, IdleGpuDetector(policy).detect(obs)


# --- the idle window and the current quiet stretch ----------------------------------------------------------

def test_a_blip_does_not_end_a_quiet_stretch():
    # Busy, then 90 quiet minutes with a 7% blip 20 minutes ago.
    slices = [BURST] * 6 + quiet(13) + [BLIP] + quiet(4)
    _, [f] = detect(slices)
    assert f.since == AT - timedelta(minutes=90) and f.metrics["blip_gpu_s"] == 4.2
    assert "blips only (4 GPU-s of work in all)" in f.evidence
    # The default reads any activity as work: the blip restarts the count, 20 minutes, under the idle window.
    assert detect(slices, POLICY)[1] == []


def test_blips_that_add_up_to_a_gpu_minute_are_work():
    # A 2% average in every slice of the last hour: 12 x 6 = 72 GPU-seconds, material together.
    slices = [BURST] * 6 + quiet(6) + [(7.0, 2.0)] * 12
    assert detect(slices)[1] == []
    # 12 blips of 4.2 GPU-s (50.4) over the hour are not; the stretch runs back to where they add up to 60.
    slices = [BURST] * 6 + [BLIP] * 6 + quiet(6) + [BLIP] * 12
    _, [f] = detect(slices)
    assert f.since == AT - timedelta(minutes=5 * (12 + 6 + 2)) and round(f.metrics["blip_gpu_s"], 1) == 58.8


def test_unknown_is_still_not_quiet():
    # A slice with no reading ends the stretch, blip or not; so does a blip with samples missing (its work
    # cannot be bounded); a quiet slice with a sample missing stays quiet as before.
    base = [BURST] * 6 + quiet(18)
    gap = list(base)
    gap[-8] = None
    assert detect(gap)[1] == []
    partial = list(base)
    partial[-8] = BLIP
    counts = [EXPECTED] * len(partial)
    counts[-8] = EXPECTED - 1
    assert detect(partial, samples=counts)[1] == []
    _, [f] = detect(partial)  # the same blip, every sample there
    assert f.since == AT - timedelta(minutes=90)
    counts[-8] = EXPECTED
    counts[-3] = EXPECTED - 1  # a quiet slice a sample short
    _, [f] = detect(partial, samples=counts)
    assert f.since == AT - timedelta(minutes=90)


# --- past pauses and the grace ------------------------------------------------------------------------------

def test_a_past_pause_broken_only_by_blips_is_one_pause():
    # Bursts around a 100-minute pause with two blips in it, then quiet for 2 hours now (< 1.5 x 100 minutes).
    pause = quiet(6) + [BLIP] + quiet(6) + [BLIP] + quiet(6)
    slices = [BURST] * 2 + pause + [BURST] * 2 + quiet(24)
    obs, found = detect(slices)
    # Longer than any pause it took (100 minutes), so its owner may be warned; no stop before 1.5 x 100 minutes.
    [f] = found
    assert f.stop_after == AT + timedelta(minutes=30)
    window = group_signals(obs).jobs["ml/svc"].window(3600, 1)
    why = long_tail_reason(window, None, POLICY.detectors.longtail, quiet_pct=2.0, blip_gpu_s=60.0)
    assert why is not None and "2 bursts" in why and "pauses up to 1h40m" in why and "1.5 x the longest pause" in why
    # The default reads past pauses as the current stretch is read, from the last activity of any kind: the
    # silence before the second burst is 30 minutes, and 2 hours of quiet is long for it (no grace left).
    [plain] = detect(slices, POLICY)[1]
    assert plain.stop_after is None


BURSTS = parse_policy({"detectors": {"longtail": {"pause": "bursts"}}}, "bursts")  # the measure before


def test_a_past_pause_is_a_silence_that_work_followed():
    # Bursts of work 3 hours apart with a blip every 30 minutes between them, quiet for 100 minutes now.
    slices = [BURST] * 2 + (quiet(5) + [BLIP]) * 5 + quiet(5) + [BURST] * 2 + quiet(20)
    # The longest silence work followed is 25 minutes: 100 minutes of quiet is long for it.
    [f] = detect(slices, POLICY)[1]
    assert f.since == AT - timedelta(minutes=100) and f.stop_after is None
    # Measured from burst to burst (pause: bursts) the pause is 3 hours and the job is within its rhythm.
    assert detect(slices, BURSTS)[1] == []
    # Silent for 2 hours before its last burst: that silence is its rhythm, and 100 minutes is within it.
    obs, found = detect([BURST] * 2 + quiet(24) + [BURST] * 2 + quiet(20), POLICY)
    assert found == []
    window = group_signals(obs).jobs["ml/svc"].window(3600, 1)
    why = long_tail_reason(window, None, POLICY.detectors.longtail, quiet_pct=2.0)
    assert why is not None and "pauses up to 2h" in why
    # A blip that leads into the work (a model load, CUDA init 10 minutes before the burst) is part of coming
    # back: the 150-minute silence before it is the job's rhythm, and 100 minutes of quiet are within it.
    assert detect([BURST] * 2 + quiet(30) + [BLIP] + quiet(2) + [BURST] * 2 + quiet(20), POLICY)[1] == []
    # A longer silence that only a blip ended shows nothing worth waiting for.
    [g] = detect([BURST] * 2 + quiet(5) + [BURST] * 2 + quiet(30) + [BLIP] + quiet(20), POLICY)[1]
    assert g.since == AT - timedelta(minutes=100) and g.stop_after is None


def test_grace_comes_from_the_pauses_not_from_how_long_it_worked():
    # Served for 20 hours with pauses of at most 30 minutes, quiet for 75 minutes now: 1.5 x 30 minutes is long
    # for it. quiet_share (opt-in, 0 by default) would give it a third of the 20 hours.
    day = ([BURST] * 18 + quiet(6)) * 10
    slices = day + quiet(9)  # the day ends with a 30-minute pause: quiet for 75 minutes
    _, [f] = detect(slices, POLICY, started=timedelta(hours=22))
    assert f.since == AT - timedelta(minutes=75)
    share = parse_policy({"detectors": {"longtail": {"quiet_share": 1 / 3}}}, "test")
    [held] = detect(slices, share, started=timedelta(hours=22))[1]
    assert held.stop_after is not None and held.stop_after > AT + timedelta(hours=5)  # warned, not stoppable


def test_material_slices_count_blips_together_and_bursts_on_their_own():
    values = [0.0, 80.0, 0.0, 7.0, 0.0, 7.0, 7.0, 0.0, 7.0, 0.0]
    works = {1: 180.0, 3: 25.0, 5: 20.0, 6: 20.0, 8: 25.0}
    mark = material_slices(values, lambda k: works[k], 2.0, 60.0)
    # From the newest: 25 (slice 8), then the run 5-6 brings it to 65: material; slice 3 (25) is a blip; 1 is a burst.
    assert mark == [False, True, False, False, False, True, True, False, False, False]
    # The current stretch's own blips carry over to the newest run.
    assert material_slices(values, lambda k: works[k], 2.0, 60.0, carry_gpu_s=40.0)[8]
    assert material_slices(values, lambda k: works[k], 2.0, 0.0) == [v > 2.0 for v in values]
    assert material_slices([None, 80.0, None], lambda k: 180.0, 2.0, 60.0) == [False, True, False]


# --- keep-alive pings under the budget ------------------------------------------------------------------------

def test_keepalive_pings_under_the_budget_are_plain_idle_with_it_and_the_keepalives_without():
    from agent.detectors.evidence import describe
    from agent.detectors.keepalive import KeepAliveDetector
    from tests.test_hang_signals import blips, squatter

    # 3% pings, 0.6% slice average on 2 GPUs: 3.6 GPU-seconds each, 43.2 in the job's 2 hours.
    obs = squatter(*blips())
    assert IdleGpuDetector(POLICY).detect(obs) == [] and KeepAliveDetector(POLICY).detect(obs)[0].stop_needs_approval
    assert KeepAliveDetector(BLIPS).detect(obs) == []
    [f] = IdleGpuDetector(BLIPS).detect(obs)
    assert f.stop_needs_approval is None and f.metrics["blip_gpu_s"] == 43.2 and f.since == AT - timedelta(hours=2)
    assert "blips only (43 GPU-s of work in all)" in f.evidence and "仅有零星活动（共 43 GPU·秒）" in describe(f, "zh")
    # A 6% ping in every slice: 7.2 GPU-seconds each, 86.4 in the idle window. Over the budget: the keep-alive's.
    busier = squatter(*blips(period=1, util=6.0))
    assert IdleGpuDetector(BLIPS).detect(busier) == [] and len(KeepAliveDetector(BLIPS).detect(busier)) == 1


def test_the_coarse_history_counts_blips_by_their_average_or_else_their_max():
    from tests.test_hang_signals import coarse_blips

    tiny = [0.0] * 10
    tiny[4] = tiny[7] = 0.5  # 2 x 0.5% x 30 min = 18 GPU-seconds: blips, quiet all its known life
    [f] = IdleGpuDetector(BLIPS).detect(coarse_blips(tiny))
    assert f.since == AT - timedelta(hours=5) and f.metrics["blip_gpu_s"] == 18.0
    # No average (the Prometheus coarse history): each may have held 5% x 30 min = 90 GPU-s, material.
    assert IdleGpuDetector(BLIPS).detect(coarse_blips([])) == []


def test_a_silence_already_going_when_the_lookback_began_is_the_jobs_rhythm_when_the_job_is_older():
    """Yesterday's night, for a job that works by day: the lookback (a day) begins inside it, so its start is not
    seen. A job older than the lookback was alive then: the silence is at least its seen part, and the job came back
    from it with work, so tonight's first quiet hours are within its rhythm. A job that started inside the lookback
    spent that silence setting up, which is no pause (its first quiet stretch is not counted)."""
    lookback = round(POLICY.detectors.longtail.lookback / SLICE)
    day = ([BURST] * 6 + quiet(3)) * 18  # 13.5 hours of work with 15-minute pauses
    slices = quiet(lookback - len(day) - 30) + day + quiet(30)  # quiet for 165 minutes now (the day ends quiet)
    assert len(slices) == lookback
    assert detect(slices, POLICY, started=timedelta(hours=30))[1] == []
    assert detect(slices, POLICY, started=None)[1] == []  # start unknown: read in the job's favour
    [f] = detect(slices, POLICY, started=timedelta(seconds=len(slices) * SLICE - SLICE))[1]
    assert f.since == AT - timedelta(minutes=165)


def test_a_stretch_as_long_as_the_data_read_is_at_least_that_long():
    """Idle as far back as the data read goes, in a job older than that: 'for 24h' understated a notebook idle all
    weekend; it is 'at least'. A job that started inside the span is idle since its start, exactly."""
    slices = quiet(round(POLICY.detectors.longtail.lookback / SLICE))  # the whole day read, all quiet
    [old] = detect(slices, POLICY, started=timedelta(hours=30))[1]
    assert "util for at least 24h" in old.evidence and old.metrics["quiet_at_least"] == 1.0, old.evidence
    assert "已持续至少 24 小时" in describe(old, "zh")
    [young] = detect(slices, POLICY, started=timedelta(hours=2))[1]
    assert "util for 2h " in young.evidence and "quiet_at_least" not in young.metrics, young.evidence


def test_a_silence_older_than_the_lookback_lengthens_a_rhythm_but_makes_none():
    """A notebook idle since before the lookback and used once: one burst is no rhythm, so it is stopped after its
    use as before; the open silence would have given it 1.5 x a day of grace (a probe: stopped 16 h after use)."""
    lookback = round(POLICY.detectors.longtail.lookback / SLICE)
    slices = quiet(lookback - 12 - 30) + [BURST] * 12 + quiet(30)  # idle, an hour of work, quiet 150 minutes
    [f] = detect(slices, POLICY, started=timedelta(hours=30))[1]
    assert f.since == AT - timedelta(minutes=150) and f.stop_after is None


def test_a_gap_inside_the_window_leaves_no_idle_finding_shorter_than_the_window():
    """An exporter dark for five minutes every hour: the window is 92 % covered, but the gap could hide work and ends
    the stretch, so the owner was warned every hour that the job had been "idle for 5m" and it was never stopped.
    Quiet for less than the window is no idle finding; quiet for the whole window after the gap is one."""
    slices = [BURST] * 6 + quiet(24)
    counts = [EXPECTED] * len(slices)
    counts[-6] = 1  # the exporter restarting: one sample of the slice 30 minutes ago
    assert detect(slices, POLICY, samples=counts)[1] == []
    counts = [EXPECTED] * len(slices)
    counts[-14] = 1  # the same gap before the window: quiet for the whole window since
    [f] = detect(slices, POLICY, samples=counts)[1]
    assert f.since == AT - timedelta(minutes=65)
