"""What a job's GPUs really did over a window beyond GPU_UTIL: DCGM profiling ratios, board power, NVLink/PCIe.

GPU_UTIL only says a kernel was resident: a hung collective's spinning kernel and a keep-alive loop both keep it
up. These fields say whether the GPU did math, moved memory, drew power or talked to its peers. A field the
exporter does not report is unknown and judges nothing, in either direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from agent.config.policy import ActivityRule
from agent.detectors.history import align_end
from agent.detectors.signals import JobSeries, JobWindow
from core.gpus import board_power_w, is_mig_instance

MB = 1e6

def _window_max(window: JobWindow, column: str, min_coverage: float, scale: float = 1.0) -> tuple[float | None, bool]:
    """(the highest slice average of one field over the window's GPUs that report it, whether every GPU reports it
    in at least `min_coverage` of the slices). (None, False) when no GPU reports it."""
    n = window.slices
    top: float | None = None
    complete = bool(window.series.gpus)
    for g in window.series.gpus:
        values = getattr(g, column)
        known = [v for v in align_end(values, n) if v is not None] if values else []
        complete = complete and len(known) >= min_coverage * n
        if known:
            high = max(known) / scale
            top = high if top is None else max(top, high)
    return top, complete


@dataclass(frozen=True, slots=True)
class GpuActivity:
    """Highest slice averages over a job's GPUs in a window (None = no GPU reports it), and which fields every
    GPU reports: only those can say the GPUs are near idle; any reported value can say they work."""

    sm: float | None
    tensor: float | None
    dram: float | None
    power_w: float | None
    board_w: float | None
    nvlink_mbps: float | None
    pcie_mbps: float | None
    complete: frozenset[str] = frozenset()

    @classmethod
    def of(cls, window: JobWindow, min_coverage: float) -> GpuActivity:
        boards = {board_power_w(g.model) for g in window.series.gpus}
        fields = {"sm": ("sm_active_avg", 1.0), "tensor": ("tensor_active_avg", 1.0),
                  "dram": ("dram_active_avg", 1.0), "power_w": ("power_w_slices", 1.0),
                  "nvlink_mbps": ("nvlink_bytes_avg", MB), "pcie_mbps": ("pcie_bytes_avg", MB)}
        values: dict[str, float | None] = {}
        complete = set()
        for name, (column, scale) in fields.items():
            values[name], whole = _window_max(window, column, min_coverage, scale)
            if whole:
                complete.add(name)
        # Mixed or unknown models: power is not judged.
        return cls(**values, board_w=boards.pop() if len(boards) == 1 else None, complete=frozenset(complete))

    @property
    def profiled(self) -> bool:
        """Every GPU of the job reports DCGM profiling activity (SM, tensor or DRAM) over the window."""
        return bool(self.complete & {"sm", "tensor", "dram"})

    @property
    def interconnect_known(self) -> bool:
        return bool(self.complete & {"nvlink_mbps", "pcie_mbps"})

    @property
    def tensor_known(self) -> bool:
        return "tensor" in self.complete

    @property
    def power_share(self) -> float | None:
        """Highest power as a share of the model's board power, when every GPU reports power and the model is
        known; None otherwise (then power cannot say the GPUs are near idle)."""
        if "power_w" not in self.complete or self.power_w is None or not self.board_w:
            return None
        return self.power_w / self.board_w

    def real_work(self, rule: ActivityRule) -> list[str]:
        """Each known signal that shows real work (empty: none does, or none is known)."""
        out = []
        for name, value, limit in (("SM active", self.sm, rule.sm_active_max),
                                   ("tensor pipe", self.tensor, rule.tensor_active_max),
                                   ("DRAM active", self.dram, rule.dram_active_max)):
            if value is not None and value > limit:
                out.append(f"{name} {value:.0%} > {limit:.0%}")
        share = self.power_w / self.board_w if self.power_w is not None and self.board_w else None
        if share is not None and share > rule.idle_power_share:
            out.append(f"power {self.power_w:.0f} W = {share:.0%} of {self.board_w:.0f} W > {rule.idle_power_share:.0%}")
        for name, mbps in (("NVLink", self.nvlink_mbps), ("PCIe", self.pcie_mbps)):
            if mbps is not None and mbps > rule.interconnect_max_mbps:
                out.append(f"{name} {mbps:.1f} MB/s > {rule.interconnect_max_mbps:g} MB/s")
        # SM activity counts resident blocks, and a polling kernel is resident (two stuck NCCL communicators read
        # 30-40 %): alone, at an idle GPU's draw, it is a spin, not math. Real math shows in the pipes, in memory
        # traffic or in power.
        idle_draw = self.power_share is not None and self.power_share <= rule.idle_draw_share
        if len(out) == 1 and out[0].startswith("SM active") and idle_draw:
            return []
        return out

    def doubt(self, rule: ActivityRule) -> tuple[str, str] | None:
        """Why a hung-job judgement on these signals is not enough for a stop without a person; None when the GPU's
        own counters (DCGM profiling) or a power reading at an idle GPU's draw say it idles. Interconnect silence
        says nothing about a single-GPU job, and power above the idle draw is where a hung collective's spin and
        memory-bound work (generation, decoding) overlap."""
        if self.profiled:
            return None
        share = self.power_share
        if share is None:
            return ("no DCGM profiling fields and no power reading: nothing on the GPU's side shows it idle, and a "
                    "memory-bound job with a quiet log and no I/O looks the same",
                    "没有 DCGM 性能剖析指标，也没有功耗读数：GPU 侧没有信号表明它空闲，日志安静、无 I/O 的访存密集型作业"
                    "看起来一样")
        if share > rule.idle_draw_share:
            return (f"judged without DCGM profiling fields, and power ({share:.0%} of board power) is above an idle "
                    f"GPU's draw ({rule.idle_draw_share:.0%}), where a hung collective's spin and memory-bound work "
                    f"overlap",
                    f"未能依据 DCGM 性能剖析指标判断，且功耗（额定功率的 {share:.0%}）高于空闲 GPU 的功耗"
                    f"（{rule.idle_draw_share:.0%}）：在这一区间，挂起的集合通信空转与访存密集型工作无法区分")
        return None

    def signals(self) -> list[str]:
        """The signals beyond utilisation this judgement could read (for the evidence: what it was based on)."""
        out = []
        if self.profiled:
            out.append("DCGM profiling (SM/tensor/DRAM activity)")
        if self.interconnect_known:
            out.append("NVLink/PCIe traffic")
        if self.power_share is not None:
            out.append("power")
        return out

    def summary(self) -> str:
        """The numbers, in the operator's words; unknown fields are named as such."""
        parts = []
        shown = [f"{n} max {v:.0%}" for n, v in (("SM active", self.sm), ("tensor pipe", self.tensor),
                                                  ("DRAM active", self.dram)) if v is not None]
        parts.append(", ".join(shown) if shown else "no DCGM profiling fields")
        if self.power_w is not None:
            board = self.board_w
            of = f" ({self.power_w / board:.0%} of {board:.0f} W)" if board else " (GPU model's board power unknown)"
            parts.append(f"power max {self.power_w:.0f} W{of}")
        if self.nvlink_mbps is not None or self.pcie_mbps is not None:
            links = [f"{n} max {v:.1f} MB/s" for n, v in (("NVLink", self.nvlink_mbps), ("PCIe", self.pcie_mbps))
                     if v is not None]
            parts.append(", ".join(links))
        return "; ".join(parts)

    def metrics(self) -> dict[str, float]:
        """The known figures as finding metrics (the Chinese evidence is rendered from them)."""
        pairs = {"sm_active_max": self.sm, "tensor_active_max": self.tensor, "dram_active_max": self.dram,
                 "power_max_w": self.power_w, "board_power_w": self.board_w,
                 "nvlink_max_mbps": self.nvlink_mbps, "pcie_max_mbps": self.pcie_mbps}
        return {k: round(v, 4) for k, v in pairs.items() if v is not None}


