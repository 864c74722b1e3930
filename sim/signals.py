"""What a simulated job emits at one instant: resolved phases, cheap deterministic noise, GPU formulas."""

from __future__ import annotations

import bisect
import math
import zlib
from dataclasses import dataclass

from core.gpus import board_power_w
from sim.scenario import Job, Range

_MASK = 0xFFFFFFFF
IDLE_FB_MB = 500.0  # what a CUDA context holds on a GPU the job does not use
DEFAULT_LOG_EVERY = {"loss": 30.0, "lines": 60.0, "silent": 60.0}
ACTIVITY_KEYS = ("sm_active", "tensor_active", "dram_active", "power_w", "nvlink_mbps", "pcie_mbps")


def seed_of(text: str) -> int:
    """A stable 32-bit seed (Python's hash() is salted per process)."""
    return zlib.crc32(text.encode("utf-8"))


def unit_noise(seed: int, a: int, b: int) -> float:
    """Deterministic value in [0, 1) for (seed, a, b): a few integer ops instead of a Random per sample."""
    x = (seed ^ (a * 0x9E3779B1) ^ (b * 0x85EBCA77)) & _MASK
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _MASK
    x ^= x >> 15
    x = (x * 0x846CA68B) & _MASK
    x ^= x >> 16
    return x / 4294967296.0


def pick(value: Range, seed: int, a: int, b: int) -> float:
    """A number as written, or a point in [low, high] that depends only on (seed, a, b)."""
    if isinstance(value, tuple):
        low, high = value
        return low + (high - low) * unit_noise(seed, a, b)
    return float(value)


IDLE_POWER_SHARE = 0.175  # a GPU holding a CUDA context and running nothing draws this share of its board power
SPIN_POWER_SHARE = 0.06  # a spinning kernel (a hung collective's poll, a keep-alive loop) adds this share at 100 %
DEFAULT_BOARD_W = 400.0  # an A100's board power: a GPU model the power table does not know is drawn as one
SPIN_CPU_PCT = 5.0  # launching real kernels takes host CPU: a busy GPU fed by less is taken to spin
NVLINK_MBPS = 20_000.0  # a multi-GPU job's gradient exchange per GPU at full utilisation (MB/s, TX + RX)
PCIE_MBPS = 1_000.0  # input batches copied to a GPU at full utilisation (MB/s)
# A GPU's activity: SM, tensor-pipe and DRAM ratios, power (W), NVLink and PCIe (MB/s, TX + RX)
Activity = tuple[float, float, float, float, float, float]


def board_w(gpu_model: str) -> float:
    """The node's GPU board power (core/gpus.py), an A100's where the model is unknown."""
    return board_power_w(gpu_model) or DEFAULT_BOARD_W


def power_w(util: float, board: float = DEFAULT_BOARD_W) -> float:
    """Power at `util` % of real work: an idle GPU's share of the board, rising to the whole board at 100 % (a T4 idles
    at 12 W and an H100 at 122 W, not all at an A100's 70 W)."""
    idle = IDLE_POWER_SHARE * board
    return idle + (board - idle) * min(max(util, 0.0), 100.0) / 100.0


def derived_activity(util: float, work: str, multi_gpu: bool, board: float = DEFAULT_BOARD_W) -> Activity:
    """What a GPU at `util` % does when a phase says nothing more: real kernels do math, draw power and (on a
    multi-GPU job) exchange gradients over NVLink; a spinning kernel (a hung collective's, a keep-alive loop's)
    keeps GPU_UTIL up with a few SMs polling, no tensor or memory traffic and near-idle power."""
    u = min(max(util, 0.0), 100.0) / 100.0
    if work == "spin":
        return 0.12 * u, 0.0, 0.0, (IDLE_POWER_SHARE + SPIN_POWER_SHARE * u) * board, 0.0, 0.0
    return 0.9 * u, 0.5 * u, 0.4 * u, power_w(util, board), NVLINK_MBPS * u if multi_gpu else 0.0, PCIE_MBPS * u


def temp_c(util: float) -> float:
    return 35.0 + 0.45 * min(max(util, 0.0), 100.0)


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One phase with every key filled in (inherited or default), as seconds from the job's start."""

    start: float
    end: float  # math.inf for the last phase
    gpu_util: Range
    active_gpus: int
    gpu_mem_gb: Range
    cpu_pct: Range
    net_rx_mbps: Range
    disk_read_mbps: Range
    log: str
    log_every: float
    lines: tuple[str, ...]
    metrics: str
    gpu_work: str = "real"  # real | spin (given, or derived from the process CPU)
    # Given activity (None: derived from gpu_util and gpu_work): SM, tensor, DRAM, power, NVLink, PCIe
    activity: tuple[Range | None, ...] = (None,) * 6
    net_tx_mbps: Range = 0.0
    # Serving (extension): requests/s and mean end-to-end latency (s); None = the job serves no vLLM metrics
    requests_per_s: Range | None = None
    latency_s: Range | None = None
    disk_write_mbps: Range = 0.0  # extension: a phase writes only where it says so (a checkpoint save, a staging copy)
    idle_gpu_mem_gb: Range | None = None  # extension: memory a GPU beyond active_gpus holds (None: a CUDA context)


