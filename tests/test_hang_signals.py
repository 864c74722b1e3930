"""Signals real hangs have, keep-alive dodgers, and jobs idle from the start, on hand-built observations.

Zombies are judged on DCGM profiling fields, power and NVLink/PCIe traffic when the exporter has them (not on a
quiet CPU: hung collectives spin it), keep-alive loops are idle that only a human may stop, and a job never seen
doing material work over its whole observed life gets no long-tail grace.
"""

from __future__ import annotations

from datetime import timedelta

from agent.config.policy import Policy, parse_policy, stretch_span
from agent.detectors.activity import GpuActivity, board_power_w
from agent.detectors.engine import log_candidates, run_detectors
from agent.detectors.evidence import describe
from agent.detectors.idle import IdleGpuDetector
from agent.detectors.keepalive import KeepAliveDetector, regular_bursts
from agent.detectors.signals import group_signals
from agent.detectors.zombie import ZombieDetector
from core.cluster import GpuHistory, GpuSeries
from core.observation import LogProgress, Observation
from tests.test_detectors import AT, EXPECTED, SLICE, io, job, observe, progress

POLICY = Policy()
A100 = "NVIDIA A100-SXM4-80GB"
N = 24  # slices of 5 minutes: the job's last 2 hours


def col(value: float | list[float | None] | None, n: int = N) -> list[float | None]:
    if value is None:
        return []  # the exporter does not report the field at all
    return list(value) if isinstance(value, list) else [value] * n


def gpu(job_id: str, utils: list[float | None], index: int = 0, *, avg: list[float | None] | None = None,
        model: str = A100, sm=None, tensor=None, dram=None, power=None, nvlink=None, pcie=None) -> GpuSeries:
    n = len(utils)
    return GpuSeries(
        job=job_id, node="n1", gpu=index, model=model, slice_s=SLICE, util_max=list(utils),
        util_avg=list(avg if avg is not None else utils), samples=[0 if u is None else EXPECTED for u in utils],
        expected=EXPECTED, mem_used_mb=20_480.0, sm_active_avg=col(sm, n), tensor_active_avg=col(tensor, n),
        dram_active_avg=col(dram, n), power_w_slices=col(power, n),
        nvlink_bytes_avg=col(None if nvlink is None else nvlink * 1e6, n),  # MB/s in, bytes/s as DCGM reports
        pcie_bytes_avg=col(None if pcie is None else pcie * 1e6, n),
    )


# --- zombie: what a hung collective really looks like -------------------------------------------------------

HUNG = {"sm": 0.1, "tensor": 0.0, "dram": 0.01, "power": 90.0, "nvlink": 0.0, "pcie": 0.05}


def hung_job(*, cpu: float = 400.0, gpus: int = 4, logs_last=AT - timedelta(minutes=60), **activity) -> Observation:
    fields = {**HUNG, **activity}
    series = [gpu("ml/train", [100.0] * N, i, **fields) for i in range(gpus)]
    logs = {"ml/train": progress("ml/train", logs_last)} if logs_last is not None else {}
    return observe([job(gpus=gpus)], series, [io("ml/train", N, cpu=cpu)], logs)


def test_hung_collective_with_spinning_cpu_is_a_zombie_on_profiling_fields():
    [f] = ZombieDetector(POLICY).detect(hung_job())
    assert f.kind == "zombie" and f.gpus == 4 and f.since == AT - timedelta(minutes=60)
    assert "CPU 400.0%" in f.evidence
    assert "SM active max 10%, tensor pipe max 0%, DRAM active max 1%" in f.evidence
    assert "power max 90 W (22% of 400 W)" in f.evidence and "NVLink max 0.0 MB/s, PCIe max 0.1 MB/s" in f.evidence
    assert ("judged on log progress, network/disk I/O, DCGM profiling (SM/tensor/DRAM activity), NVLink/PCIe "
            "traffic, power") in f.evidence
    assert f.metrics["used_profiling"] == 1 and f.metrics["used_power"] == 1 and f.metrics["used_interconnect"] == 1
    zh = describe(f, "zh")
    assert "SM 活跃度最高 10%" in zh and "功耗最高 90 W（额定 400 W 的 22%）" in zh
    assert "判断依据：日志进度、网络/磁盘 I/O、DCGM 性能剖析（SM/张量/显存活跃度）、NVLink/PCIe 流量、功耗" in zh


