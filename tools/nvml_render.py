"""NVML readings as dcgm-exporter text: same metric names and labels, so Prometheus can scrape a node directly."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.nvml import GpuReading

_METRICS = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda r: r.util),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda r: r.mem_used_mb),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
     lambda r: r.mem_total_mb - r.mem_used_mb if r.mem_total_mb is not None and r.mem_used_mb is not None else None),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda r: r.power_w),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda r: r.temp_c),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", lambda r: float(r.xid)),
]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels_for(reading: GpuReading, hostname: str) -> str:
    pairs = [("gpu", str(reading.index)), ("UUID", reading.uuid), ("device", f"nvidia{reading.index}"),
             ("modelName", reading.model), ("Hostname", hostname)]
    owner = reading.owner()
    if owner is not None and owner.pod:
        namespace, _, pod = owner.pod.partition("/")
        pairs += [("namespace", namespace), ("pod", pod)]
    elif owner is not None and owner.slurm_job:
        pairs.append(("hpc_job", owner.slurm_job))
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def render_dcgm(readings: list[GpuReading], hostname: str) -> str:
    """A value NVML could not read is left out (a gap), never written as 0."""
    out: list[str] = []
    rows = [(labels_for(r, hostname), r) for r in readings]
    for name, help_text, value_of in _METRICS:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} gauge")
        for labels, r in rows:
            value = value_of(r)
            if value is not None:
                out.append(f"{name}{{{labels}}} {value:.6g}")
    return "\n".join(out) + "\n"