def resolve_phases(job: Job) -> list[PhaseSpan]:
    """Fill each phase's missing keys from the phase before; the last phase runs until the job ends."""
    cur: dict = {
        "gpu_util": 0.0, "active_gpus": job.gpus, "gpu_mem_gb": 0.0, "cpu_pct": 0.0, "net_rx_mbps": 0.0, "net_tx_mbps": 0.0,
        "disk_read_mbps": 0.0, "disk_write_mbps": 0.0, "log": "silent", "log_every": None, "lines": (), "metrics": "ok",
        "gpu_work": None, **{key: None for key in ACTIVITY_KEYS}, "requests_per_s": None, "latency_s": None,
        "idle_gpu_mem_gb": None,
    }
    spans: list[PhaseSpan] = []
    at = 0.0
    phases = job.phases or []
    for i, phase in enumerate(phases):
        for key in cur:
            value = getattr(phase, key)
            if value is not None:
                cur[key] = tuple(value) if key == "lines" else value
        last = i == len(phases) - 1 or phase.duration is None
        end = math.inf if last or phase.duration is None else at + phase.duration
        every = cur["log_every"] or DEFAULT_LOG_EVERY[cur["log"]]
        spans.append(PhaseSpan(start=at, end=end, gpu_util=cur["gpu_util"],
                               active_gpus=min(cur["active_gpus"], job.gpus), gpu_mem_gb=cur["gpu_mem_gb"],
                               cpu_pct=cur["cpu_pct"], net_rx_mbps=cur["net_rx_mbps"],
                               disk_read_mbps=cur["disk_read_mbps"], log=cur["log"], log_every=max(every, 1.0),
                               lines=cur["lines"], metrics=cur["metrics"], gpu_work=_work(cur),
                               activity=tuple(cur[key] for key in ACTIVITY_KEYS),
                               net_tx_mbps=cur["net_tx_mbps"], requests_per_s=cur["requests_per_s"],
                               latency_s=cur["latency_s"], disk_write_mbps=cur["disk_write_mbps"],
                               idle_gpu_mem_gb=cur["idle_gpu_mem_gb"]))
        if last:
            break
        at = end
    if not spans:
        spans.append(PhaseSpan(0.0, math.inf, 0.0, job.gpus, 0.0, 0.0, 0.0, 0.0, "silent", 60.0, (), "ok"))
    return spans


def _work(phase: dict) -> str:
    if phase["gpu_work"] is not None:
        return str(phase["gpu_work"])
    cpu = phase["cpu_pct"]
    return "spin" if (cpu[1] if isinstance(cpu, tuple) else cpu) < SPIN_CPU_PCT else "real"


class JobSignals:
    """A job's per-sample values as pure functions of (GPU index, sample index, time since start)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.phases = resolve_phases(job)
        self._starts = [p.start for p in self.phases]
        base = seed_of(job.id)
        self._util_seed = base ^ 0x1111
        self._mem_seed = base ^ 0x2222
        self._io_seed = base ^ 0x3333
        self._activity_seed = base ^ 0x4444
        self._serving_seed = base ^ 0x5555

    def phase_at(self, rel: float) -> PhaseSpan:
        return self.phases[max(bisect.bisect_right(self._starts, rel) - 1, 0)]

    def gpu(self, phase: PhaseSpan, gpu: int, k: int) -> tuple[float, float]:
        """(utilisation %, framebuffer used MB) of the job's gpu-th GPU at sample k."""
        if gpu >= phase.active_gpus:
            held = phase.idle_gpu_mem_gb
            return 0.0, IDLE_FB_MB if held is None else pick(held, self._mem_seed, gpu, k) * 1024.0
        util = pick(phase.gpu_util, self._util_seed, gpu, k)
        return util, pick(phase.gpu_mem_gb, self._mem_seed, gpu, k) * 1024.0

    def activity(self, phase: PhaseSpan, gpu: int, k: int, util: float, board: float = DEFAULT_BOARD_W) -> Activity:
        """The gpu-th GPU's activity at sample k, given its utilisation then (`board`: its board power, W): written
        values, else derived."""
        if gpu >= phase.active_gpus:
            return derived_activity(0.0, "real", False, board)
        derived = derived_activity(util, phase.gpu_work, phase.active_gpus >= 2, board)
        seed = self._activity_seed
        return tuple(d if given is None else pick(given, seed, gpu * 8 + i, k)  # type: ignore[return-value]
                     for i, (d, given) in enumerate(zip(derived, phase.activity, strict=True)))

    def io(self, phase: PhaseSpan, k: int) -> tuple[float, float, float, float, float]:
        """(process CPU % of a core, network receive MB/s, disk read MB/s, network transmit MB/s, disk write MB/s)
        at sample k."""
        seed = self._io_seed
        return (pick(phase.cpu_pct, seed, 1, k), pick(phase.net_rx_mbps, seed, 2, k),
                pick(phase.disk_read_mbps, seed, 3, k), pick(phase.net_tx_mbps, seed, 4, k),
                pick(phase.disk_write_mbps, seed, 5, k))

    def serving(self, phase: PhaseSpan, k: int) -> tuple[float, float] | None:
        """(requests/s, mean end-to-end latency s) at sample k; None when the phase serves no vLLM metrics."""
        if phase.requests_per_s is None and phase.latency_s is None:
            return None
        seed = self._serving_seed
        rps = pick(phase.requests_per_s, seed, 1, k) if phase.requests_per_s is not None else 0.0
        latency = pick(phase.latency_s, seed, 2, k) if phase.latency_s is not None else 1.0
        return rps, latency
