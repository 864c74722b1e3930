"""The current instant's GPU metrics as dcgm-exporter would serve them (Prometheus text exposition)."""

from __future__ import annotations

import math
import re

from sim.lifecycle import Lifecycle
from sim.metrics import gpu_sample

METRICS = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
]
# DCP profiling fields, as dcgm-exporter's dcp-metrics-included.csv names and describes them; a node whose
# exporter has no profiling (`profiling: false`) serves none of them.
PROFILING = [
    ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "The rate of data transmitted over NVLink, not including protocol headers, "
                                     "in bytes per second."),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "The rate of data received over NVLink, not including protocol headers, "
                                     "in bytes per second."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol "
                                   "headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol "
                                   "headers and data payloads - in bytes per second."),
]
_INTEGER = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_XID_ERRORS"}


# A MIG pool's gpu_model names the instance profile ("A100-SXM4-80GB MIG 1g.10gb"): each device the scheduler
# sees is one MIG instance of a physical GPU. Per compute-slice count: instances per GPU (7-slice A100/H100) and
# the first GPU instance id NVML gives that profile (1g.10gb instances are 7..13 on an A100).
_MIG_PROFILE = re.compile(r"\bMIG\b.*?\b((\d+)g\.(\d+)gb)\b", re.IGNORECASE)
_MIG_PER_GPU = {1: 7, 2: 3, 3: 2, 4: 1, 7: 1}
_MIG_FIRST_ID = {1: 7, 2: 3, 3: 1, 4: 0, 7: 0}


def mig_layout(gpu_model: str) -> tuple[str, int, int, float, str] | None:
    """(profile, instances per GPU, first instance id, instance memory MiB, parent model) for a MIG model name;
    None for a whole GPU."""
    m = _MIG_PROFILE.search(gpu_model)
    if m is None:
        return None
    slices, mem_gb = int(m.group(2)), int(m.group(3))
    parent = gpu_model[:m.start()].strip(" -_") or gpu_model
    return (m.group(1).lower(), _MIG_PER_GPU.get(slices, max(7 // max(slices, 1), 1)), _MIG_FIRST_ID.get(slices, 0),
            mem_gb * 1024.0, parent)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(name: str, value: float) -> str:
    if name in _INTEGER:
        return str(int(round(value)))
    return f"{value:.6g}"


def render(lifecycle: Lifecycle, now: float, step: float) -> str:
    """One scrape at `now`; GPUs of a job in a `metrics: missing` phase are left out.

    A MIG pool's devices are rendered as dcgm-exporter renders MIG instances: the parent GPU's `gpu`, `UUID`,
    `device` and model, with GPU_I_PROFILE and GPU_I_ID; DCGM_FI_DEV_GPU_UTIL reads 0 (NVIDIA/dcgm-exporter#216)
    and DCGM_FI_PROF_GR_ENGINE_ACTIVE carries the instance's real activity.
    """
    k = math.floor(now / step + 1e-6)
    rows: list[tuple[str, dict[str, float]]] = []
    for node in lifecycle.nodes:
        mig = mig_layout(node.gpu_model)
        for g in range(node.gpus):
            run = lifecycle.occupant(node, g, now)
            sample = gpu_sample(run, node, g, now, k)
            if sample is None:
                continue
            util, used, temp, power, xid, _, profile = sample
            if mig is None:
                labels = [("gpu", str(g)), ("UUID", node.uuid(g)), ("device", f"nvidia{g}"),
                          ("modelName", node.gpu_model), ("Hostname", node.name)]
                fb_total, util_field = node.fb_total_mb(), util
            else:
                mig_profile, per_gpu, first_id, fb_total, parent_model = mig
                parent = g // per_gpu
                labels = [("gpu", str(parent)), ("UUID", node.uuid(parent)), ("device", f"nvidia{parent}"),
                          ("modelName", parent_model), ("GPU_I_PROFILE", mig_profile),
                          ("GPU_I_ID", str(first_id + g % per_gpu)), ("Hostname", node.name)]
                util_field = 0.0  # what dcgm-exporter reports for a MIG instance, however busy
            if run is not None and run.job.scheduler == "kubernetes":
                labels += [("container", "main"), ("namespace", run.job.namespace), ("pod", run.job.name)]
            elif run is not None:
                labels.append(("hpc_job", run.job.name))
            text = ",".join(f'{key}="{_escape(value)}"' for key, value in labels)
            values = {
                "DCGM_FI_DEV_GPU_UTIL": util_field,
                "DCGM_FI_DEV_FB_FREE": max(fb_total - used, 0.0),
                "DCGM_FI_DEV_FB_USED": used,
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util / 100.0,
                "DCGM_FI_DEV_POWER_USAGE": power,
                "DCGM_FI_DEV_GPU_TEMP": temp,
                "DCGM_FI_DEV_XID_ERRORS": float(xid),
            }
            if profile is not None:
                sm, tensor, dram, nvlink, pcie = profile
                # The simulator keeps one figure per link; each direction carries half of it.
                values.update({
                    "DCGM_FI_PROF_SM_ACTIVE": sm, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": tensor,
                    "DCGM_FI_PROF_DRAM_ACTIVE": dram, "DCGM_FI_PROF_NVLINK_TX_BYTES": nvlink / 2,
                    "DCGM_FI_PROF_NVLINK_RX_BYTES": nvlink / 2, "DCGM_FI_PROF_PCIE_TX_BYTES": pcie / 2,
                    "DCGM_FI_PROF_PCIE_RX_BYTES": pcie / 2,
                })
            rows.append((text, values))
    out: list[str] = []
    for name, help_text in METRICS + PROFILING:
        served = [(labels, values[name]) for labels, values in rows if name in values]
        if not served and (name, help_text) in PROFILING:
            continue
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} gauge")
        out.extend(f"{name}{{{labels}}} {_number(name, value)}" for labels, value in served)
    return "\n".join(out) + "\n"