def test_a_pinned_gpu_that_really_computes_is_not_a_zombie_whatever_its_log_says():
    # Each signal alone that shows real work clears the job: slow or quiet, not hung.
    for real in ({"sm": 0.85, "power": 150.0}, {"tensor": 0.4}, {"dram": 0.3}, {"power": 380.0},
                 {"nvlink": 18_000.0}, {"pcie": 900.0}):
        assert ZombieDetector(POLICY).detect(hung_job(**real)) == [], real


def test_one_rank_stuck_on_the_host_beside_spinning_ones_is_a_hang_whose_stop_needs_a_person():
    """Rank 0 stuck before the collective (its GPU at 0 %), ranks 1-3 spinning in it: a hang, but the same shape as
    rank 0 writing a checkpoint on the CPU while the others wait, so the stop needs a person."""
    obs = hung_job()
    stuck = gpu("ml/train", [0.0] * N, 0, **{**HUNG, "sm": 0.0, "power": 60.0})
    obs.gpus[0] = stuck
    [f] = ZombieDetector(POLICY).detect(obs)
    assert f.kind == "zombie" and "4 GPUs busy at min 100% on 3 of them (1 idle) avg util" in f.evidence
    assert f.stop_needs_approval and "1 of 4 GPUs idle beside pinned ones" in f.stop_needs_approval
    # A GPU in between (working at 50 %) is not a hang; every GPU at 0 % is the idle detector's case.
    between = hung_job()
    between.gpus[0] = gpu("ml/train", [50.0] * N, 0, **HUNG)
    assert ZombieDetector(POLICY).detect(between) == []
    assert ZombieDetector(POLICY).detect(observe([job()], [gpu("ml/train", [0.0] * N, i, **HUNG) for i in range(4)],
                                                 [io("ml/train", N, cpu=400.0)],
                                                 {"ml/train": progress("ml/train", AT - timedelta(minutes=60))})) == []


def test_sm_residency_alone_at_an_idle_gpus_draw_is_a_spin():
    """Two stuck NCCL communicators keep 30-40 % of SMs resident while the pipes, memory, links and power idle: SM
    activity counts resident blocks, so alone, at an idle GPU's draw (90 W of 400 W), it is no work."""
    [f] = ZombieDetector(POLICY).detect(hung_job(sm=0.38))
    assert f.kind == "zombie" and f.stop_needs_approval is None
    # Unknown power: SM alone still clears the job (nothing says the GPU idles).
    assert ZombieDetector(POLICY).detect(hung_job(sm=0.38, power=None)) == []


def test_one_gpu_that_computes_clears_the_job_even_when_another_lacks_the_field():
    series = [gpu("ml/train", [100.0] * N, 0, **{**HUNG, "tensor": 0.4})]
    series += [gpu("ml/train", [100.0] * N, i, **{**HUNG, "tensor": None}) for i in (1, 2, 3)]
    obs = observe([job()], series, [io("ml/train", N, cpu=400.0)], {"ml/train": progress("ml/train", AT - timedelta(hours=1))})
    assert ZombieDetector(POLICY).detect(obs) == []


def test_without_profiling_fields_it_falls_back_to_progress_and_io_and_says_so():
    bare = {k: None for k in HUNG}
    [f] = ZombieDetector(POLICY).detect(hung_job(**bare))
    assert "no DCGM profiling fields" in f.evidence
    assert "judged on log progress, network/disk I/O; likely hung" in f.evidence
    assert f.metrics["used_profiling"] == 0 and f.metrics["used_power"] == 0
    assert "判断依据：日志进度、网络/磁盘 I/O；" in describe(f, "zh")
    # Power alone is read when the model is known: near idle supports the hang, high power clears the job.
    [with_power] = ZombieDetector(POLICY).detect(hung_job(**{**bare, "power": 95.0}))
    assert "judged on log progress, network/disk I/O, power" in with_power.evidence
    assert ZombieDetector(POLICY).detect(hung_job(**{**bare, "power": 350.0})) == []
    # An unknown model: its power is shown but judges nothing.
    unknown = [gpu("ml/train", [100.0] * N, i, model="Mystery GPU", **{**bare, "power": 95.0}) for i in range(4)]
    obs = observe([job()], unknown, [io("ml/train", N, cpu=400.0)], {"ml/train": progress("ml/train", AT - timedelta(hours=1))})
    [f2] = ZombieDetector(POLICY).detect(obs)
    assert "power max 95 W (GPU model's board power unknown)" in f2.evidence and f2.metrics["used_power"] == 0


