"""The PromQL one sweep sends (dcgm-exporter and cAdvisor names) and the parsing of Prometheus' JSON answers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

# Labels that tell one GPU series from another: the GPU itself (with its MIG instance, if any) and what
# dcgm-exporter says runs on it. Aggregating `by` them also merges the duplicate series of an HA Prometheus
# pair behind Thanos.
# A scrape with honor_labels off (a ServiceMonitor without `honorLabels: true`, the dcgm-exporter chart's default)
# renames dcgm-exporter's own `namespace`/`pod` to `exported_namespace`/`exported_pod` and puts the exporter's pod
# in `namespace`/`pod`: both are read (tools/prometheus.py, occupant).
GPU_KEYS = ("Hostname", "gpu", "UUID", "GPU_I_ID", "modelName", "namespace", "pod", "hpc_job", "exported_namespace",
            "exported_pod")
RENAMED = ("exported_namespace", "exported_pod")
JOB_KEYS = ("namespace", "pod", "hpc_job")
# dcgm-exporter labels a MIG instance's series with GPU_I_ID (the GPU instance id) and GPU_I_PROFILE ("1g.10gb");
# `gpu` and `UUID` stay those of the parent GPU. On a MIG instance DCGM_FI_DEV_GPU_UTIL reads 0 or is absent
# however busy the instance is (NVIDIA/dcgm-exporter#216, #105): its utilisation is read from
# DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100 instead, and its GPU_UTIL is never read.
MIG_INSTANCE = "GPU_I_ID"
NOT_MIG = f'{MIG_INSTANCE}=""'  # also matches series without the label (a GPU not in MIG mode)
IS_MIG = f'{MIG_INSTANCE}!=""'

UTIL = "DCGM_FI_DEV_GPU_UTIL"
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
XID = "DCGM_FI_DEV_XID_ERRORS"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
NVLINK_TX = "DCGM_FI_PROF_NVLINK_TX_BYTES"
NVLINK_RX = "DCGM_FI_PROF_NVLINK_RX_BYTES"
PCIE_TX = "DCGM_FI_PROF_PCIE_TX_BYTES"
PCIE_RX = "DCGM_FI_PROF_PCIE_RX_BYTES"
CPU = "container_cpu_usage_seconds_total"
NET_RX = "container_network_receive_bytes_total"
NET_TX = "container_network_transmit_bytes_total"
DISK_READ = "container_fs_reads_bytes_total"
DISK_WRITE = "container_fs_writes_bytes_total"
# Disk read and write come back in one request (the `disk` range query), each series tagged with its field: a job
# that only writes (a dataset copied from network storage to local disk) works as surely as one that reads.
DISK_FIELDS = {"disk_read_mbps": DISK_READ, "disk_write_mbps": DISK_WRITE}
# vLLM's finished-request counter (all finish reasons): an inference service's request rate, where it serves one.
VLLM_REQUESTS = "vllm:request_success_total"

# What the GPU really does, per slice: DCGM profiling ratios (0..1), power (W) and interconnect rates (bytes/s,
# transmit + receive). Read in one request (the `profiling` range query); an exporter without a field answers
# without its series (unknown). Each field is one metric, or the sum of two (a GPU lacking either: unknown).
PROFILING_FIELDS: dict[str, tuple[str, ...]] = {
    "engine": (ENGINE,), "sm_active": (SM_ACTIVE,), "tensor_active": (TENSOR_ACTIVE,), "dram_active": (DRAM_ACTIVE,),
    "power_w": (POWER,), "nvlink": (NVLINK_TX, NVLINK_RX), "pcie": (PCIE_TX, PCIE_RX),
}
FIELD_LABEL = "steward_field"  # tags each field's series in the one profiling answer

# cAdvisor repeats a pod's usage at pod level (container="") and for the pause container; count containers once.
DEFAULT_CONTAINER_SELECTOR = 'container!="", container!="POD"'
# Network counters live on the pod sandbox, one per interface; loopback traffic is not input.
DEFAULT_NETWORK_SELECTOR = 'interface!="lo"'


def duration(seconds: float) -> str:
    """PromQL duration for a number of seconds (milliseconds when not whole)."""
    if seconds <= 0:
        raise ValueError(f"a PromQL range must be positive, got {seconds}s")
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{int(round(seconds * 1000))}ms"


def selector(metric: str, *matchers: str) -> str:
    """`metric{a, b}` from optional matcher strings (empty ones are dropped)."""
    parts = [m.strip().strip(",") for m in matchers if m and m.strip()]
    return f"{metric}{{{', '.join(parts)}}}" if parts else metric


def by(keys: Iterable[str]) -> str:
    return f"by ({', '.join(keys)})"


def quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def job_matchers(job: Any, renamed: bool = False) -> str:
    """Label matchers for one job's series: hpc_job on Slurm (dcgm-exporter's job mapping), pod otherwise (the
    exported_ labels when the scrape renamed them)."""
    if job.scheduler == "slurm":
        return f"hpc_job={quote(str(job.labels.get('slurm.job_id', '')))}"
    if renamed:
        return f"exported_namespace={quote(job.namespace)}, exported_pod={quote(job.name)}"
    return f"namespace={quote(job.namespace)}, pod={quote(job.name)}"


def gpu_range_queries(extra: str, slice_s: float) -> dict[str, str]:
    """Per-slice aggregates over every GPU in the cluster: one query each, whatever its size."""
    s = duration(slice_s)
    k = by(GPU_KEYS)
    return {
        "util_max": utilisation("max", "max_over_time", extra, s),
        "util_min": utilisation("min", "min_over_time", extra, s),
        "util_avg": utilisation("max", "avg_over_time", extra, s),
        "util_count": utilisation("max", "count_over_time", extra, s),
        "profiling": tagged_union({name: " + ".join(f"max {k} (avg_over_time({selector(m, extra)}[{s}]))"
                                                    for m in metrics)
                                   for name, metrics in PROFILING_FIELDS.items()}),
        "xid_last": f"max {k} (last_over_time({selector(XID, extra)}[{s}]))",
    }


def utilisation(agg: str, func: str, extra: str, window: str) -> str:
    """One per-slice utilisation aggregate (%) over every GPU and MIG instance, in one request.

    A whole GPU reads DCGM_FI_DEV_GPU_UTIL as it always has; a MIG instance (a series with a non-empty GPU_I_ID)
    reads DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100, because its GPU_UTIL reads 0 however busy it is
    (NVIDIA/dcgm-exporter#216, #105). Each side is aggregated `by` GPU_KEYS, GPU_I_ID among them, so the left
    side's series have no GPU_I_ID and the right side's all have one: `or` (which keeps a right-hand series only
    when no left-hand series has the same labels) can never drop one for the other, so the answer is the union.
    `*` binds tighter than `or`: only the MIG side is scaled. A sample count is a count on both sides (no scale).
    A MIG instance whose exporter lacks GR_ENGINE_ACTIVE (no DCP profiling) has no samples here: unknown, never
    idle.
    """
    k = by(GPU_KEYS)
    whole = f"{agg} {k} ({func}({selector(UTIL, extra, NOT_MIG)}[{window}]))"
    mig = f"{agg} {k} ({func}({selector(ENGINE, extra, IS_MIG)}[{window}]))"
    return f"{whole} or {mig}" if func == "count_over_time" else f"{whole} or {mig} * 100"


def tagged_union(queries: dict[str, str]) -> str:
    """Several aggregates in one request: each answer's series tagged `steward_field="<name>"`, joined by `or`.

    A range function drops the metric name, so `avg_over_time({__name__=~"A|B"}[5m])` would merge A and B into
    one labelset (an error); tagging each aggregate keeps them apart. The tags differ, so `or` keeps every series.
    """
    return " or ".join(f'label_replace({q}, "{FIELD_LABEL}", "{name}", "", "")' for name, q in queries.items())


def gpu_history_queries(extra: str, slice_s: float) -> dict[str, str]:
    """The coarse history over the long-tail lookback: only the max, min and sample count per slice."""
    fine = gpu_range_queries(extra, slice_s)
    return {name: fine[name] for name in ("util_max", "util_min", "util_count")}


def gpu_instant_queries(extra: str, lookback_s: float) -> dict[str, str]:
    """Whole-lookback figures at the sweep instant, and when each series last reported."""
    lb = duration(lookback_s)
    k = by(GPU_KEYS)
    return {
        "fb_used": f"max {k} (last_over_time({selector(FB_USED, extra)}[{lb}]))",
        "temp_max": f"max {k} (max_over_time({selector(TEMP, extra)}[{lb}]))",
        "power_avg": f"max {k} (avg_over_time({selector(POWER, extra)}[{lb}]))",
        # timestamp() of a live series is its newest sample; a series that went stale is absent.
        # The utilisation metric's series (GR_ENGINE_ACTIVE for a MIG instance, as in `utilisation`).
        "last_seen": f"max {k} (timestamp({selector(UTIL, extra, NOT_MIG)})) "
                     f"or max {k} (timestamp({selector(ENGINE, extra, IS_MIG)}))",
    }


def job_io_queries(extra: str, container: str, network: str, slice_s: float) -> dict[str, str]:
    """Process CPU (% of one core), network traffic (receive + transmit), disk read and write (MB/s) and, for
    inference services, requests answered per second (vLLM's counter) per job and slice.

    Transmit counts because an upload (a checkpoint to object storage after training) is work: a job that
    only sends shows almost nothing on receive. A job with only one of the two counters gets that one (`or`).
    Disk read and write are one request (`disk`, a tagged_union: each series carries `steward_field`), not one each:
    a copy from network storage (Lustre, NFS: no block reads of the job's) to local disk shows only as writes.
    """
    s = duration(slice_s)
    k = by(JOB_KEYS)
    rx = f"sum {k} (rate({selector(NET_RX, extra, network)}[{s}])) / 1e6"
    tx = f"sum {k} (rate({selector(NET_TX, extra, network)}[{s}])) / 1e6"
    return {
        "cpu_pct": f"sum {k} (rate({selector(CPU, extra, container)}[{s}])) * 100",
        "net_rx_mbps": f"{rx} + {tx} or {rx} or {tx}",
        "disk": tagged_union({name: f"sum {k} (rate({selector(metric, extra, container)}[{s}])) / 1e6"
                              for name, metric in DISK_FIELDS.items()}),
        # Requests/s an inference service answered (vLLM); absent for jobs that serve no such counter.
        "requests_per_s": f"sum {k} (rate({selector(VLLM_REQUESTS, extra)}[{s}]))",
    }


def number(raw: Any) -> float | None:
    """A sample value as Prometheus sends it ("NaN", "+Inf", "12.5"); None when not a finite number."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def series_key(metric: dict[str, str], keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(metric.get(k, "") for k in keys)


def range_columns(result: list[dict[str, Any]], keys: tuple[str, ...], start: float, step: float,
                  n: int) -> dict[tuple[str, ...], list[float | None]]:
    """query_range result → {series key: n values, oldest first}; NaN, infinities and points off the grid are None.

    The inner loop is the hot path at 10,000 GPUs (points = GPUs x slices x queries), so it stays inlined.
    """
    out: dict[tuple[str, ...], list[float | None]] = {}
    inverse = 1.0 / step
    inf = math.inf
    for item in result:
        column = out.setdefault(series_key(item.get("metric", {}), keys), [None] * n)
        for ts, raw in item.get("values", ()):
            i = round((float(ts) - start) * inverse)
            if 0 <= i < n:
                try:
                    value = float(raw)
                except (TypeError, ValueError):
                    continue
                if value == value and value != inf and value != -inf:
                    column[i] = value
    return out


def tagged_columns(result: list[dict[str, Any]], keys: tuple[str, ...], start: float, step: float,
                   n: int) -> dict[str, dict[tuple[str, ...], list[float | None]]]:
    """A tagged_union answer split by its tag: {field: range_columns of that field's series}."""
    by_field: dict[str, list[dict[str, Any]]] = {}
    for item in result:
        by_field.setdefault(item.get("metric", {}).get(FIELD_LABEL, ""), []).append(item)
    return {name: range_columns(items, keys, start, step, n) for name, items in by_field.items() if name}


def instant_values(result: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    """Instant query result → {series key: value}, dropping NaN and infinities."""
    out: dict[tuple[str, ...], float] = {}
    for item in result:
        value = number((item.get("value") or [None, None])[1])
        if value is not None:
            out[series_key(item.get("metric", {}), keys)] = value
    return out
