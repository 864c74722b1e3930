"""PrometheusMetrics: the MetricsSource over Prometheus, Thanos Query or VictoriaMetrics scraping dcgm-exporter.

A sweep costs a fixed 17 PromQL requests (10 for GPUs over the detectors' windows, 3 for the coarse long-tail
history, 4 for process I/O) whatever the cluster size. A MIG instance is a GPU of its own (gpu_index), whose
utilisation is its DCGM_FI_PROF_GR_ENGINE_ACTIVE, never its GPU_UTIL (promql.utilisation). The DCGM profiling fields, power and NVLink/PCIe traffic
come back in one of the 10 (promql.tagged_union); a field the exporter lacks is unknown, never zero.
Gaps, stale series, NaN and out-of-range utilisation come back as missing slices, never as zeros.
A response that succeeds with `warnings` (Prometheus' own, or Thanos' partial-response warnings when a store
did not answer) is kept, and its warnings are surfaced in `warnings`: the sweep marks its observation degraded.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from core.cluster import GpuHistory, GpuSeries, JobInfo, JobIoSeries, expected_samples
from core.durations import format_duration
from core.gpus import MIG_INDEX_BASE
from tools import promql

HpcJobMapping = Mapping[str, str] | Callable[[str], str | None] | None
MAX_WARNINGS = 10  # distinct warnings kept per sweep; the rest are counted
# Slices holding more than this many times the samples the setting expects: the setting is too long (a 15 s scrape
# read as 1 minute) and gaps would read as full coverage.
OVERFULL = 1.5
QUERY_SHOWN = 120  # characters of a failed query an error shows, when it names no metric the steward reads
METRIC_NAME = re.compile(r"\b(?:DCGM_FI_\w+|container_\w+|vllm:\w+)")
MAX_POWER_W = 5000.0  # above any board's power: a larger reading is a broken exporter, not a measurement
# A MIG instance's GpuSeries.gpu: MIG_INDEX_BASE (core/gpus.py) + parent index x 100 + GPU_I_ID (GPU 0 instance 7 ->
# 10007).


def gpu_index(gpu: str, instance: str) -> int | None:
    """The steward's GPU index for a dcgm-exporter series: `gpu` for a whole GPU; for a MIG instance (non-empty
    GPU_I_ID) a number of its own, MIG_INDEX_BASE + parent x 100 + instance id. None when a label is not a number.

    Every MIG instance of a GPU carries the parent's `gpu` and `UUID` labels, and GpuSeries has no instance field,
    so the instance is folded into the index: downstream, (node, gpu) and (node, gpu, job) are what tell one
    device from another (the coarse history is joined to the fine slices on them, node health names a GPU by
    them, and an empty node needs one series per schedulable device). The base keeps an instance clear of every
    whole GPU's index on a node that mixes both; NVML's GPU instance ids are small (under 15 on A100 and H100).
    """
    try:
        parent = int(gpu)
        if not instance:
            return parent
        gi = int(instance)
    except ValueError:
        return None  # not a GPU series (a relabelling mistake); nothing to attribute it to
    if parent < 0 or not 0 <= gi < 100:
        return None
    return MIG_INDEX_BASE + parent * 100 + gi


def gpu_uuid(uuid: str, instance: str) -> str:
    """The parent GPU's UUID, with "/<GPU_I_ID>" for a MIG instance (dcgm-exporter's UUID is the parent's)."""
    return f"{uuid}/{instance}" if instance else uuid


VM_PARTIAL = "partial response (isPartial): a VictoriaMetrics storage node did not answer, so series may be missing"


def response_warnings(body: bytes) -> list[str]:
    """The `warnings` of a Prometheus API answer (Thanos puts partial-response warnings there), and VictoriaMetrics'
    `"isPartial": true` (vmselect's answer when a vmstorage node is down: no warning at all); [] without.

    A cheap byte search first: a sweep's answers are large, and nearly all of them carry no warning.
    Prometheus 3's `infos` are notes about a query, not missing data, and are left out.
    """
    if b'"warnings"' not in body and b'"isPartial"' not in body:
        return []
    try:
        answer = json.loads(body)
    except ValueError:
        return []
    if not isinstance(answer, dict):
        return []
    raw = answer.get("warnings")
    out = [str(w) for w in (raw if isinstance(raw, list) else [raw])] if raw else []
    if answer.get("isPartial") is True:
        out.append(VM_PARTIAL)
    return out


