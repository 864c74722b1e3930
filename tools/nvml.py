"""NvmlCollector: reads a node's GPUs through NVML (pynvml) for single-server or DaemonSet use.

Utilisation, memory, power, temperature, XID critical errors (non-blocking event polling), the processes on
each GPU mapped to their job, and a dcgm-exporter-compatible rendering so the node can itself be scraped.
`pynvml` is imported only when a collector opens without an injected module.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools.pid_jobs import PidJobs, ProcessOwner

MIB = 1024 * 1024


@dataclass(slots=True)
class ProcessReading:
    pid: int
    used_mb: float | None
    sm_util: float | None  # % of the GPU's SMs this process used in the last sample, when NVML reports it
    owner: ProcessOwner


@dataclass(slots=True)
class GpuReading:
    """One GPU at one instant; None = NVML could not tell (unsupported or failed), never a zero."""

    index: int
    uuid: str
    model: str
    at: float
    util: float | None
    mem_used_mb: float | None
    mem_total_mb: float | None
    power_w: float | None
    temp_c: float | None
    xid: int = 0  # last XID critical error seen on this GPU since the collector opened
    xid_at: float | None = None
    processes: list[ProcessReading] = field(default_factory=list)

    def owner(self) -> ProcessOwner | None:
        """The job of the process holding the most memory on this GPU (None when no job is known)."""
        known = [p for p in self.processes if p.owner.pod_uid or p.owner.slurm_job]
        return max(known, key=lambda p: p.used_mb or 0.0).owner if known else None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlCollector:
    """Open once, then call read() as often as needed; close() releases NVML."""

    def __init__(self, nvml: Any = None, *, pid_jobs: PidJobs | None = None, hostname: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._nvml = nvml
        self.pid_jobs = pid_jobs or PidJobs()
        self.hostname = hostname or socket.gethostname()
        self.clock = clock
        self._handles: list[Any] = []
        self._events: Any = None
        self._xids: dict[int, tuple[int, float]] = {}
        self._proc_ts: dict[int, int] = {}
        self.driver = ""

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            import pynvml  # lazily: importing the package must not need a GPU or its driver

            self._nvml = pynvml
        return self._nvml

    def _try(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def open(self) -> NvmlCollector:
        nv = self.nvml
        nv.nvmlInit()
        self.driver = _text(self._try(nv.nvmlSystemGetDriverVersion) or "")
        self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        self._events = self._try(nv.nvmlEventSetCreate)
        if self._events is not None:
            for handle in self._handles:  # some GPUs (and vGPUs) do not support events: skip them
                self._try(nv.nvmlDeviceRegisterEvents, handle, nv.nvmlEventTypeXidCriticalError, self._events)
        return self

    def close(self) -> None:
        if self._events is not None:
            self._try(self.nvml.nvmlEventSetFree, self._events)
            self._events = None
        if self._handles:
            self._try(self.nvml.nvmlShutdown)
            self._handles = []

    def __enter__(self) -> NvmlCollector:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def poll_xids(self) -> None:
        """Drain pending XID events without blocking (timeout 0)."""
        nv = self.nvml
        if self._events is None:
            return
        for _ in range(1000):  # a storm of XIDs must not stall a read
            try:
                event = nv.nvmlEventSetWait(self._events, 0)
            except nv.NVMLError:
                return  # NVML_ERROR_TIMEOUT: nothing pending
            if event.eventType & nv.nvmlEventTypeXidCriticalError:
                index = next((i for i, h in enumerate(self._handles) if h == event.device), None)
                if index is not None:
                    self._xids[index] = (int(event.eventData), self.clock())

    def _processes(self, index: int, handle: Any) -> list[ProcessReading]:
        nv = self.nvml
        running = self._try(nv.nvmlDeviceGetComputeRunningProcesses, handle) or []
        sm: dict[int, float] = {}
        samples = self._try(nv.nvmlDeviceGetProcessUtilization, handle, self._proc_ts.get(index, 0)) or []
        for s in samples:
            sm[int(s.pid)] = float(s.smUtil)
            self._proc_ts[index] = max(self._proc_ts.get(index, 0), int(s.timeStamp))
        out = []
        for p in running:
            used = getattr(p, "usedGpuMemory", None)
            out.append(ProcessReading(pid=int(p.pid), used_mb=used / MIB if isinstance(used, int) else None,
                                      sm_util=sm.get(int(p.pid)), owner=self.pid_jobs.owner(int(p.pid))))
        return out

    def read(self) -> list[GpuReading]:
        """Every GPU now; opens NVML on first use."""
        if not self._handles:
            self.open()
        nv = self.nvml
        self.poll_xids()
        now = self.clock()
        out = []
        for index, h in enumerate(self._handles):
            util = self._try(nv.nvmlDeviceGetUtilizationRates, h)
            mem = self._try(nv.nvmlDeviceGetMemoryInfo, h)
            power = self._try(nv.nvmlDeviceGetPowerUsage, h)  # milliwatts
            temp = self._try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            xid, xid_at = self._xids.get(index, (0, None))
            out.append(GpuReading(
                index=index, uuid=_text(self._try(nv.nvmlDeviceGetUUID, h) or ""),
                model=_text(self._try(nv.nvmlDeviceGetName, h) or ""), at=now,
                util=float(util.gpu) if util is not None and 0 <= util.gpu <= 100 else None,
                mem_used_mb=mem.used / MIB if mem is not None else None,
                mem_total_mb=mem.total / MIB if mem is not None else None,
                power_w=power / 1000.0 if power is not None else None,
                temp_c=float(temp) if temp is not None else None,
                xid=xid, xid_at=xid_at, processes=self._processes(index, h),
            ))
        return out

    def render(self, readings: list[GpuReading] | None = None) -> str:
        """The readings as dcgm-exporter's /metrics text (same metric names and labels)."""
        from tools.nvml_render import render_dcgm

        return render_dcgm(readings if readings is not None else self.read(), self.hostname)
