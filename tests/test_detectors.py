"""Detectors on hand-built observations: idle, zombie, long-tail protection, overprovisioned, nodes, pools."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from datetime import time as clock

from agent.config.policy import Policy, parse_policy
from agent.detectors.engine import log_candidates, run_detectors
from agent.detectors.idle import IdleGpuDetector
from agent.detectors.longtail import long_tail_reason
from agent.detectors.node_health import NodeHealthDetector
from agent.detectors.overprovisioned import OverprovisionedDetector
from agent.detectors.pools import OversizedPoolDetector, in_time_window
from agent.detectors.signals import group_signals
from agent.detectors.zombie import ZombieDetector
from core.cluster import GpuHistory, GpuSeries, JobInfo, JobIoSeries, LogLine, NodeInfo, PoolInfo
from core.observation import LogProgress, Observation
from tools.log_progress import analyse_log

AT = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
SLICE = 300.0  # 5 minutes; the default idle window is 12 slices
EXPECTED = 10
POLICY = Policy()


def gpu(
    job: str | None, utils: list[float | None], *, node: str = "n1", index: int = 0, mem_mb: float = 14_848.0, **kw
) -> GpuSeries:
    return GpuSeries(
        job=job,
        node=node,
        gpu=index,
        slice_s=SLICE,
        util_max=list(utils),
        util_avg=list(utils),
        samples=[0 if u is None else EXPECTED for u in utils],
        expected=EXPECTED,
        mem_used_mb=mem_mb,
        **kw,
    )


def io(job: str, n: int, *, cpu: float = 0.4, net: float = 0.0, disk: float = 0.0, **kw) -> JobIoSeries:
    return JobIoSeries(job=job, slice_s=SLICE, cpu_pct=[cpu] * n, net_rx_mbps=[net] * n, disk_read_mbps=[disk] * n,
                       **kw)


def job(job_id: str = "ml/train", gpus: int = 4, node: str = "n1", **kw) -> JobInfo:
    ns, name = job_id.split("/")
    # Hand-built jobs have run for the 2 hours their 24 slices show: younger than the long-tail lookback, so
    # they are judged on their life (a job of unknown age is read as older: tests/test_history_gaps.py).
    kw.setdefault("started_at", AT - timedelta(hours=2))
    return JobInfo(id=job_id, scheduler="kubernetes", namespace=ns, name=name, user="alice", gpus=gpus, node=node, **kw)


def observe(
    jobs: list[JobInfo], gpus: list[GpuSeries], ios: list[JobIoSeries] = (), logs: dict | None = None, **kw
) -> Observation:
    kw.setdefault("nodes", [NodeInfo(name="n1", pool="a100", gpus=8, jobs=[j.id for j in jobs])])
    kw.setdefault("pools", [PoolInfo(name="a100", gpus_per_node=8, nodes=1, price_per_gpu_hour=2.0)])
    return Observation(
        at=AT, slice_s=SLICE, lookback_s=6 * 3600, jobs=jobs, gpus=gpus, io=list(ios), logs=logs or {}, **kw
    )


def job_gpus(job_id: str, utils: list[float | None], count: int = 4, node: str = "n1") -> list[GpuSeries]:
    return [gpu(job_id, utils, node=node, index=i) for i in range(count)]


def progress(job_id: str, last: datetime | None, *, gap: float | None = 30.0, lines: int = 100) -> LogProgress:
    return LogProgress(
        job=job_id,
        lines=lines,
        progress_lines=50 if last else 0,
        first_progress_at=last - timedelta(hours=1) if last else None,
        last_progress_at=last,
        typical_gap_s=gap,
        last_step=1234 if last else None,
        last_line_at=AT,
    )


# --- idle -------------------------------------------------------------------------------------------------


def busy_then_quiet(busy: int, quiet: int, util: float = 85.0) -> list[float | None]:
    return [util] * busy + [0.0] * quiet


def test_idle_found_with_since_at_start_of_quiet_stretch():
    utils = busy_then_quiet(10, 14)  # quiet for 70 minutes
    obs = observe(
        [job()],
        job_gpus("ml/train", utils),
        [io("ml/train", 24)],
        {"ml/train": progress("ml/train", AT - timedelta(minutes=72))},
    )
    [f] = IdleGpuDetector(POLICY).detect(obs)
    assert f.kind == "idle" and f.target == "ml/train" and f.gpus == 4
    assert f.since == AT - timedelta(minutes=70)
    assert "4 GPUs at max 0.0% util for 1h10m" in f.evidence
    assert "coverage 100%" in f.evidence and "58 GB" in f.evidence
    assert "no log progress since 10:48" in f.evidence and "CPU 0.4%" in f.evidence


def test_a_stalled_log_beside_a_spinning_core_is_idle_whose_stop_needs_a_person():
    """A deadlocked DataLoader worker spins one core (pytorch/pytorch#9753) while the GPUs idle and the log, which
    advanced every 30 s, is silent for 72 min: judged idle, its stop for a person. CPU work without a log cadence
    (a compile, a tokeniser that never logged) stays protected."""
    utils = busy_then_quiet(10, 14)
    spin = [io("ml/train", 24, cpu=100.0)]
    obs = observe([job()], job_gpus("ml/train", utils), spin,
                  {"ml/train": progress("ml/train", AT - timedelta(minutes=72))})
    [f] = IdleGpuDetector(POLICY).detect(obs)
    assert f.kind == "idle" and f.stop_needs_approval and "deadlocked DataLoader" in f.stop_needs_approval
    assert "log that advanced every 30s has been silent for 1h12m" in f.evidence
    no_cadence = observe([job()], job_gpus("ml/train", utils), spin,
                         {"ml/train": progress("ml/train", AT - timedelta(minutes=72), gap=None)})
    assert IdleGpuDetector(POLICY).detect(no_cadence) == []
    # Two start-up lines three minutes apart ("Building pmap_step_fn", XLA's "Very slow compile?") are one interval,
    # no rhythm: an 85-minute JAX compile on the CPU was warned as a deadlock 64 minutes into its silence.
    two = progress("ml/train", AT - timedelta(minutes=72), gap=180.0).model_copy(update={"progress_lines": 2})
    assert IdleGpuDetector(POLICY).detect(observe([job()], job_gpus("ml/train", utils), spin, {"ml/train": two})) == []
    # A log silent for less than the window is not stalled: protected by the CPU as before.
    recent = observe([job()], job_gpus("ml/train", busy_then_quiet(11, 13)), spin,
                     {"ml/train": progress("ml/train", AT - timedelta(minutes=50))})
    assert IdleGpuDetector(POLICY).detect(recent) == []


def test_a_spin_is_steady_and_narrow_and_dates_no_stretch():
    """The spin judgement's stretch starts when the GPUs and the log went quiet (a spin is no work: the warning is
    sent once, not every sweep as the CPU 'works'), and only CPU a hung process could burn reads as a spin: the
    same cores every slice, at most one per GPU and one more. An owner's 600 % pandas cell on a 1-GPU notebook, or
    CPU work that ended inside the window, is work and protects the job (probe: owner-returns-cpu-boundary)."""
    utils = busy_then_quiet(10, 14)
    stalled = {"ml/train": progress("ml/train", AT - timedelta(minutes=72))}
    [f] = IdleGpuDetector(POLICY).detect(observe([job()], job_gpus("ml/train", utils), [io("ml/train", 24, cpu=100.0)],
                                                 stalled))
    assert f.since == AT - timedelta(minutes=70) and "for 1h10m" in f.evidence
    # 4 GPUs: 500 % is still a spin's width; 600 % is more cores than a hung process burns.
    assert IdleGpuDetector(POLICY).detect(observe([job()], job_gpus("ml/train", utils),
                                                  [io("ml/train", 24, cpu=490.0)], stalled))
    assert IdleGpuDetector(POLICY).detect(observe([job()], job_gpus("ml/train", utils),
                                                  [io("ml/train", 24, cpu=600.0)], stalled)) == []
    # CPU that came and went inside the window (an owner's cell, 40 minutes, ended 20 minutes ago): work.
    cell = io("ml/train", 24, cpu=0.4)
    cell = cell.model_copy(update={"cpu_pct": [0.4] * 16 + [150.0] * 4 + [0.4] * 4})
    assert IdleGpuDetector(POLICY).detect(observe([job()], job_gpus("ml/train", utils), [cell], stalled)) == []


def test_an_idle_stretch_never_starts_before_the_job():
    """The GPU was quiet before the pod started on it: the stretch (and "for ...") starts with the job."""
    obs = observe([job(started_at=AT - timedelta(minutes=75))], job_gpus("ml/train", [0.0] * 24), [io("ml/train", 24)])
    [f] = IdleGpuDetector(POLICY).detect(obs)
    assert f.since == AT - timedelta(minutes=75) and "for 1h15m" in f.evidence


def test_a_stretch_is_only_as_long_as_it_was_watched():
    """An exporter dark for minutes at the decisive sweep, while the owner ran a 6-minute cell: the window still
    held 90 % of its samples, and a stop was licensed by a warning from before. A slice whose gaps could hide more
    than a GPU-minute ends the quiet stretch; at the newest slice it leaves nothing known about now."""
    utils = busy_then_quiet(4, 20)
    dark_now = job_gpus("ml/train", utils)
    dark_now[0] = dark_now[0].model_copy(update={"samples": [EXPECTED] * 23 + [4]})  # 6 of 10 samples missing now
    assert IdleGpuDetector(POLICY).detect(observe([job()], dark_now, [io("ml/train", 24)])) == []
    # The gap 10 minutes back: the stretch starts after it, not 100 minutes ago, and 10 minutes of quiet are no
    # idle finding (an exporter dark five minutes an hour had its owner warned "idle for 5m" every hour).
    dark_before = job_gpus("ml/train", utils)
    dark_before[0] = dark_before[0].model_copy(update={"samples": [EXPECTED] * 21 + [4] + [EXPECTED] * 2})
    assert IdleGpuDetector(POLICY).detect(observe([job()], dark_before, [io("ml/train", 24)])) == []
    # Once a whole window has passed since the gap, the owner is warned anew about the stretch after it.
    long_before = job_gpus("ml/train", utils)
    long_before[0] = long_before[0].model_copy(update={"samples": [EXPECTED] * 8 + [4] + [EXPECTED] * 15})
    [f] = IdleGpuDetector(POLICY).detect(observe([job()], long_before, [io("ml/train", 24)]))
    assert f.since == AT - timedelta(minutes=75)
    # One missed sample (30 GPU-s unseen) is no gap that could hide a GPU-minute.
    jitter = job_gpus("ml/train", utils)
    jitter[0] = jitter[0].model_copy(update={"samples": [EXPECTED] * 21 + [9] + [EXPECTED] * 2})
    [g] = IdleGpuDetector(POLICY).detect(observe([job()], jitter, [io("ml/train", 24)]))
    assert g.since == AT - timedelta(minutes=100)


def test_the_stores_lag_of_one_sample_is_no_dark_exporter():
    """VictoriaMetrics leaves out its newest 30 s by default (-search.latencyOffset), remote-write stores lag a
    scrape, a query lands while a scrape is in flight: every GPU's newest slice misses one sample. Counted as unseen
    that was 30 s x GPUs, over the GPU-minute line for any job of 3 GPUs or more, which was then never found idle."""
    utils = busy_then_quiet(4, 20)
    for count in (1, 4, 8):
        lagging = [g.model_copy(update={"samples": [EXPECTED] * 23 + [EXPECTED - 1]})
                   for g in job_gpus("ml/train", utils, count=count)]
        [f] = IdleGpuDetector(POLICY).detect(observe([job(gpus=count)], lagging, [io("ml/train", 24)]))
        assert f.since == AT - timedelta(minutes=100)
    # Only the newest slice and one sample per GPU: a GPU missing more there, or a sample missed on every GPU
    # before it, is still unseen time that could hide work.
    more = [g.model_copy(update={"samples": [EXPECTED] * 23 + [EXPECTED - 1]}) for g in job_gpus("ml/train", utils)]
    more[0] = more[0].model_copy(update={"samples": [EXPECTED] * 23 + [EXPECTED - 4]})
    assert IdleGpuDetector(POLICY).detect(observe([job()], more, [io("ml/train", 24)])) == []
    before = [g.model_copy(update={"samples": [EXPECTED] * 22 + [EXPECTED - 1, EXPECTED]})
              for g in job_gpus("ml/train", utils)]
    assert IdleGpuDetector(POLICY).detect(observe([job()], before, [io("ml/train", 24)])) == []
    # One GPU reporting nothing now while the others lag and are quiet: nothing known about it, so not idle.
    dark = [g.model_copy(update={"samples": [EXPECTED] * 23 + [EXPECTED - 1]}) for g in job_gpus("ml/train", utils)]
    dark[3] = gpu("ml/train", utils[:-1] + [None], index=3)
    assert IdleGpuDetector(POLICY).detect(observe([job()], dark, [io("ml/train", 24)])) == []


def test_idle_needs_the_whole_window_quiet():
    obs = observe([job()], job_gpus("ml/train", busy_then_quiet(14, 10)), [io("ml/train", 24)])
    assert IdleGpuDetector(POLICY).detect(obs) == []


def test_missing_slice_means_no_idle_finding():
    utils = busy_then_quiet(10, 14)
    gpus = job_gpus("ml/train", utils)
    gpus[2] = gpu("ml/train", utils[:-3] + [None] + utils[-2:], index=2)  # one GPU missed one slice
    obs = observe([job()], gpus, [io("ml/train", 24)])
    assert IdleGpuDetector(POLICY).detect(obs) == []


def test_low_coverage_means_no_idle_finding():
    utils = busy_then_quiet(10, 14)
    gpus = [g.model_copy(update={"samples": [3] * 24}) for g in job_gpus("ml/train", utils)]  # 30% of samples
    obs = observe([job()], gpus, [io("ml/train", 24)])
    assert IdleGpuDetector(POLICY).detect(obs) == []


def test_all_none_slices_or_short_history_mean_no_finding():
    obs = observe([job()], job_gpus("ml/train", [None] * 24))
    assert IdleGpuDetector(POLICY).detect(obs) == []
    obs = observe([job()], job_gpus("ml/train", [0.0] * 6))  # only 30 minutes of data for a 60 minute window
    assert IdleGpuDetector(POLICY).detect(obs) == []


def test_unseen_requested_gpu_means_no_finding():
    obs = observe([job(gpus=4)], job_gpus("ml/train", [0.0] * 24, count=3))
    assert IdleGpuDetector(POLICY).detect(obs) == []


def test_idle_skips_pending_and_cpu_only_jobs():
    obs = observe(
        [job(state="pending"), job("ml/cpu", gpus=0)],
        job_gpus("ml/train", [0.0] * 24) + job_gpus("ml/cpu", [0.0] * 24, 1),
    )
    assert IdleGpuDetector(POLICY).detect(obs) == []


def test_series_of_different_lengths_are_aligned_from_the_end():
    gpus = [gpu("ml/train", [90.0] * 30 + [0.0] * 14, index=0), gpu("ml/train", [0.0] * 14, index=1)]
    [f] = IdleGpuDetector(POLICY).detect(observe([job(gpus=2)], gpus, [io("ml/train", 44)]))
    assert f.since == AT - timedelta(minutes=70)


# --- long-tail protection ----------------------------------------------------------------------------------


def test_periodic_job_in_a_quiet_phase_is_protected():
    # bursts of 10 minutes every ~100 minutes; quiet now for 70 minutes (< 1.5 x 90)
    cycle = [80.0] * 2 + [0.0] * 18
    utils = cycle * 3 + [80.0] * 2 + [0.0] * 14
    obs = observe([job()], job_gpus("ml/train", utils), [io("ml/train", len(utils))])
    # A pause no longer than the ones it takes (90 minutes) is its rhythm: no finding, no warning.
    assert IdleGpuDetector(POLICY).detect(obs) == []
    # 100 minutes: longer than any pause it took, so the owner may be warned now; a stop waits until the pause is
    # long for this job: 1.5 x 90 = 135 minutes of quiet, 35 minutes from now.
    longer = cycle * 3 + [80.0] * 2 + [0.0] * 20
    obs_longer = observe([job()], job_gpus("ml/train", longer), [io("ml/train", len(longer))])
    [finding] = IdleGpuDetector(POLICY).detect(obs_longer)
    assert finding.stop_after == AT + timedelta(minutes=35)
    assert "periodic GPU work" in finding.evidence and "no stop before" in finding.evidence
    assert finding.metrics["grace_left_s"] == 35 * 60
    # Warnings off during the grace: no finding at all until it runs out.
    no_early_warning = parse_policy({"warning": {"during_grace": False}})
    assert IdleGpuDetector(no_early_warning).detect(obs_longer) == []
    window = group_signals(obs).jobs["ml/train"].window(3600, 4)
    six_hours = parse_policy({"detectors": {"longtail": {"lookback": "6h"}}}).detectors.longtail
    reason = long_tail_reason(window, None, six_hours, quiet_pct=2.0)
    # the oldest burst is past a 6h lookback
    assert reason is not None and "periodic" in reason and "3 bursts in the last 6h" in reason


def test_periodic_protection_ends_when_the_pause_is_far_longer_than_usual():
    cycle = [80.0] * 2 + [0.0] * 4  # pauses of 20 minutes
    utils = cycle * 6 + [80.0] * 2 + [0.0] * 14  # quiet 70 minutes > 1.5 x 20
    obs = observe([job()], job_gpus("ml/train", utils), [io("ml/train", len(utils))])
    assert [f.kind for f in IdleGpuDetector(POLICY).detect(obs)] == ["idle"]


def test_network_io_protects_a_quiet_job():
    obs = observe([job()], job_gpus("ml/train", [0.0] * 24), [io("ml/train", 24, net=120.0)])
    assert IdleGpuDetector(POLICY).detect(obs) == []
    window = group_signals(obs).jobs["ml/train"].window(3600, 4)
    assert "network receive up to 120.0 MB/s" in long_tail_reason(
        window, None, POLICY.detectors.longtail, quiet_pct=2.0
    )


def test_busy_cpu_protects_a_quiet_job():
    obs = observe([job()], job_gpus("ml/train", [0.0] * 24), [io("ml/train", 24, cpu=380.0)])
    assert IdleGpuDetector(POLICY).detect(obs) == []


def test_advancing_loss_protects_a_quiet_job():
    logs = {"ml/train": progress("ml/train", AT - timedelta(minutes=2))}
    obs = observe([job()], job_gpus("ml/train", [0.0] * 24), [io("ml/train", 24)], logs)
    assert IdleGpuDetector(POLICY).detect(obs) == []


def test_a_log_that_ended_in_a_failure_protects_nothing_and_stops_nothing_on_its_own():
    """A job whose last progress line is followed by a failure (an OOM traceback, "Killed") does not work now: its
    log no longer protects its quiet GPUs. The failure is no evidence of idleness either: CPU or I/O still protect
    the job, and a hung job is judged silent from its last progress, not sooner."""
    from agent.detectors.evidence import describe

    crashed = progress("ml/train", AT - timedelta(minutes=2)).model_copy(
        update={"ended": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."})
    quiet = observe([job()], job_gpus("ml/train", [0.0] * 24), [io("ml/train", 24)], {"ml/train": crashed})
    [f] = IdleGpuDetector(POLICY).detect(quiet)
    assert 'then it ended: "torch.OutOfMemoryError: CUDA out of memory.' in f.evidence
    assert f.metrics["log_ended"] == 1.0 and "随后以失败告终" in describe(f, "zh")
    cpu = observe([job()], job_gpus("ml/train", [0.0] * 24), [io("ml/train", 24, cpu=380.0)], {"ml/train": crashed})
    assert IdleGpuDetector(POLICY).detect(cpu) == []
    pinned = observe([job()], job_gpus("ml/train", [100.0] * 24), [io("ml/train", 24)], {"ml/train": crashed})
    assert ZombieDetector(POLICY).detect(pinned) == []  # silent 2 minutes: a zombie needs longer, failure or not


# --- zombie ------------------------------------------------------------------------------------------------


def hung(
    logs_last: datetime | None, *, util: float = 100.0, cpu: float = 0.5, net: float = 0.0, gap: float = 30.0
) -> Observation:
    logs = {"ml/train": progress("ml/train", logs_last, gap=gap)}
    return observe([job()], job_gpus("ml/train", [util] * 24), [io("ml/train", 24, cpu=cpu, net=net)], logs)


def test_zombie_with_pinned_gpu_and_frozen_log_and_io():
    last = AT - timedelta(minutes=45)
    [f] = ZombieDetector(POLICY).detect(hung(last))
    assert f.kind == "zombie" and f.gpus == 4 and f.since == last
    assert "busy at min 100%" in f.evidence and "no log progress since 11:15" in f.evidence
    assert "silent 45m" in f.evidence
    assert IdleGpuDetector(POLICY).detect(hung(last)) == []


def test_zombie_needs_silence_longer_than_the_usual_log_gap():
    # a job that logs every 20 minutes: 45 minutes of silence is < 3 x 20m
    assert ZombieDetector(POLICY).detect(hung(AT - timedelta(minutes=45), gap=1200.0)) == []
    assert len(ZombieDetector(POLICY).detect(hung(AT - timedelta(minutes=65), gap=1200.0))) == 1


def test_no_zombie_when_logs_advance_or_were_never_seen():
    assert ZombieDetector(POLICY).detect(hung(AT - timedelta(minutes=1))) == []
    assert ZombieDetector(POLICY).detect(hung(None)) == []  # never made progress: we do not know
    obs = observe([job()], job_gpus("ml/train", [100.0] * 24), [io("ml/train", 24)])
    assert ZombieDetector(POLICY).detect(obs) == []  # no log inspected


def test_no_zombie_when_gpu_quiet_idle_instead():
    obs = hung(AT - timedelta(minutes=90), util=0.0)
    assert ZombieDetector(POLICY).detect(obs) == []
    assert [f.kind for f in IdleGpuDetector(POLICY).detect(obs)] == ["idle"]


def test_no_zombie_when_network_moves():
    assert ZombieDetector(POLICY).detect(hung(AT - timedelta(minutes=90), net=40.0)) == []


def test_a_spinning_cpu_does_not_clear_a_hung_job_unless_the_policy_asks():
    # A hung NCCL collective busy-waits: ~100% of a core per rank.
    spinning = hung(AT - timedelta(minutes=90), cpu=400.0)
    [f] = ZombieDetector(POLICY).detect(spinning)
    assert "CPU 400.0%" in f.evidence and "judged on log progress, network/disk I/O" in f.evidence
    quiet_cpu_rule = parse_policy({"detectors": {"zombie": {"cpu_threshold_pct": 5}}}, "test")
    assert ZombieDetector(quiet_cpu_rule).detect(spinning) == []
    assert len(ZombieDetector(quiet_cpu_rule).detect(hung(AT - timedelta(minutes=90), cpu=0.5))) == 1


def test_no_zombie_without_io_metrics():
    logs = {"ml/train": progress("ml/train", AT - timedelta(minutes=90))}
    obs = observe([job()], job_gpus("ml/train", [100.0] * 24), [], logs)
    assert ZombieDetector(POLICY).detect(obs) == []


# --- overprovisioned ---------------------------------------------------------------------------------------


def test_overprovisioned_four_requested_one_working():
    gpus = [gpu("ml/train", [70.0] * 24, index=0)] + [gpu("ml/train", [0.0] * 24, index=i) for i in (1, 2, 3)]
    [f] = OverprovisionedDetector(POLICY).detect(observe([job()], gpus, [io("ml/train", 24, cpu=200.0)]))
    assert f.kind == "overprovisioned" and f.gpus == 3
    assert f.metrics["gpus_working"] == 1 and f.metrics["ratio"] == 4
    assert "4 GPUs requested, 1 working" in f.evidence


def test_overprovisioned_gpus_never_touched_are_named_in_both_languages():
    """The Chinese evidence ended at "3 块 GPU 未使用" where the English named the likely cause (a device list that
    leaves GPUs out)."""
    from agent.detectors.evidence import describe

    gpus = [gpu("ml/train", [70.0] * 24, index=0)] + [gpu("ml/train", [0.0] * 24, index=i, mem_mb=300.0)
                                                      for i in (1, 2, 3)]
    [f] = OverprovisionedDetector(POLICY).detect(observe([job()], gpus, [io("ml/train", 24, cpu=200.0)]))
    assert "never touched" not in f.evidence and "从未使用" not in describe(f, "zh")  # no lookback history: unknown
    f = f.model_copy(update={"metrics": {**f.metrics, "gpus_untouched": 3.0}})  # as with a day's history behind it
    zh = describe(f, "zh")
    assert "其中 3 块从未使用" in zh and "CUDA_VISIBLE_DEVICES" in zh


def test_overprovisioned_gpus_whose_task_ended_count_as_unused_and_waiting_ranks_do_not():
    """Eight single-GPU trials packed in one job end unevenly: a GPU whose trial ended worked earlier in the day, so
    the lookback once counted it as working all day (7 of 8 GPUs empty for hours, no advice). Its memory is gone
    now; a DDP rank waiting for an uneven last shard still holds its model, and stays working."""
    from agent.detectors.evidence import describe

    coarse = [90.0, 90.0, 0.0, 0.0]  # worked 2 h ago, quiet since
    history = [GpuHistory(job="ml/train", node="n1", gpu=i, slice_s=1800.0, util_max=[90.0] * 4 if i == 0 else coarse,
                          samples=[60] * 4, expected=60) for i in range(8)]

    def detect(mem_mb: float):
        gpus = [gpu("ml/train", [70.0] * 24, index=0)] + [gpu("ml/train", [0.0] * 24, index=i, mem_mb=mem_mb)
                                                          for i in range(1, 8)]
        obs = observe([job(gpus=8)], gpus, [io("ml/train", 24, cpu=120.0)], history=history, history_slice_s=1800.0)
        return OverprovisionedDetector(POLICY).detect(obs)

    [f] = detect(mem_mb=0.0)  # finished trials: no process, no memory
    assert f.gpus == 7 and f.metrics["gpus_working"] == 1 and f.metrics["gpus_released"] == 7
    assert "gpus_untouched" not in f.metrics and "never touched" not in f.evidence
    assert "let go of their memory" in f.evidence and "job array" in f.evidence
    assert "其中 7 块先前工作过、现已释放显存" in describe(f, "zh") and "作业数组" in describe(f, "zh")
    assert detect(mem_mb=60_000.0) == []  # ranks waiting with their model: the job is not over-provisioned


def test_overprovisioned_only_over_a_window_the_job_lived_through():
    # 55 minutes old, its slices full: one GPU preprocesses before all four train. Not "unused over 1h" yet.
    gpus = [gpu("ml/train", [70.0] * 24, index=0)] + [gpu("ml/train", [0.0] * 24, index=i) for i in (1, 2, 3)]
    young = job(started_at=AT - timedelta(minutes=55))
    assert OverprovisionedDetector(POLICY).detect(observe([young], gpus, [io("ml/train", 24, cpu=200.0)])) == []


def test_not_overprovisioned_when_half_or_more_work_or_none_do():
    gpus = [gpu("ml/train", [70.0] * 24, index=i) for i in (0, 1, 2)] + [gpu("ml/train", [0.0] * 24, index=3)]
    assert OverprovisionedDetector(POLICY).detect(observe([job()], gpus)) == []
    assert OverprovisionedDetector(POLICY).detect(observe([job()], job_gpus("ml/train", [0.0] * 24))) == []


# --- node health -------------------------------------------------------------------------------------------


def test_node_xid_79_and_overheating_one_finding_per_node():
    gpus = [
        gpu(None, [0.0] * 12, node="n1", index=0, xid_last=79, xid_at=AT - timedelta(minutes=5)),
        gpu(None, [0.0] * 12, node="n1", index=1, temp_c_max=93.0),
        gpu(None, [0.0] * 12, node="n2", index=0, xid_last=13),  # application fault: ignored
        gpu(None, [0.0] * 12, node="n2", index=1, xid_last=68, xid_at=AT - timedelta(minutes=5)),  # video decoder
        gpu(None, [0.0] * 12, node="n3", index=0, temp_c_max=95.0),
    ]
    findings = {f.target: f for f in NodeHealthDetector(POLICY).detect(observe([], gpus))}
    assert set(findings) == {"n1", "n3"}
    n1 = findings["n1"]
    assert n1.target_type == "node" and n1.kind == "node_health" and n1.gpus == 2
    assert "XID 79" in n1.evidence and "fallen off the bus" in n1.evidence and "93°C" in n1.evidence
    assert n1.since == AT - timedelta(minutes=5)
    assert "95°C" in findings["n3"].evidence


def test_an_idle_job_whose_gpu_reported_a_hardware_xid_names_it_and_an_older_xid_is_not_its():
    from agent.detectors.evidence import describe

    quiet = [0.0] * 24
    fault = AT - timedelta(minutes=90)
    gpus = [gpu("ml/lost", quiet, index=0, xid_last=79, xid_at=fault), gpu("ml/lost", quiet, index=1),
            gpu("ml/old", quiet, node="n2", index=0, xid_last=79, xid_at=AT - timedelta(hours=3)),
            gpu("ml/app", quiet, node="n3", index=0, xid_last=13, xid_at=fault)]
    jobs = [job("ml/lost", gpus=2), job("ml/old", gpus=1, node="n2"), job("ml/app", gpus=1, node="n3")]
    found = {f.target: f for f in run_detectors(observe(jobs, gpus), POLICY) if f.target_type == "job"}
    assert {"ml/lost", "ml/old", "ml/app"} <= set(found) and {f.kind for f in found.values()} == {"idle"}
    lost = found["ml/lost"]
    assert "GPU 0 of n1 reported XID 79 (GPU has fallen off the bus) at 10:30 UTC" in lost.evidence
    assert lost.metrics["fault_xid"] == 79 and lost.metrics["fault_gpu"] == 0
    zh = describe(lost, "zh")
    assert "节点 n1 的 GPU 0 于10:30" in zh and "XID 79（GPU 已从总线掉线）" in zh and "gpu-xid-errors" in zh
    # The stop is decided as for any idle job: a lost GPU makes no progress, and the stop frees the node to drain.
    assert not lost.stop_needs_approval
    # Before the job started (a previous occupant's), and an application XID (ignored by policy): not named.
    assert "XID" not in found["ml/old"].evidence and "fault_xid" not in found["ml/old"].metrics
    assert "XID" not in found["ml/app"].evidence


# --- pools -------------------------------------------------------------------------------------------------


def pool_obs(
    empty: int, *, nodes: int = 4, min_nodes: int = 1, at: datetime = AT, billing: str = "on-demand"
) -> Observation:
    node_infos, gpus, jobs = [], [], []
    for i in range(nodes):
        name = f"p-{i}"
        if i < nodes - empty:
            j = job(f"ml/j{i}", gpus=8, node=name)
            jobs.append(j)
            node_infos.append(NodeInfo(name=name, pool="a100", gpus=8, jobs=[j.id]))
            gpus += [gpu(j.id, [80.0] * 14, node=name, index=g) for g in range(8)]
        else:
            node_infos.append(NodeInfo(name=name, pool="a100", gpus=8))
            gpus += [gpu(None, [0.0] * 14, node=name, index=g) for g in range(8)]
    pool = PoolInfo(
        name="a100", gpus_per_node=8, nodes=nodes, min_nodes=min_nodes, price_per_gpu_hour=14.0, billing=billing
    )
    return Observation(at=at, slice_s=SLICE, lookback_s=3600, jobs=jobs, nodes=node_infos, pools=[pool], gpus=gpus)


def test_oversized_pool_with_empty_nodes_keeps_reserve():
    # 8 nodes, 4 empty: 32 GPUs used + 10% of 64 = 38.4 -> 5 nodes
    [f] = OversizedPoolDetector(POLICY).detect(pool_obs(4, nodes=8))
    assert f.kind == "oversized" and f.target == "a100" and f.target_type == "pool"
    assert f.metrics["empty_nodes"] == 4 and f.metrics["suggested_nodes"] == 5
    assert f.gpus == 24 and f.waste_gpu_hours > 0


def test_oversized_pool_respects_min_nodes():
    [f] = OversizedPoolDetector(POLICY).detect(pool_obs(3, nodes=4, min_nodes=2))
    assert f.metrics["suggested_nodes"] == 2 and f.gpus == 16
    assert OversizedPoolDetector(POLICY).detect(pool_obs(2, nodes=2, min_nodes=2)) == []


def test_pool_not_oversized_when_reserve_needs_the_node_or_not_on_demand():
    # 4 nodes, 1 empty: 24 used + 3.2 reserve = 27.2 GPUs -> 4 nodes needed
    assert OversizedPoolDetector(POLICY).detect(pool_obs(1, nodes=4)) == []
    assert OversizedPoolDetector(POLICY).detect(pool_obs(3, billing="reserved")) == []


def test_queued_jobs_are_demand_a_scale_down_keeps_room_for():
    # 8 nodes, 4 empty: without a queue 5 nodes are kept. Two 8-GPU jobs pending (a begin time, a queue) need two
    # more; one asking for an H100 cannot run here and does not count.
    obs = pool_obs(4, nodes=8)
    obs = obs.model_copy(update={"pools": [p.model_copy(update={"gpu_model": "A100-SXM4-80GB"}) for p in obs.pools]})
    queued = [job(f"batch/eval-{i}", gpus=8, node=None, state="pending") for i in range(2)]
    other = job("batch/h100", gpus=8, node=None, state="pending", gpu_model="H100")
    [f] = OversizedPoolDetector(POLICY).detect(obs.model_copy(update={"jobs": [*obs.jobs, *queued, other]}))
    assert f.metrics["queued_gpus"] == 16 and f.metrics["suggested_nodes"] == 7
    assert "jobs hold 32 of 64 GPUs and 16 more are queued" in f.evidence
    # Three queued: every empty node is spoken for.
    three = [*obs.jobs, *queued, job("batch/eval-2", gpus=8, node=None, state="pending")]
    assert OversizedPoolDetector(POLICY).detect(obs.model_copy(update={"jobs": three})) == []


def test_jobs_that_wait_for_no_node_are_no_demand_a_scale_down_keeps_room_for():
    """A pending job is demand for a pool's nodes only when it waits for capacity they could give: a pod asking
    for more GPUs than a node has (stuck), pods held by a scheduling gate (Kueue's quota) and a Slurm job held by
    its QOS group limit wait for no node, and keeping three empty on-demand nodes for them buys nothing
    (kubernetes/autoscaler#4342). Before, all of them counted and the pool was never released."""
    obs = pool_obs(3, nodes=4)
    since = AT - timedelta(hours=2)
    waiting = [
        job("vision/vit-huge", gpus=16, node=None, state="pending", pending_reason="Unschedulable",
            pending_message="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", submitted_at=since),
        *(job(f"research/sweep-{i}", gpus=8, node=None, state="pending", pending_reason="SchedulingGated",
              pending_message="Scheduling is blocked due to non-empty scheduling gates", submitted_at=since)
          for i in range(3)),
        JobInfo(id="cloud/nlp-sweep", scheduler="slurm", namespace="cloud", name="nlp-sweep", user="ming", gpus=16,
                state="pending", pending_reason="QOSGrpGRES", submitted_at=since),
    ]
    [f] = OversizedPoolDetector(POLICY).detect(obs.model_copy(update={"jobs": [*obs.jobs, *waiting]}))
    assert f.metrics["queued_gpus"] == 0 and f.metrics["suggested_nodes"] == 2
    # A pod that waits for GPUs (the scheduler says so) is still demand.
    fits = job("nlp/bert", gpus=8, node=None, state="pending", pending_reason="Unschedulable", submitted_at=since,
               pending_message="0/4 nodes are available: 1 Insufficient nvidia.com/gpu.")
    [f] = OversizedPoolDetector(POLICY).detect(obs.model_copy(update={"jobs": [*obs.jobs, *waiting, fits]}))
    assert f.metrics["queued_gpus"] == 8 and f.metrics["suggested_nodes"] == 3


def test_a_request_spelled_as_the_nodes_spell_the_model_is_demand_too():
    """The pool is named `A100-80GB`; its nodes report GPU feature discovery's `NVIDIA-A100-SXM4-80GB`, and a pod
    selects that label, as Slurm jobs ask for `nvidia_a100_80gb`-style GRES types. The scheduler matches the
    node's label, so the job fits, and a scale-down must keep room for it."""
    obs = pool_obs(4, nodes=8)
    obs = obs.model_copy(update={
        "pools": [p.model_copy(update={"gpu_model": "A100-80GB"}) for p in obs.pools],
        "nodes": [n.model_copy(update={"gpu_model": "NVIDIA-A100-SXM4-80GB"}) for n in obs.nodes]})
    gfd = [job(f"batch/gfd-{i}", gpus=8, node=None, state="pending", gpu_model="NVIDIA-A100-SXM4-80GB") for i in range(2)]
    other = job("batch/h100", gpus=8, node=None, state="pending", gpu_model="NVIDIA-H100-80GB-HBM3")
    [f] = OversizedPoolDetector(POLICY).detect(obs.model_copy(update={"jobs": [*obs.jobs, *gfd, other]}))
    assert f.metrics["queued_gpus"] == 16 and f.metrics["suggested_nodes"] == 7
    # A pool scaled to zero has no node to ask: the pool's short name inside the request counts as a fit.
    empty = obs.model_copy(update={"nodes": [], "jobs": [*obs.jobs, *gfd]})
    from agent.detectors.queue import fits_pool_model
    assert all(fits_pool_model(j, empty.pools[0], empty) for j in gfd)
    assert not fits_pool_model(other, empty.pools[0], empty)


def test_node_with_quiet_gpus_but_a_job_is_not_empty():
    obs = pool_obs(3, nodes=4)
    nodes = [n.model_copy(update={"jobs": ["ml/sleeper"]}) if n.name == "p-3" else n for n in obs.nodes]
    [f] = OversizedPoolDetector(POLICY).detect(obs.model_copy(update={"nodes": nodes}))
    assert f.metrics["empty_nodes"] == 2


def test_pool_scale_down_time_window_wraps_midnight():
    policy = parse_policy({"detectors": {"pools": {"scale_down_start": "20:00", "scale_down_end": "06:00"}}})
    assert OversizedPoolDetector(policy).detect(pool_obs(3)) == []  # noon
    night = AT.replace(hour=23)
    assert len(OversizedPoolDetector(policy).detect(pool_obs(3, at=night))) == 1
    assert in_time_window(AT.replace(hour=3), clock(20), clock(6))
    assert not in_time_window(AT.replace(hour=6), clock(20), clock(6))
    assert in_time_window(AT.replace(hour=9), clock(8), clock(18))


# --- engine ------------------------------------------------------------------------------------------------


def test_run_detectors_prices_job_findings():
    obs = observe([job()], job_gpus("ml/train", busy_then_quiet(10, 14)), [io("ml/train", 24)], currency="CNY")
    [f] = run_detectors(obs, POLICY)
    assert f.owner == "alice" and f.currency == "CNY" and f.runbook is None
    assert abs(f.waste_gpu_hours - 4 * 70 / 60) < 1e-3
    assert abs(f.waste_cost - f.waste_gpu_hours * 2.0) < 0.01


def test_log_candidates_are_quiet_or_pinned_jobs_only():
    jobs = [job("ml/quiet"), job("ml/pinned"), job("ml/working")]
    gpus = job_gpus("ml/quiet", [0.0] * 24) + job_gpus("ml/pinned", [100.0] * 24) + job_gpus("ml/working", [60.0] * 24)
    ios = [io(j.id, 24) for j in jobs]
    assert log_candidates(observe(jobs, gpus, ios), POLICY) == ["ml/pinned", "ml/quiet"]


def test_ten_thousand_gpus_in_one_pass():
    jobs, gpus, ios, nodes = [], [], [], []
    for n in range(1250):
        node = f"node-{n}"
        ids = []
        for k in range(4):
            jid = f"team/j{n}-{k}"
            ids.append(jid)
            utils = [0.0] * 72 if k == 0 else [85.0] * 72
            jobs.append(job(jid, gpus=2, node=node))
            gpus += [gpu(jid, utils, node=node, index=2 * k + g) for g in range(2)]
            ios.append(io(jid, 72, cpu=120.0 if k else 0.3))
        nodes.append(NodeInfo(name=node, pool="a100", gpus=8, jobs=ids))
    obs = Observation(
        at=AT,
        slice_s=SLICE,
        lookback_s=6 * 3600,
        jobs=jobs,
        gpus=gpus,
        io=ios,
        nodes=nodes,
        pools=[PoolInfo(name="a100", gpus_per_node=8, nodes=1250, price_per_gpu_hour=2.0)],
    )
    candidates = log_candidates(obs, POLICY)
    findings = run_detectors(obs, POLICY)
    assert len(candidates) == 1250
    assert sum(f.kind == "idle" for f in findings) == 1250


def test_signals_can_be_shared_between_log_candidates_and_run_detectors():
    obs = observe([job()], job_gpus("ml/train", [100.0] * 24), [io("ml/train", 24)])
    signals = group_signals(obs)
    assert log_candidates(obs, POLICY, signals) == ["ml/train"]
    with_logs = obs.model_copy(update={"logs": {"ml/train": progress("ml/train", AT - timedelta(minutes=90))}})
    assert [f.kind for f in run_detectors(with_logs, POLICY, signals)] == ["zombie"]


def test_an_announced_write_that_no_line_finished_needs_a_person_to_stop():
    """verl#2860: a checkpoint to NFS for 3 hours, GPUs at 0 % and nothing in the pod's counters (the NFS client writes
    from the node's kernel), one "saving checkpoint" line: the idle job's stop needs a person."""
    from agent.detectors.idle import unfinished_state_io

    def with_tail(*lines: str) -> LogProgress:
        return analyse_log("ml/train", [LogLine(at=AT - timedelta(hours=2, seconds=len(lines) - i), text=t)
                                        for i, t in enumerate(lines)], AT)

    saving = with_tail("step 2000 loss 1.9", "saving checkpoint at iteration    2000 to /mnt/nfs/ckpt in torch_dist format")
    assert unfinished_state_io(saving) is not None
    assert unfinished_state_io(with_tail("正在保存检查点 /mnt/nfs/ckpt")) is not None
    # Named noun first (NeMo's on_train_end finalising an async save to Lustre for 140 minutes: both pods were stopped
    # 15 minutes before it finished; Megatron-LM's async utils say the same).
    for nemo in ("[NeMo I 2026-11-20 07:40:04 nemo_logging:393] Pending async checkpoint saves. Finalizing them "
                 "synchronously now", "Scheduled async checkpoint save for /fsx/ckpt/last.ckpt",
                 "Unfinalized async checkpoint saves. Finalizing them synchronously now."):
        assert unfinished_state_io(with_tail(nemo)) is not None, nemo
    assert unfinished_state_io(with_tail("Async checkpoint save for step 20000 (/fsx/last.ckpt) finalized "
                                         "successfully.")) is None
    # A setting named the same way is no operation in flight (a job that printed its config and hung is idle).
    for setting in ("checkpoint save dir: /mnt/ckpt", "model load path: /models/x", "weights download: false",
                    "ckpt save format = torch_dist", "Model loads are lazy"):
        assert unfinished_state_io(with_tail(setting)) is None, setting
    # Finished, failed, or a notebook server's own autosave: nothing is in flight.
    for done in ("successfully saved checkpoint from iteration 2000", "saving checkpoint took 312.4s",
                 "[I 12:00:01 ServerApp] Saving file at /work/model.ipynb", "upload of model artifacts failed",
                 "step 2010 loss 1.8", "检查点保存完成", "Will be saving checkpoints every 1000 steps",
                 "Syncing model weights from rank 0", "wandb: Uploading artifacts...", "正在保存日志文件"):
        assert unfinished_state_io(with_tail(done)) is None, done
    assert unfinished_state_io(None) is None

    obs = observe([job()], job_gpus("ml/train", [0.0] * 24), [io("ml/train", 24)], {"ml/train": saving})
    found = [f for f in run_detectors(obs, POLICY) if f.kind == "idle"]
    assert len(found) == 1 and "announce a write or load of its state" in (found[0].stop_needs_approval or "")
    # A load too (vllm#5405: a 144 GB model read from a JuiceFS volume for two hours before the server answers).
    for loading in ("INFO 11-03 08:01:40 weight_utils.py:207] Using model weights format ['*.safetensors']",
                    "Loading checkpoint shards from /mnt/nfs/llama-70b", "正在加载模型权重"):
        assert unfinished_state_io(with_tail(loading)) is not None, loading
    for loaded in ("INFO 11-03 10:10:12 model_runner.py:146] Loading model weights took 33.83 GB",
                   "Loaded checkpoint from step 2000", "Restored model from /ckpt/step_2000 (success)",
                   "Loading checkpoint shards: 100%|##########| 2/2 [00:04<00:00,  2.10s/it]"):
        assert unfinished_state_io(with_tail(loaded)) is None, loaded
    # The announcement need not be the newest line: transformers prints the model's config after "loading weights
    # file" in the same second, and the load runs on in silence (safetensors#562, a 70B model over EFS for 2.5 h).
    hf = ("[INFO|modeling_utils.py:3934] >> loading weights file /mnt/efs/llama-70b/model.safetensors.index.json",
          "[INFO|modeling_utils.py:1621] >> Instantiating LlamaForCausalLM model under default dtype torch.bfloat16.",
          "[INFO|configuration_utils.py:1099] >> Generate config GenerationConfig {", '  "bos_token_id": 128000,', "}", "")
    assert unfinished_state_io(with_tail(*hf)) is not None
    assert unfinished_state_io(with_tail("Loading checkpoint shards:  17%|#7        | 5/30 [25:01<2:05:00]")) is not None
    # Progress after it (the job moved on), a finish after it, or an announcement minutes before the newest line
    # (not the last burst): nothing in flight.
    assert unfinished_state_io(with_tail(*hf, "step 10 loss 2.31")) is None
    assert unfinished_state_io(with_tail(*hf[:2], "All model checkpoint weights were used; model loaded")) is None
    assert unfinished_state_io(with_tail(*hf[:2], "[2026/11/11 09:00:03] Setting the random seed")) is not None  # a date
    late = [LogLine(at=AT - timedelta(hours=3), text=hf[0]), LogLine(at=AT - timedelta(hours=2), text="Hello")]
    assert unfinished_state_io(analyse_log("ml/train", late, AT)) is None


def test_gpu_work_that_gpu_util_does_not_count_is_not_idle():
    """An NVENC re-encode (rigaya/NVEnc#148) shows GPU_UTIL 0-1.5 % while drawing half an L4's 72 W with PCIe moving
    frames: it was warned idle and stopped. Power above the near-idle share, or interconnect traffic, is work; once it
    ends, the stretch of waste starts after it (a warning from before must not count)."""
    def encoder(power: list[float]) -> Observation:
        series = [gpu("ml/encode", [0.0] * 24, index=i, model="NVIDIA L4", power_w_slices=list(power))
                  for i in range(4)]
        return observe([job("ml/encode")], series, [io("ml/encode", 24)], {"ml/encode": progress("ml/encode", None)})

    def idle(obs: Observation) -> list:
        return [f for f in run_detectors(obs, POLICY) if f.kind == "idle"]

    assert idle(encoder([35.0] * 24)) == []  # 49 % of 72 W all along
    assert idle(encoder([35.0] * 16 + [12.0] * 8)) == []  # the encode ended 40 minutes ago: inside the window
    [found] = idle(encoder([35.0] * 8 + [12.0] * 16))  # ended 80 minutes ago: idle since then, not for 2 h
    assert found.since == AT - timedelta(minutes=80)
    assert len(idle(encoder([12.0] * 24))) == 1  # an idle L4 draws 17 %: idle


def test_gpus_held_empty_while_the_job_works_on_the_cpu_get_advice_never_a_stop():
    """A 4-GPU job tokenising on 32 cores for hours before it trains (Princeton jobstats' 0 % GPU alert): its CPU
    protects it from idleness and no GPU works, so neither idle nor over-provisioned reported it. Now: advice with
    none of its GPUs working. Not for a job holding a model in GPU memory (it will use it). A job of one GPU too (an
    AlphaFold MSA search on the CPU for hours, alphafold#6: it was not told, as "not over-provisioned")."""
    from agent.detectors.evidence import describe
    from agent.planning.policy_model import warning_message

    empty = [gpu("ml/prep", [0.0] * 24, index=i, mem_mb=0.0) for i in range(4)]
    found = run_detectors(observe([job("ml/prep")], empty, [io("ml/prep", 24, cpu=3000.0)]), POLICY)
    [advice] = [f for f in found if f.target == "ml/prep"]
    assert advice.kind == "overprovisioned" and advice.gpus == 4 and advice.metrics["gpus_working"] == 0
    assert "none used over 1h" in advice.evidence and "process CPU up to 3000%" in advice.evidence
    assert "一块都未使用" in describe(advice, "zh")
    text = warning_message(advice, POLICY, AT, "en")
    assert "run this stage as a job without GPUs" in text and "request 1 GPU" not in text
    holding = [gpu("ml/prep", [0.0] * 24, index=i) for i in range(4)]  # 14.5 GB each: a model is loaded
    assert not run_detectors(observe([job("ml/prep")], holding, [io("ml/prep", 24, cpu=3000.0)]), POLICY)
    one = [gpu("ml/prep", [0.0] * 24, mem_mb=0.0)]
    [single] = run_detectors(observe([job("ml/prep", gpus=1)], one, [io("ml/prep", 24, cpu=3000.0)]), POLICY)
    assert single.kind == "overprovisioned" and single.gpus == 1 and single.evidence.startswith("1 GPU requested, ")
    assert "run this stage as a job without GPUs" in warning_message(single, POLICY, AT, "en")


def test_a_job_writing_to_its_disk_works_like_one_reading_from_it():
    """A 4-GPU Slurm job copies its dataset from Lustre to node-local NVMe for 2.5 hours before it trains: the
    reads go through the Lustre client (no block reads in its cgroup), `cp` costs a fifth of a core, the copy shows
    only as local disk writes. It was judged idle and stopped mid-copy. Writes are work: advice (stage the data
    without GPUs), never an idle stop; and a job with no write series while others have one is not known quiet."""
    from agent.detectors.evidence import describe

    empty = [gpu("ml/stage", [0.0] * 24, index=i, mem_mb=0.0) for i in range(4)]
    copying = io("ml/stage", 24, cpu=20.0, disk_write_mbps=[250.0] * 24)
    [advice] = [f for f in run_detectors(observe([job("ml/stage")], empty, [copying]), POLICY) if f.target == "ml/stage"]
    assert advice.kind == "overprovisioned" and advice.metrics["gpus_working"] == 0
    assert "disk write up to 250.0 MB/s" in advice.evidence

    # A trickle of writes under the active line (a slow copy, a log flushed): idle, but its stop needs a person.
    slow = io("ml/stage", 24, cpu=0.4, disk_write_mbps=[0.5] * 24)
    [f] = [f for f in run_detectors(observe([job("ml/stage")], job_gpus("ml/stage", [0.0] * 24), [slow]), POLICY)
           if f.target == "ml/stage"]
    assert f.kind == "idle" and "disk write averages 0.50 MB/s" in (f.stop_needs_approval or ""), f.stop_needs_approval
    assert "disk write max 0.5 MB/s" in f.evidence and "磁盘写入最高 0.5 MB/s" in describe(f, "zh")

    # Writes read for another job but not for this one: where it may be working is unknown.
    other = [gpu("ml/train", [90.0] * 24, index=4)]
    ios = [io("ml/stage", 24), io("ml/train", 24, cpu=400.0, disk_write_mbps=[3.0] * 24)]
    obs = observe([job("ml/stage"), job("ml/train", gpus=1)], job_gpus("ml/stage", [0.0] * 24) + other, ios)
    [f] = [f for f in run_detectors(obs, POLICY) if f.target == "ml/stage"]
    assert f.kind == "idle" and "disk write metrics are read for other jobs but not for it" in (
        f.stop_needs_approval or ""), f.stop_needs_approval


def test_a_log_that_exists_but_was_not_read_holds_the_stop_for_a_person():
    """A reviewer: a Slurm StdOut owned by another uid (an NFSv4 idmap mismatch reads as uid 65534) is not read as the
    job's log, and read as an empty one it dropped the hold an announced checkpoint save gives. Unknown, not empty:
    the sweep marks the log unread and the idle finding's stop needs a person."""
    from agent.planning.policy_model import PolicyModel
    from agent.wiring import simulated_deps
    from sim.scenario import load_scenario

    deps, cluster = simulated_deps(load_scenario("evals/scenarios/idle-notebook.yaml"), POLICY, PolicyModel())
    cluster.advance_to(3 * 3600)
    why = "owned by uid 65534, not the job's user (uid 1001)"
    cluster.unread_log = lambda job_id: why if job_id == "ml-team/jupyter-carol" else None
    obs = deps.observe()
    assert obs.logs["ml-team/jupyter-carol"].unread == why
    [f] = [f for f in run_detectors(obs, POLICY) if f.target == "ml-team/jupyter-carol"]
    assert f.kind == "idle" and "its log could not be read" in (f.stop_needs_approval or ""), f.stop_needs_approval