def test_a_hang_judged_without_profiling_on_ambiguous_or_no_power_needs_a_person_to_stop():
    """Above an idle GPU's draw (a quarter of board power) and under the near-idle line, power alone cannot tell a
    hung collective's spin from memory-bound decoding: the finding stands (the owner is warned), a stop needs a
    person. No power reading and no profiling: nothing GPU-side says idle either. Profiling or an idle draw: the
    policy's levels decide, as before."""
    bare = {k: None for k in HUNG}
    [ambiguous] = ZombieDetector(POLICY).detect(hung_job(**{**bare, "power": 140.0}))  # 35 % of 400 W
    assert ambiguous.stop_needs_approval is not None and "above an idle GPU's draw (25%)" in ambiguous.stop_needs_approval
    [blind] = ZombieDetector(POLICY).detect(hung_job(**bare))
    assert blind.stop_needs_approval is not None and "no power reading" in blind.stop_needs_approval
    [idle_draw] = ZombieDetector(POLICY).detect(hung_job(**{**bare, "power": 95.0}))  # 24 %
    assert idle_draw.stop_needs_approval is None
    [profiled] = ZombieDetector(POLICY).detect(hung_job(**{**HUNG, "power": 140.0}))
    assert profiled.stop_needs_approval is None
    from agent.guardrail.case import Facts
    from agent.guardrail.decide import decide
    from core.actions import History, HistoryEntry, ProposedAction

    warned = History(entries=[HistoryEntry(action="notify", target="ml/train", status="executed",
                                           at=AT - timedelta(minutes=60), finding_kind="zombie", deadline=AT)])
    stop = ProposedAction(action="terminate", target="ml/train", finding_kind="zombie")
    assert decide(stop, Facts(now=AT, job=job(), findings=[idle_draw]), POLICY, warned).verdict == "allow"
    assert decide(stop, Facts(now=AT, job=job(), findings=[ambiguous]), POLICY, warned).verdict == "needs_approval"


def test_a_job_never_seen_to_progress_is_hung_only_on_the_gpus_own_counters():
    """A hang in the first collective (nccl-tests#117: not one step logged) is found from the job's start, but only
    where DCGM profiling shows the SMs idle under the pinned utilisation; an unread log, a job younger than the
    window, or no profiling fields (a job that computes and logs nothing until it ends reads the same) is left alone."""
    assert ZombieDetector(POLICY).detect(hung_job(logs_last=None)) == []  # log never read
    assert ZombieDetector(POLICY).detect(hung_job(logs_last=AT - timedelta(minutes=5))) == []  # still progressing

    def never(started: timedelta | None, **activity: object) -> Observation:
        obs = hung_job(**activity)  # type: ignore[arg-type]
        obs.jobs = [j.model_copy(update={"started_at": None if started is None else AT - started}) for j in obs.jobs]
        obs.logs = {"ml/train": LogProgress(job="ml/train", lines=40)}  # read, but never saw progress
        return obs

    [f] = ZombieDetector(POLICY).detect(never(timedelta(hours=2)))
    assert f.since == AT - timedelta(hours=2) and f.metrics["never_progressed"] == 1
    assert "no progress in the last 40 log lines, none seen since it started at" in f.evidence
    assert "自启动以来未见进展" in describe(f, "zh")
    # Its stop needs a person: a rank that never logs, spinning in a barrier while rank 0 saves, reads the same.
    assert f.stop_needs_approval and "only rank 0 prints" in f.stop_needs_approval
    assert f.stop_needs_approval_zh and "只有 rank 0 打印" in f.stop_needs_approval_zh
    # The stretch begins at the GPUs' last real work, not at the start: a rank that trained (its tensor pipe busy)
    # until 40 minutes ago and spins since, or a job that spun, worked and spins again, is warned for this stretch.
    trained = never(timedelta(hours=2), tensor=[0.5] * (N - 8) + [0.0] * 8)
    [f] = ZombieDetector(POLICY).detect(trained)
    assert f.since == AT - timedelta(minutes=40), f.since
    assert ZombieDetector(POLICY).detect(never(timedelta(hours=2), tensor=[0.5] * (N - 4) + [0.0] * 4)) == []
    # A log that could not be read, or holds nothing, is no reading of silence.
    for unread in (LogProgress(job="ml/train", lines=0, unread="permission denied"),
                   LogProgress(job="ml/train", lines=0)):
        obs = never(timedelta(hours=2))
        obs.logs = {"ml/train": unread}
        assert ZombieDetector(POLICY).detect(obs) == [], unread
    assert ZombieDetector(POLICY).detect(never(None)) == []  # start unknown
    assert ZombieDetector(POLICY).detect(never(timedelta(minutes=20))) == []  # younger than the window
    no_profiling = {"sm": None, "tensor": None, "dram": None}
    assert ZombieDetector(POLICY).detect(never(timedelta(hours=2), **no_profiling)) == []
    # With progress seen, the log and power decide as before, profiling or not.
    assert ZombieDetector(POLICY).detect(hung_job(**no_profiling))