def last_real_work(series: JobSeries, rule: ActivityRule) -> tuple[datetime, str] | None:
    """(end of the newest slice in which a GPU of the job did real work by a field beyond GPU_UTIL, what showed it),
    else None. GPU_UTIL counts kernels only: a video encode (NVENC/NVDEC), copies over PCIe or NVLink, and the power
    they draw are work it does not see. The fields that clear a hang clear idleness too: the tensor pipe and DRAM
    beyond their idle lines, power above the near-idle share of a known board, interconnect traffic above its line.
    SM activity alone is not work (a polling kernel is resident)."""
    boards = {board_power_w(g.model) for g in series.gpus}
    board = boards.pop() if len(boards) == 1 else None
    n = series.length
    newest: tuple[int, str] | None = None
    for g in series.gpus:
        columns = [(g.tensor_active_avg, rule.tensor_active_max, 1.0, "tensor pipe"),
                   (g.dram_active_avg, rule.dram_active_max, 1.0, "DRAM activity"),
                   (g.pcie_bytes_avg, rule.interconnect_max_mbps, MB, "PCIe traffic"),
                   (g.nvlink_bytes_avg, rule.interconnect_max_mbps, MB, "NVLink traffic")]
        if is_mig_instance(g.gpu, g.model):  # the parent GPU's power and traffic, its other instances' work too
            columns = columns[:2]
        elif board:
            columns.append((g.power_w_slices, rule.idle_power_share * board, 1.0, "power"))
        for values, limit, scale, name in columns:
            if not values:
                continue
            for back, value in enumerate(reversed(align_end(values, n))):
                if newest is not None and back >= newest[0]:
                    break
                if value is not None and value / scale > limit:
                    newest = (back, name)
                    break
    if newest is None:
        return None
    return series.at - timedelta(seconds=newest[0] * series.slice_s), newest[1]