class PrometheusError(RuntimeError):
    """A query Prometheus could not answer; the message names the query and the server."""


class PrometheusMetrics:
    """Implements MetricsSource with range queries (step = slice) and a few instant queries.

    `job_id_for_hpc_job` maps dcgm-exporter's Slurm `hpc_job` label to the steward job id (a dict or a
    callable); without one, or when it knows no answer, the label value itself is the job id.
    `sample_interval_s` is how often a GPU is sampled (the slower of dcgm-exporter's collect interval and
    the scrape interval): it sets how many samples a full slice holds. `time_shift` is added to query
    times, for a cluster whose clock is not Prometheus' own (a replayed or simulated one). `retry` (a urllib3
    Retry) replaces the client's own retry policy (3 retries with back-off on errors and 5xx).
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        bearer_token: str | None = None,
        job_id_for_hpc_job: HpcJobMapping = None,
        sample_interval_s: float = 30.0,
        selector: str = "",
        container_selector: str = promql.DEFAULT_CONTAINER_SELECTOR,
        network_selector: str = promql.DEFAULT_NETWORK_SELECTOR,
        time_shift: timedelta = timedelta(0),
        timeout_s: float = 30.0,
        retry: Any = None,
        client: Any = None,
    ) -> None:
        if not url or not url.startswith(("http://", "https://")):
            raise ValueError(f"prometheus url must start with http:// or https://, got {url!r}")
        if sample_interval_s <= 0:
            raise ValueError(f"sample_interval_s must be positive, got {sample_interval_s}")
        all_headers = dict(headers or {})
        if bearer_token:
            all_headers["Authorization"] = f"Bearer {bearer_token}"
        if client is None:
            import requests
            from prometheus_api_client import PrometheusConnect

            # The client returns only data.result; a response hook keeps each answer's warnings.
            session = requests.Session()
            try:
                client = PrometheusConnect(url=url.rstrip("/"), headers=all_headers or None, timeout=timeout_s,
                                           session=session, retry=retry)
            except TypeError:  # a client older than its `session` argument: hook the session it made
                client = PrometheusConnect(url=url.rstrip("/"), headers=all_headers or None, timeout=timeout_s,
                                           retry=retry)
                session = getattr(client, "_session", session)
            session.hooks["response"].append(self._keep_warnings)
        self.url = url
        self.client = client
        self.selector = _bare(selector)
        self._job: JobInfo | None = None  # set on a for_job() copy: the one job its queries are narrowed to
        # Whether the latest GPU read found dcgm-exporter's pod labels renamed exported_* (honor_labels off).
        self.renamed = False
        self.container_selector = container_selector
        self.network_selector = network_selector
        self.sample_interval_s = sample_interval_s
        self.time_shift = time_shift
        self._hpc = job_id_for_hpc_job
        self.queries = 0  # PromQL requests made so far (benchmarks and tests read it)
        self._root: PrometheusMetrics | None = None  # set on a for_job() copy: the source whose count it adds to
        self._answer_warnings: list[str] = []  # of the request in flight (filled by the response hook)
        self._reads_end: datetime | None = None  # the sweep instant the warnings below belong to
        self._reads_done: set[str] = set()  # the reads made for it
        self._warnings: list[str] = []
        self._more_warnings = 0
        self.last_read_warnings: list[str] = []  # the latest read's (gpu_series, gpu_history, job_io_series)
        self._full_seen: dict[str, int] = {}  # per read: a full slice's samples where the data corrected the setting

    def _count(self) -> None:
        root = self._root or self
        root.queries += 1

    def for_job(self, job: JobInfo) -> PrometheusMetrics:
        """The same source with every query narrowed to one job's series (a label matcher), for re-checking
        one target right before acting: the same handful of queries, answered with that job's series only."""
        scoped = copy.copy(self)
        scoped._root = self._root or self
        scoped._job = job
        return scoped

    def _gpu_selector(self) -> str:
        """The configured matchers, and one job's (dcgm-exporter's labels, exported_ ones when renamed) if scoped."""
        job = promql.job_matchers(self._job, (self._root or self).renamed) if self._job is not None else ""
        return ", ".join(m for m in (self.selector, job) if m)

    def _io_selector(self) -> str:
        """The configured matchers, and one job's if scoped (cAdvisor's namespace/pod are never renamed)."""
        job = promql.job_matchers(self._job) if self._job is not None else ""
        return ", ".join(m for m in (self.selector, job) if m)

    # -- warnings --------------------------------------------------------------------------------
    def _keep_warnings(self, response: Any, *args: Any, **kwargs: Any) -> Any:
        if response.status_code == 200:
            self._answer_warnings.extend(response_warnings(response.content))
        return response

    def _begin(self, read: str, end: datetime) -> None:
        """A read for the sweep at `end` starts; a read for another instant, or one this sweep already made
        (the next sweep, at the same instant), starts a new record."""
        if end != self._reads_end or read in self._reads_done:
            self._reads_end, self._reads_done, self._warnings, self._more_warnings = end, set(), [], 0
        self._reads_done.add(read)
        self.last_read_warnings = []

    def _note(self, read: str, warnings: list[str]) -> None:
        for w in warnings:
            line = f"{read}: {w}"
            if line in self.last_read_warnings:
                continue
            self.last_read_warnings.append(line)
            if line in self._warnings:
                continue
            if len(self._warnings) < MAX_WARNINGS:
                self._warnings.append(line)
            else:
                self._more_warnings += 1

    def _interval_warning(self, slice_s: float) -> list[str]:
        """Why no slice can be judged when GPUs are sampled less often than once a slice: some slices hold no
        sample, coverage never reaches an idle call's minimum, and every job would be unknown without a word."""
        if self.sample_interval_s <= slice_s + 1e-9:
            return []
        return [f"GPUs are sampled every {format_duration(self.sample_interval_s)}, longer than the "
                f"{format_duration(slice_s)} slice: slices without a sample make every job unknown; set the "
                f"policy's detectors.slice to at least {format_duration(self.sample_interval_s)} (or "
                f"STEWARD_PROMETHEUS_SAMPLE_INTERVAL_S to the real scrape / DCGM collect interval)"]

    def _expected(self, read: str, counts: dict[tuple[str, ...], list[float | None]], slice_s: float) -> int:
        """The samples a full slice holds, checked against what the slices do hold, with a warning when the
        configured sample interval disagrees with the data.

        Too short a setting (a 1-minute scrape read as 30 s): no GPU's slice anywhere holds a full slice's samples,
        every job reads at half coverage and none is judged; said, so it is not silent (one full slice anywhere says
        the setting is right: an outage is not a setting). Too long a setting (a 15 s scrape read as 1 minute): most
        GPUs' slices hold several times the samples expected, and a series missing half of them would read as
        whole; coverage is then counted against what most GPUs' full slices hold, and that is said too. A GPU's
        first slice with samples is left out of both (a young Prometheus, a new series may have begun inside it);
        with no other slice there is nothing to judge the setting by. One job's re-read follows its sweep."""
        expected = expected_samples(slice_s, self.sample_interval_s)
        if self._root is not None:
            return max(expected, self._root._full_seen.get(read, 0))
        full = sorted(_full_slices(counts))
        self._full_seen[read] = 0
        if not full:
            return expected
        most, typical = full[-1], full[len(full) // 2]
        if most < expected:
            self._note(read, [
                f"no GPU's slice holds the {expected} samples a full {format_duration(slice_s)} slice holds at the "
                f"configured {format_duration(self.sample_interval_s)} sample interval (at most {most}): GPUs seem "
                f"to be sampled every {format_duration(slice_s / most)} or so; set STEWARD_PROMETHEUS_SAMPLE_INTERVAL_S "
                f"to the real scrape / DCGM collect interval; until then no job can be judged idle"])
        elif typical > expected * OVERFULL:
            self._full_seen[read] = typical
            self._note(read, [
                f"GPUs' {format_duration(slice_s)} slices hold about {typical} samples, not the {expected} the "
                f"configured {format_duration(self.sample_interval_s)} sample interval gives: GPUs seem to be sampled "
                f"every {format_duration(slice_s / typical)} or so; coverage is counted against {typical} samples "
                f"(set STEWARD_PROMETHEUS_SAMPLE_INTERVAL_S to the real scrape / DCGM collect interval)"])
            return typical
        return expected

    @property
    def warnings(self) -> list[str]:
        """Why the reads of the latest sweep instant may be incomplete: each answer's `warnings` (a Thanos
        partial response among them), named by the read. Empty when every answer came back whole."""
        more = [f"... and {self._more_warnings} more warnings"] if self._more_warnings else []
        return [*self._warnings, *more]

    # -- transport -------------------------------------------------------------------------------
    def _range(self, read: str, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        self._count()
        self._answer_warnings = []
        # The client rounds start/end to whole seconds; the explicit params keep sub-second slices exact.
        params = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        try:
            when = datetime.fromtimestamp(start, UTC)
            result = self.client.custom_query_range(query, when, when, f"{step:g}", params=params)
        except Exception as exc:  # the client raises requests' and its own errors alike
            raise PrometheusError(_failure(read, "query_range", query, self.url, exc)) from exc
        self._note(read, self._answer_warnings)
        return result

    def _instant(self, read: str, query: str, at: float) -> list[dict[str, Any]]:
        self._count()
        self._answer_warnings = []
        try:
            result = self.client.custom_query(query, params={"time": f"{at:.3f}"})
        except Exception as exc:
            raise PrometheusError(_failure(read, "query", query, self.url, exc)) from exc
        self._note(read, self._answer_warnings)
        return result

    def _grid(self, end: datetime, lookback_s: float, slice_s: float) -> tuple[float, float, int]:
        """(first evaluation time, last evaluation time, slice count): slice i is (t_i - slice_s, t_i]."""
        if slice_s <= 0 or lookback_s <= 0:
            raise ValueError(f"lookback_s and slice_s must be positive, got {lookback_s} and {slice_s}")
        n = max(math.ceil(lookback_s / slice_s - 1e-9), 1)
        t_end = (end + self.time_shift).timestamp()
        return t_end - (n - 1) * slice_s, t_end, n

    def occupant(self, key: tuple[str, ...], renamed: bool) -> str | None:
        """The steward job id of a GPU series (its GPU_KEYS values). With the labels renamed (honor_labels off),
        `namespace`/`pod` name the exporter's own pod: the occupant is in exported_namespace/exported_pod, or none."""
        namespace, pod, hpc_job, exported_ns, exported_pod = key[5:10]
        if renamed:
            namespace, pod = exported_ns, exported_pod
        return self.job_id(namespace, pod, hpc_job)

    def job_id(self, namespace: str, pod: str, hpc_job: str) -> str | None:
        """The steward job id of a series: namespace/pod on Kubernetes, the mapped hpc_job on Slurm."""
        if pod:
            return f"{namespace}/{pod}" if namespace else pod
        if not hpc_job:
            return None
        mapped = self._hpc(hpc_job) if callable(self._hpc) else (self._hpc or {}).get(hpc_job)
        return mapped or hpc_job

    # -- MetricsSource ---------------------------------------------------------------------------
    def gpu_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuSeries]:
        start, t_end, n = self._grid(end, lookback_s, slice_s)
        self._begin("gpu metrics", end)
        self._note("gpu metrics", self._interval_warning(slice_s))
        keys = promql.GPU_KEYS
        cols: dict[str, dict[tuple[str, ...], list[float | None]]] = {}
        for name, q in promql.gpu_range_queries(self._gpu_selector(), slice_s).items():
            result = self._range("gpu metrics", q, start, t_end, slice_s)
            if name == "profiling":  # one answer, a column set per DCGM field the exporter has
                cols.update(promql.tagged_columns(result, keys, start, slice_s, n))
            else:
                cols[name] = promql.range_columns(result, keys, start, slice_s, n)
        lookback = n * slice_s
        point = {name: promql.instant_values(self._instant("gpu metrics", q, t_end), keys)
                 for name, q in promql.gpu_instant_queries(self._gpu_selector(), lookback).items()}
        if self._root is None:  # a fleet read says how this Prometheus labels; one job's re-read follows it
            self.renamed = any(key[9] for key in cols["util_count"])
        renamed = (self._root or self).renamed
        expected = self._expected("gpu metrics", cols["util_count"], slice_s)
        parents = _parent_readings(cols["xid_last"], point["temp_max"])
        chosen: dict[tuple[str, str, str, str], tuple[tuple, GpuSeries]] = {}
        for key, counts in cols["util_count"].items():
            series = self._series(key, counts, cols, point, parents, start, slice_s, n, expected, renamed)
            if series is None:
                continue
            # One series per GPU (per MIG instance), as the simulator gives: the occupant that reported last.
            last_slice = max((i for i, c in enumerate(counts) if c), default=-1)
            rank = (last_slice, point["last_seen"].get(key, -math.inf), series.job is not None)
            gpu = (key[0], key[1], key[2], key[3])
            if gpu not in chosen or rank > chosen[gpu][0]:
                chosen[gpu] = (rank, series)
        return [s for _, s in sorted(chosen.values(), key=lambda item: (item[1].node, item[1].gpu))]

    def _series(self, key: tuple[str, ...], counts: list[float | None], cols: dict, point: dict,
                parents: dict[tuple[str, str, str], tuple[list[float | None] | None, float | None]],
                start: float, slice_s: float, n: int, expected: int, renamed: bool) -> GpuSeries | None:
        host, gpu, uuid, instance, model = key[:5]
        if not any(counts):
            return None
        index = gpu_index(gpu, instance)
        if index is None:
            return None  # not a GPU series (a relabelling mistake); nothing to attribute it to
        maxes, mins, avgs = (cols[c].get(key, [None] * n) for c in ("util_max", "util_min", "util_avg"))
        util_max: list[float | None] = []
        util_avg: list[float | None] = []
        samples: list[int] = []
        for i in range(n):
            c, hi, lo, avg = counts[i], maxes[i], mins[i], avgs[i]
            # One absurd sample makes the whole slice unknown: PromQL cannot drop single samples in a range.
            ok = bool(c) and None not in (hi, lo, avg) and lo >= 0.0 and hi <= 100.0  # type: ignore[operator]
            util_max.append(hi if ok else None)
            util_avg.append(avg if ok else None)
            samples.append(int(c) if ok and c else 0)
        def field(name: str, low: float, high: float) -> list[float | None]:
            """A profiling field's slices, out-of-range values unknown; [] when the exporter has no such series."""
            values = cols.get(name, {}).get(key)
            return [v if v is not None and low <= v <= high else None for v in values] if values else []

        xid_values, temp = cols["xid_last"].get(key), point["temp_max"].get(key)
        if instance:  # a MIG instance: the parent GPU's XID and temperature when only the parent reports them
            parent_xid, parent_temp = parents.get((host, gpu, uuid), (None, None))
            xid_values = xid_values if xid_values and any(xid_values) else parent_xid or xid_values
            temp = temp if temp is not None else parent_temp
        xid_last, xid_at = self._xid(xid_values, start, slice_s)
        return GpuSeries(
            job=self.occupant(key, renamed), node=host, gpu=index, uuid=gpu_uuid(uuid, instance), model=model,
            slice_s=slice_s, util_max=util_max, util_avg=util_avg, samples=samples, expected=expected,
            engine_active_avg=field("engine", 0.0, 1.0), sm_active_avg=field("sm_active", 0.0, 1.0),
            tensor_active_avg=field("tensor_active", 0.0, 1.0), dram_active_avg=field("dram_active", 0.0, 1.0),
            power_w_slices=field("power_w", 0.0, MAX_POWER_W), nvlink_bytes_avg=field("nvlink", 0.0, math.inf),
            pcie_bytes_avg=field("pcie", 0.0, math.inf), mem_used_mb=point["fb_used"].get(key),
            temp_c_max=temp, power_w_avg=point["power_avg"].get(key),
            xid_last=xid_last, xid_at=xid_at,
        )

    def _xid(self, values: list[float | None] | None, start: float, slice_s: float) -> tuple[int, datetime | None]:
        """The last non-zero XID and the start of the slice where it first showed (slice precision)."""
        if not values:
            return 0, None
        nonzero = [i for i, v in enumerate(values) if v]
        if not nonzero:
            return 0, None
        last = nonzero[-1]
        xid = int(values[last] or 0)
        first = last
        while first > 0 and values[first - 1] == xid:
            first -= 1
        at = datetime.fromtimestamp(start + (first - 1) * slice_s, UTC) - self.time_shift
        return xid, at

    def gpu_history(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuHistory]:
        """Coarse max, min and sample count per GPU and occupant: three range queries at the coarse step."""
        start, t_end, n = self._grid(end, lookback_s, slice_s)
        self._begin("gpu history", end)
        cols = {name: promql.range_columns(self._range("gpu history", q, start, t_end, slice_s), promql.GPU_KEYS,
                                           start, slice_s, n)
                for name, q in promql.gpu_history_queries(self._gpu_selector(), slice_s).items()}
        renamed = any(key[9] for key in cols["util_count"])
        expected = self._expected("gpu history", cols["util_count"], slice_s)
        out = []
        for key, counts in cols["util_count"].items():
            host, gpu, _uuid, instance = key[:4]
            index = gpu_index(gpu, instance)  # the same index gpu_series gives the slice: the two are joined on it
            if not any(counts) or index is None:
                continue
            maxes, mins = cols["util_max"].get(key, [None] * n), cols["util_min"].get(key, [None] * n)
            # Out-of-range values make the slice unknown, which only ever stops a quiet stretch.
            ok = [bool(c) and hi is not None and lo is not None and 0.0 <= lo <= hi <= 100.0
                  for c, hi, lo in zip(counts, maxes, mins, strict=True)]
            out.append(GpuHistory(
                job=self.occupant(key, renamed), node=host, gpu=index, slice_s=slice_s,
                util_max=[m if k else None for m, k in zip(maxes, ok, strict=True)],
                util_min=[m if k else None for m, k in zip(mins, ok, strict=True)],
                samples=[int(c or 0) if k else 0 for c, k in zip(counts, ok, strict=True)], expected=expected,
            ))
        return sorted(out, key=lambda h: (h.node, h.gpu))

    def job_io_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[JobIoSeries]:
        start, t_end, n = self._grid(end, lookback_s, slice_s)
        self._begin("process I/O", end)
        queries = promql.job_io_queries(self._io_selector(), self.container_selector, self.network_selector, slice_s)
        cols: dict[str, dict[tuple[str, ...], list[float | None]]] = {}
        for name, q in queries.items():
            result = self._range("process I/O", q, start, t_end, slice_s)
            if name == "disk":  # one answer, a column set per disk field (read, write) the source has
                cols.update(promql.tagged_columns(result, promql.JOB_KEYS, start, slice_s, n))
            else:
                cols[name] = promql.range_columns(result, promql.JOB_KEYS, start, slice_s, n)
        by_job: dict[str, dict[str, list[float | None]]] = {}
        for name, column in cols.items():
            for (namespace, pod, hpc_job), values in column.items():
                job = self.job_id(namespace, pod, hpc_job)
                if job is not None:
                    by_job.setdefault(job, {})[name] = values
        empty: list[float | None] = [None] * n
        return [JobIoSeries(job=job, slice_s=slice_s, cpu_pct=v.get("cpu_pct", empty),
                            net_rx_mbps=v.get("net_rx_mbps", empty), disk_read_mbps=v.get("disk_read_mbps", empty),
                            disk_write_mbps=v.get("disk_write_mbps", empty),
                            requests_per_s=v.get("requests_per_s", []))  # empty: not a vLLM service (unknown)
                for job, v in sorted(by_job.items())]


def _failure(read: str, api: str, query: str, url: str, exc: Exception) -> str:
    """A failed request in a line a person reads: what was read, where, why; the query last and cut short (the
    client's own message repeats the URL-encoded query, hundreds of characters, before the cause)."""
    cause = re.sub(r"with url: \S+", "with url: <query>", str(exc))
    names = list(dict.fromkeys(METRIC_NAME.findall(query)))
    shown = (f"query of {', '.join(names)}" if names
             else f"query {query if len(query) <= QUERY_SHOWN else query[:QUERY_SHOWN] + '...'}")
    return f"{read}: {api} on {url} failed: {cause} ({shown})"


def _bare(selector: str) -> str:
    """Extra label matchers as written inside braces; a selector given with its braces ({cluster="a"}) too."""
    text = selector.strip()
    return text[1:-1].strip() if text.startswith("{") and text.endswith("}") else text


def _full_slices(counts: dict[tuple[str, ...], list[float | None]]) -> list[int]:
    """Per GPU series, the most samples one of its slices holds, its first slice with samples left out: the
    series (or Prometheus itself) may have begun inside it. Series with no other slice are left out."""
    out = []
    for column in counts.values():
        seen = [int(c) for c in column if c]
        if len(seen) >= 2:
            out.append(max(seen[1:]))
    return out


def _parent_readings(xid: dict[tuple[str, ...], list[float | None]], temp: dict[tuple[str, ...], float]
                     ) -> dict[tuple[str, str, str], tuple[list[float | None] | None, float | None]]:
    """XID slices and peak temperature of whole-GPU series (no GPU_I_ID), by (Hostname, gpu, UUID): a device-level
    reading a MIG instance's own series may lack. Of several occupants, the worst reading."""
    out: dict[tuple[str, str, str], tuple[list[float | None] | None, float | None]] = {}
    for key, values in xid.items():
        if not key[3] and any(values):
            gpu = (key[0], key[1], key[2])
            old, t = out.get(gpu, (None, None))
            out[gpu] = (values if old is None or _last_nonzero(values) > _last_nonzero(old) else old, t)
    for key, value in temp.items():
        if not key[3]:
            gpu = (key[0], key[1], key[2])
            x, t = out.get(gpu, (None, None))
            out[gpu] = (x, value if t is None else max(t, value))
    return out


def _last_nonzero(values: list[float | None]) -> int:
    return max((i for i, v in enumerate(values) if v), default=-1)


def prometheus_metrics_from_settings(settings: Any, **overrides: Any) -> PrometheusMetrics:
    """PrometheusMetrics from Settings (STEWARD_PROMETHEUS_URL, _HEADERS, and the optional fields below)."""
    url = getattr(settings, "prometheus_url", None)
    if not url:
        raise ValueError("STEWARD_PROMETHEUS_URL is not set: point it at Prometheus, Thanos Query or VictoriaMetrics")
    token = getattr(settings, "prometheus_bearer_token", None)
    if token is not None and hasattr(token, "get_secret_value"):
        token = token.get_secret_value()
    options: dict[str, Any] = {
        "headers": dict(getattr(settings, "prometheus_headers", {}) or {}),
        "bearer_token": token,
        "sample_interval_s": float(getattr(settings, "prometheus_sample_interval_s", 30.0) or 30.0),
        "selector": getattr(settings, "prometheus_selector", "") or "",
        "timeout_s": float(getattr(settings, "prometheus_timeout_s", 30.0) or 30.0),
    }
    options.update(overrides)
    return PrometheusMetrics(url, **options)