def test_board_power_by_dcgm_model_name():
    assert board_power_w("NVIDIA A100-SXM4-80GB") == 400.0
    assert board_power_w("NVIDIA A100 80GB PCIe") == 300.0
    assert board_power_w("NVIDIA H100 80GB HBM3") == 700.0 and board_power_w("NVIDIA H100 PCIe") == 350.0
    assert board_power_w("NVIDIA L4") == 72.0 and board_power_w("NVIDIA L40S") == 350.0
    assert board_power_w("NVIDIA RTX PRO 6000 Blackwell Server Edition") == 600.0
    assert board_power_w("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition") == 300.0
    assert board_power_w("NVIDIA RTX 6000 Ada Generation") == 300.0 and board_power_w("NVIDIA H20") == 400.0
    assert board_power_w("trace-gpu") is None


def test_activity_is_unknown_when_a_gpu_lacks_the_field_or_its_slices():
    obs = observe([job(gpus=2)], [gpu("ml/train", [100.0] * N, 0, **HUNG),
                                  gpu("ml/train", [100.0] * N, 1, **{**HUNG, "tensor": None,
                                                                     "sm": [None] * 20 + [0.1] * 4})],
                  [io("ml/train", N)])
    w = group_signals(obs).jobs["ml/train"].window(1800, 2)
    a = GpuActivity.of(w, 0.9)
    assert a.tensor == 0.0 and not a.tensor_known  # one GPU does not report it: cannot say near idle
    assert "sm" not in a.complete and a.sm == 0.1
    assert a.profiled  # DRAM is reported by both, over the whole window


# --- keep-alive dodgers -------------------------------------------------------------------------------------

def blips(period: int = 2, util: float = 3.0, n: int = N, offset: int = 1) -> tuple[list[float | None], list[float | None]]:
    """One short burst every `period` slices (max `util`, slice average a fifth of it), 0% otherwise."""
    maxes: list[float | None] = [util if (k - offset) % period == 0 else 0.0 for k in range(n)]
    return maxes, [m / 5 if m else 0.0 for m in maxes]


def squatter(maxes=None, avgs=None, *, logs: LogProgress | None | str = "silent", net: float = 0.0, cpu: float = 0.5,
             started=timedelta(hours=2), **activity) -> Observation:
    if maxes is None:
        maxes, avgs = blips()
    fields = {"tensor": 0.0, "power": 72.0, **activity}
    series = [gpu("ml/squat", maxes, i, avg=avgs, **fields) for i in range(2)]
    if logs == "silent":
        logs = LogProgress(job="ml/squat", lines=0)
    return observe([job("ml/squat", gpus=2, started_at=AT - started)], series, [io("ml/squat", N, cpu=cpu, net=net)],
                   {"ml/squat": logs} if logs is not None else {})


def test_keepalive_blips_are_idle_whose_stop_needs_a_human():
    obs = squatter()
    assert IdleGpuDetector(POLICY).detect(obs) == []  # never a whole quiet window: the plain idle rule misses it
    [f] = KeepAliveDetector(POLICY).detect(obs)
    assert f.kind == "idle" and f.gpus == 2 and f.stop_needs_approval
    # The stretch began when the job did (its log never showed progress): a fixed point, not the window's start.
    assert f.since == AT - timedelta(hours=2)
    assert "6 short bursts of GPU activity in the last 1h, one every 10m, each at most 5m" in f.evidence
    assert "no recent log lines" in f.evidence and "tensor pipe max 0%" in f.evidence and "power max 72 W (18% of 400 W)" in f.evidence
    assert "a stop needs a human's approval" in f.evidence
    zh = describe(f, "zh")
    assert "6 次短暂的 GPU 活动，每 10 分钟一次" in zh and "疑似保活脚本" in zh and "停止需经人工批准" in zh
    assert [x.kind for x in run_detectors(obs, POLICY)] == ["idle"]
    assert log_candidates(obs, POLICY) == ["ml/squat"]


def test_a_steady_low_level_in_every_slice_is_a_keepalive_too():
    [f] = KeepAliveDetector(POLICY).detect(squatter([4.0] * N, [1.0] * N))
    assert "GPU activity in every slice of the last 1h at a steady low level" in f.evidence
    assert "每个时间片都有低而平稳的 GPU 活动" in describe(f, "zh")
    uneven = [1.0, 3.0] * (N // 2)
    assert KeepAliveDetector(POLICY).detect(squatter([6.0] * N, uneven)) == []


def test_a_burst_is_judged_at_its_own_power_not_its_slices():
    """A 90-second notebook cell at 260 W on an A100 reads 39 % of board power in its 5-minute slice: under the
    idle line, as a keep-alive's ping would. Its duty (slice average over its highest utilisation: 12 of 40) puts
    the cell itself at about 70 + (157 - 70) / 0.3 = 360 W: real work, no keep-alive finding."""
    from agent.detectors.keepalive import burst_power_share

    maxes, avgs = blips(util=40.0)  # slice average a fifth of the max
    avgs = [12.0 if m else 0.0 for m in maxes]
    power = [157.0 if m else 70.0 for m in maxes]
    cells = squatter(maxes, avgs, power=power)
    assert KeepAliveDetector(POLICY).detect(cells) == []
    w = group_signals(cells).jobs["ml/squat"].window(3600, 2)
    share, diluted = burst_power_share(w, 400.0, 2.0) or (0.0, 0.0)
    assert abs(diluted - 157 / 400) < 1e-9 and abs(share - (70 + 87 / 0.3) / 400) < 1e-9
    # A ping that barely moves power stays a keep-alive: 74 W in the slice, 70 W idle, duty 0.2 -> 90 W.
    pings = squatter(*blips(), power=[74.0 if m else 70.0 for m in blips()[0]])
    [f] = KeepAliveDetector(POLICY).detect(pings)
    assert f.stop_needs_approval


def test_bursts_in_every_slice_are_not_judged_by_power_alone():
    """Gradient accumulation: 30 s of math (90 %) in every 5-minute slice reads 101 W of 400 W in each. No slice
    shows the idle draw, so power cannot say whether the bursts work; without the tensor pipe there is no finding
    (read as idle at its quietest slice, the bursts drew nothing and the job was stopped as a keep-alive)."""
    every = squatter([90.0] * N, [9.0] * N, tensor=None, power=[101.0] * N)
    assert KeepAliveDetector(POLICY).detect(every) == []
    # With the tensor pipe idle throughout, the DCGM counters show the bursts do no math: a keep-alive.
    [f] = KeepAliveDetector(POLICY).detect(squatter([90.0] * N, [9.0] * N, tensor=0.0, power=[101.0] * N))
    assert f.stop_needs_approval
    # An idle A100 elsewhere in the sweep shows what idle draws here (60 W): the bursts drew about
    # 60 + 41 / 0.1 = 470 W, real work; pings that lift the slice to 66 W drew about 120 W, a keep-alive.
    def beside_an_idle_gpu(power: float) -> Observation:
        obs = squatter([90.0] * N, [9.0] * N, tensor=None, power=[power] * N)
        free = gpu(None, [0.0] * N, 7, tensor=None, power=[60.0] * N)  # type: ignore[arg-type]
        return obs.model_copy(update={"gpus": [*obs.gpus, free]})

    assert KeepAliveDetector(POLICY).detect(beside_an_idle_gpu(101.0)) == []
    [f] = KeepAliveDetector(POLICY).detect(beside_an_idle_gpu(66.0))
    assert f.stop_needs_approval


def test_no_keepalive_without_the_whole_pattern():
    detector = KeepAliveDetector(POLICY)
    irregular = [0.0] * N
    for k in (13, 15, 20, 21):
        irregular[k] = 3.0
    assert detector.detect(squatter(irregular, [m / 5 for m in irregular])) == []  # not regular
    heavy, heavy_avg = blips(util=60.0)
    assert detector.detect(squatter(heavy, [m / 2 for m in heavy])) == []  # average above 10%: real bursts
    assert detector.detect(squatter(logs=progress("ml/squat", AT - timedelta(minutes=10)))) == []  # progressing
    assert detector.detect(squatter(logs=None)) == []  # log never read: no progress is not assumed
    assert detector.detect(squatter(net=25.0)) == []  # network input
    assert detector.detect(squatter(cpu=180.0)) == []  # busy CPU (e.g. CPU-side work between GPU steps)
    assert detector.detect(squatter(tensor=0.4)) == []  # the bursts do real math
    assert detector.detect(squatter(power=300.0)) == []
    assert detector.detect(squatter(tensor=None, power=None)) == []  # nothing can show the bursts do no work
    assert detector.detect(squatter(started=timedelta(minutes=50))) == []  # younger than the window
    off = parse_policy({"detectors": {"keepalive": {"enabled": False}}}, "test")
    assert KeepAliveDetector(off).detect(squatter()) == []


def test_power_or_tensor_alone_is_enough_to_show_the_bursts_do_no_work():
    assert len(KeepAliveDetector(POLICY).detect(squatter(tensor=None))) == 1  # power near idle
    assert len(KeepAliveDetector(POLICY).detect(squatter(power=None))) == 1  # tensor pipe near idle


def test_regular_bursts_shapes():
    def shape(busy: str):
        maxes = [3.0 if c == "#" else 0.0 for c in busy]
        return regular_bursts(maxes, [m / 5 for m in maxes], 2.0, 3)

    assert shape("#.#.#.#.#.#.") is not None and shape("#.#.#.#.#.#.").period == 2
    assert shape("#..#..#..#..").period == 3
    assert shape("..#...#..#...#").period == 4  # one slice of jitter
    assert shape("#.#.#.......") is not None  # three bursts are enough; the quiet tail ends the window
    assert shape("#.#.........") is None  # two bursts
    assert shape("##.##.##.##.") is None  # bursts as long as the pauses
    assert shape("#.#.....#.#.") is None  # irregular
    maxes = [3.0] * 12
    maxes[4] = None
    assert regular_bursts(maxes, maxes, 2.0, 3) is None  # an unknown slice


# --- idle from the start: no long-tail grace without a working history --------------------------------------

def two_blips(avg: float, *, started=timedelta(hours=2), gap_at: tuple[int, ...] = ()) -> Observation:
    """Two bursts (slices 0 and 10) long enough apart that their spacing would protect the pause since (13 slices):
    1.5 x a 9-slice gap = 13.5 > 13. `gap_at`: slices with no reading."""
    maxes: list[float | None] = [0.0] * N
    maxes[0] = maxes[10] = 5.0
    avgs = [avg if m else 0.0 for m in maxes]
    for k in gap_at:
        maxes[k] = avgs[k] = None
    series = [gpu("ml/nb", maxes, i, avg=avgs) for i in range(4)]
    started_at = None if started is None else AT - started
    return observe([job("ml/nb", started_at=started_at)], series, [io("ml/nb", N)],
                   {"ml/nb": LogProgress(job="ml/nb", lines=0)})


def test_a_job_that_never_did_material_work_gets_no_long_tail_grace():
    # 4 GPUs x 2 bursts x 0.5% x 5 minutes = 12 GPU-seconds over its whole life: never material.
    [f] = IdleGpuDetector(POLICY).detect(two_blips(0.5))
    assert f.kind == "idle" and f.since == AT - timedelta(minutes=65)


def stoppable(findings: list) -> list:
    """Findings that license a stop now: not held back by the job's long-tail grace (Finding.stop_after)."""
    return [f for f in findings if f.stop_after is None or f.stop_after <= AT]


def test_material_work_keeps_its_long_tail_grace():
    # 4 GPUs x 2 bursts x 5% x 5 minutes = 120 GPU-seconds: it worked, and its pauses protect it (from a stop; its
    # owner may be told, as the pause is longer than any it took).
    assert stoppable(IdleGpuDetector(POLICY).detect(two_blips(5.0))) == []
    looser = parse_policy({"detectors": {"longtail": {"material_gpu_seconds": 200}}}, "test")
    assert len(IdleGpuDetector(looser).detect(two_blips(5.0))) == 1


def test_never_seen_working_means_its_whole_life_was_seen():
    detect = IdleGpuDetector(POLICY).detect
    assert stoppable(detect(two_blips(0.5, started=None))) == []  # start unknown
    assert stoppable(detect(two_blips(0.5, started=timedelta(hours=3)))) == []  # older than the data
    # Most of its life unknown (slices 0-10): bursts of work 9 slices apart could hide there, protecting 13.5.
    assert stoppable(detect(two_blips(0.5, gap_at=tuple(range(11))))) == []
    # One gap can hide one burst at most, and blips set no rhythm: nothing to protect.
    assert len(stoppable(detect(two_blips(0.5, gap_at=(5,))))) == 1


def coarse_blips(avg: list[float | None]) -> Observation:
    """A 1-GPU job started 5 h ago: quiet for the last hour (fine slices), two 5% bursts in its coarse history
    (30-minute slices) 1.5 h apart, so its longest pause (1 h) would protect the hour it is quiet now."""
    maxes: list[float | None] = [0.0] * 10
    maxes[4] = maxes[7] = 5.0
    history = GpuHistory(job="ml/nb", node="n1", gpu=0, slice_s=1800.0, util_max=maxes, util_min=list(maxes),
                         util_avg=avg, samples=[60] * 10, expected=60)
    fine = [gpu("ml/nb", [0.0] * 12, 0)]
    return observe([job("ml/nb", gpus=1, started_at=AT - timedelta(hours=5))], fine, [io("ml/nb", 12)],
                   {"ml/nb": LogProgress(job="ml/nb", lines=0)}, history=[history], history_slice_s=1800.0)


def test_coarse_history_bounds_work_by_its_average_or_else_its_max():
    tiny = [0.0] * 10
    tiny[4] = tiny[7] = 0.5  # 2 x 0.5% x 30 min = 18 GPU-seconds: never material
    [f] = IdleGpuDetector(POLICY).detect(coarse_blips(tiny))
    assert f.since == AT - timedelta(hours=1)
    # No average (Prometheus' coarse history reads none): each burst may have held 5% x 30 min = 90 GPU-s.
    assert IdleGpuDetector(POLICY).detect(coarse_blips([])) == []


def test_a_keepalive_stretch_begins_after_the_last_real_work():
    # 4 hours: keep-alive pings, an hour of real work at 90% (2 h to 1 h ago), then pings again. The stretch began
    # when the work ended: a warning sent during the first pings announced that lull, not this one.
    n = 48
    maxes = [3.0 if k % 2 else 0.0 for k in range(n)]
    maxes[24:36] = [90.0] * 12
    avgs = [m / 5 if m < 50 else m for m in maxes]
    series = [gpu("ml/squat", maxes, i, avg=avgs, tensor=0.0, power=72.0) for i in range(2)]
    obs = observe([job("ml/squat", gpus=2, started_at=AT - timedelta(hours=4))], series, [io("ml/squat", n)],
                  {"ml/squat": LogProgress(job="ml/squat", lines=0)})
    [f] = KeepAliveDetector(POLICY).detect(obs)
    assert f.since == AT - timedelta(hours=1)
    # Pings all along: the stretch is the whole life on record.
    calm = [gpu("ml/squat", [3.0 if k % 2 else 0.0 for k in range(n)], i,
                avg=[0.6 if k % 2 else 0.0 for k in range(n)], tensor=0.0, power=72.0) for i in range(2)]
    obs = observe([job("ml/squat", gpus=2, started_at=AT - timedelta(hours=4))], calm, [io("ml/squat", n)],
                  {"ml/squat": LogProgress(job="ml/squat", lines=0)})
    assert KeepAliveDetector(POLICY).detect(obs)[0].since == AT - timedelta(hours=4)


def test_a_zombie_that_logged_every_20_minutes_is_still_seen_when_its_notice_runs_out():
    # Progress every 20 minutes until 3 hours ago; hung since. Flagged at 3 x its gap (60 minutes), warned then:
    # when the hour of notice is over, the log the sweep reads (deps.log_span) still holds its last progress line.
    from agent.graph.deps import log_span
    from core.cluster import LogLine
    from tools.log_progress import analyse_log

    last = AT - timedelta(hours=3)
    lines = [LogLine(at=last - timedelta(minutes=20 * k), text=f"step {1000 - k} loss {2.0 + k / 100:.2f}")
             for k in range(12)][::-1]
    span = timedelta(seconds=log_span(POLICY))

    def zombie_at(minutes: int) -> bool:
        at = last + timedelta(minutes=minutes)
        logs = analyse_log("ml/train", [x for x in lines if at - span <= x.at <= at], at)
        series = [gpu("ml/train", [100.0] * N, i, **HUNG) for i in range(4)]
        obs = observe([job(gpus=4, started_at=AT - timedelta(hours=8))], series, [io("ml/train", N, cpu=400.0)],
                      {"ml/train": logs}).model_copy(update={"at": at})
        return bool(ZombieDetector(POLICY).detect(obs))

    assert not zombie_at(55) and zombie_at(65) and zombie_at(125) and zombie_at(130)
    # Its stop may wait for a person (a force stop's approval): the log read covers as long as that can count.
    assert zombie_at(4 * 60) and span.total_seconds() >= stretch_span(POLICY)


def test_a_keepalive_stretch_start_stays_put_and_sees_work_in_maxima_and_minima():
    # Pings (max 40%, avg 4%) all along, one longer ping (max 90%, avg 9%) before the window: no work anywhere.
    # The ceiling is twice the detector's own level at least (10%), not twice this window's busiest slice, so a
    # quieter window never turns an old ping into "work" and moves the stretch's start (a warning would go stale).
    maxes = [40.0 if k % 2 else 0.0 for k in range(24)]
    avgs = [4.0 if k % 2 else 0.0 for k in range(24)]
    maxes[5], avgs[5] = 90.0, 9.0
    series = [gpu("ml/nb", maxes, 0, avg=avgs, tensor=0.0, power=72.0)]
    obs = observe([job("ml/nb", gpus=1, started_at=AT - timedelta(hours=2))], series, [io("ml/nb", 24)],
                  {"ml/nb": LogProgress(job="ml/nb", lines=0)})
    assert KeepAliveDetector(POLICY).detect(obs)[0].since == AT - timedelta(hours=2)
    # Prometheus keeps no coarse average: an hour of real work (95% peaks) 4.5 h ago is seen by its peak.
    pings = [gpu("ml/nb", [60.0 if k % 2 else 0.0 for k in range(24)], 0,
                 avg=[6.0 if k % 2 else 0.0 for k in range(24)], tensor=0.0, power=72.0)]
    coarse = [60.0] * 12
    coarse[3] = coarse[4] = 95.0
    history = [GpuHistory(job="ml/nb", node="n1", gpu=0, slice_s=1800.0, util_max=coarse, util_min=[0.0] * 12,
                          samples=[60] * 12, expected=60)]
    obs = observe([job("ml/nb", gpus=1, started_at=AT - timedelta(hours=6))], pings, [io("ml/nb", 24)],
                  {"ml/nb": LogProgress(job="ml/nb", lines=0)}, history=history, history_slice_s=1800.0)
    [f] = KeepAliveDetector(POLICY).detect(obs)
    assert f.since == AT - timedelta(hours=3.5)
