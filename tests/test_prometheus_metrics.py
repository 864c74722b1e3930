"""PrometheusMetrics against a loopback fake Prometheus: label mapping, missing data, fixed query count."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from sim.fake_prometheus import FakePrometheus
from tools import promql
from tools.prometheus import PrometheusError, PrometheusMetrics, prometheus_metrics_from_settings

END = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
SLICE = 300.0
LOOKBACK = 1200.0  # 4 slices
N = 4


def gpu(host: str, index: int, **labels: str) -> dict[str, str]:
    return {"Hostname": host, "gpu": str(index), "UUID": f"GPU-{host}-{index}", "modelName": "A100-80GB",
            "device": f"nvidia{index}", **labels}


def steady(util: float, count: int = 10) -> dict:
    return {"util_max": [util] * N, "util_min": [util] * N, "util_avg": [util] * N, "util_count": [count] * N,
            "engine": [util / 100] * N, "xid_last": [0] * N,
            "fb_used": 1000.0, "temp_max": 50.0, "power_avg": 120.0, "last_seen": END.timestamp()}


class Cluster:
    """Answers each known query from per-series values; an unknown query is an error, as in Prometheus."""

    def __init__(self, series: list[tuple[dict[str, str], dict]], io: list[tuple[dict[str, str], dict]] = ()):
        self.series = series
        self.io = list(io)
        names = {**promql.gpu_range_queries("", SLICE), **promql.gpu_instant_queries("", LOOKBACK)}
        self.gpu_names = {q: n for n, q in names.items()}
        io_q = promql.job_io_queries("", promql.DEFAULT_CONTAINER_SELECTOR, promql.DEFAULT_NETWORK_SELECTOR, SLICE)
        self.io_names = {q: n for n, q in io_q.items()}

    def __call__(self, path: str, params: dict[str, str]) -> list[dict]:
        query = params["query"]
        name = self.gpu_names.get(query) or self.io_names.get(query)
        if name is None:
            raise ValueError(f"unexpected query {query}")
        rows = self.series if query in self.gpu_names else self.io
        keys = promql.GPU_KEYS if query in self.gpu_names else promql.JOB_KEYS
        # The profiling query answers every DCGM field the exporter has, each series tagged with its field.
        fields = list(promql.PROFILING_FIELDS) if name == "profiling" else [name]
        out = []
        for labels, values, field in ((lb, v, f) for lb, v in rows for f in fields):
            if field not in values:
                continue
            metric = {k: labels[k] for k in keys if k in labels}
            if name == "profiling":
                metric[promql.FIELD_LABEL] = field
            v = values[field]
            if path.endswith("query_range"):
                start, step = float(params["start"]), float(params["step"])
                points = [[start + i * step, str(x)] for i, x in enumerate(v) if x is not None]
                if points:
                    out.append({"metric": metric, "values": points})
            elif v is not None:
                out.append({"metric": metric, "value": [float(params["time"]), str(v)]})
        return out


def run(series, io=(), **kwargs):
    with FakePrometheus(Cluster(series, io)) as fake:
        metrics = PrometheusMetrics(fake.url, **kwargs)
        gpus = metrics.gpu_series(END, LOOKBACK, SLICE)
        jobs = metrics.job_io_series(END, LOOKBACK, SLICE)
    return gpus, jobs, metrics, fake


def test_series_map_to_jobs_on_kubernetes_and_slurm():
    series = [
        (gpu("n1", 0, namespace="ml", pod="train", container="main"), steady(90)),
        (gpu("n1", 1, hpc_job="4242"), steady(0)),
        (gpu("n2", 0, hpc_job="77"), steady(5)),
        (gpu("n2", 1), steady(0)),
    ]
    gpus, _, _, _ = run(series, job_id_for_hpc_job={"4242": "gpu-long/resnet"}, sample_interval_s=30)
    by = {(g.node, g.gpu): g for g in gpus}
    assert by[("n1", 0)].job == "ml/train"
    assert by[("n1", 1)].job == "gpu-long/resnet"
    assert by[("n2", 0)].job == "77"  # unmapped: the label itself
    assert by[("n2", 1)].job is None
    g = by[("n1", 0)]
    assert g.util_max == [90.0] * N and g.samples == [10] * N and g.expected == 10
    assert g.engine_active_avg == [0.9] * N
    assert (g.mem_used_mb, g.temp_c_max, g.power_w_avg) == (1000.0, 50.0, 120.0)
    assert g.uuid == "GPU-n1-0" and g.model == "A100-80GB" and g.slice_s == SLICE


def test_hpc_job_mapping_may_be_a_callable():
    series = [(gpu("n1", 0, hpc_job="12"), steady(0))]
    gpus, _, _, _ = run(series, job_id_for_hpc_job=lambda j: f"batch/job-{j}")
    assert gpus[0].job == "batch/job-12"


def test_gaps_nan_and_absurd_values_are_missing_never_zero():
    v = steady(0)
    v["util_count"] = [10, None, 10, 10]  # slice 1: no samples at all (a gap)
    v["util_max"] = [0, None, 150, 0]  # slice 2: a broken exporter's 150%
    v["util_min"] = [0, None, 0, -3]  # slice 3: a negative reading
    v["util_avg"] = [0, None, 0, 0]
    v["engine"] = [0.0, None, 7.0, "NaN"]
    v["temp_max"] = "NaN"
    series = [(gpu("n1", 0, namespace="a", pod="b"), v)]
    gpus, _, _, _ = run(series)
    g = gpus[0]
    assert g.util_max == [0.0, None, None, None]
    assert g.util_avg == [0.0, None, None, None]
    assert g.samples == [10, 0, 0, 0]
    assert g.engine_active_avg == [0.0, None, None, None]
    assert g.temp_c_max is None


def test_nan_average_makes_the_slice_unknown():
    v = steady(0)
    v["util_avg"] = [0, 0, 0, "NaN"]
    gpus, _, _, _ = run([(gpu("n1", 0, namespace="a", pod="b"), v)])
    assert gpus[0].util_max[-1] is None and gpus[0].samples[-1] == 0


def test_series_without_any_sample_is_left_out():
    v = steady(0)
    v["util_count"] = [None] * N
    gpus, _, _, _ = run([(gpu("n1", 0, namespace="a", pod="b"), v)])
    assert gpus == []


def test_one_series_per_gpu_the_occupant_that_reported_last():
    old = steady(80)
    old["util_count"] = [10, 10, None, None]  # the job ended two slices ago (its series went stale)
    old.pop("last_seen")
    free = steady(0)
    free["util_count"] = [None, None, 10, 10]
    series = [(gpu("n1", 0, namespace="a", pod="old"), old), (gpu("n1", 0), free)]
    gpus, _, _, _ = run(series)
    assert len(gpus) == 1 and gpus[0].job is None


def test_last_xid_and_when_it_first_showed():
    v = steady(50)
    v["xid_last"] = [0, 79, 79, 79]
    gpus, _, _, _ = run([(gpu("n1", 0), v)])
    assert gpus[0].xid_last == 79
    # slice 1 is (END - 3 slices, END - 2 slices]; the XID showed within it
    assert gpus[0].xid_at == END - timedelta(seconds=3 * SLICE)


def test_job_io_from_cadvisor_rates():
    io = [({"namespace": "ml", "pod": "train"}, {"cpu_pct": [350.0] * N, "net_rx_mbps": [20.0] * N,
                                                 "disk_read_mbps": [None, 1.0, 1.0, 1.0]}),
          ({"hpc_job": "9"}, {"cpu_pct": [0.5] * N})]
    _, jobs, _, _ = run([], io, job_id_for_hpc_job={"9": "p/nine"})
    by = {j.job: j for j in jobs}
    assert by["ml/train"].cpu_pct == [350.0] * N
    assert by["ml/train"].disk_read_mbps == [None, 1.0, 1.0, 1.0]
    assert by["p/nine"].net_rx_mbps == [None] * N


def test_profiling_fields_power_and_interconnect_come_back_per_slice():
    v = {**steady(100.0), "sm_active": [0.1, 0.12, None, 0.11], "tensor_active": [0.0] * N,
         "dram_active": [0.01, 1.5, 0.01, "NaN"], "power_w": [90.0, 91.0, 89.0, -4.0],
         "nvlink": [3e6, 0.0, None, -1.0], "pcie": [3e5] * N}
    gpus, _, _, _ = run([(gpu("n1", 0, namespace="ml", pod="hung"), v)])
    g = gpus[0]
    assert g.sm_active_avg == [0.1, 0.12, None, 0.11]
    assert g.tensor_active_avg == [0.0] * N
    assert g.dram_active_avg == [0.01, None, 0.01, None]  # out of range or NaN: unknown, never zero
    assert g.power_w_slices == [90.0, 91.0, 89.0, None]
    assert g.nvlink_bytes_avg == [3e6, 0.0, None, None]  # TX + RX, summed by the query; negative: unknown
    assert g.pcie_bytes_avg == [3e5] * N
    assert g.engine_active_avg == [1.0] * N


def test_an_exporter_without_profiling_fields_leaves_them_unknown():
    v = steady(100.0)
    del v["engine"]
    gpus, _, _, _ = run([(gpu("n1", 0, namespace="ml", pod="a"), v)])
    g = gpus[0]
    assert g.util_max == [100.0] * N
    assert (g.sm_active_avg, g.tensor_active_avg, g.dram_active_avg, g.power_w_slices, g.nvlink_bytes_avg,
            g.pcie_bytes_avg, g.engine_active_avg) == ([], [], [], [], [], [], [])


def test_every_profiling_field_is_read_in_one_request():
    full = {**steady(50.0), **{f: [0.5] * N for f in promql.PROFILING_FIELDS}}
    counts = []
    for values in (steady(50.0), full):
        _, _, metrics, fake = run([(gpu("n1", 0, namespace="ml", pod="a"), values)])
        counts.append(metrics.queries)
        profiling = [p["query"] for _, p in fake.requests if "DCGM_FI_PROF_SM_ACTIVE" in p["query"]]
        assert len(profiling) == 1
        assert all(m in profiling[0] for metrics in promql.PROFILING_FIELDS.values() for m in metrics)
        assert "DCGM_FI_PROF_NVLINK_TX_BYTES[300s])) + max by" in profiling[0]  # both directions, one field
        assert profiling[0].count(f'"{promql.FIELD_LABEL}"') == len(promql.PROFILING_FIELDS)
    assert counts == [13, 13]


def many(n: int) -> list[tuple[dict[str, str], dict]]:
    return [(gpu(f"node-{i // 8}", i % 8, namespace="team", pod=f"job-{i // 2}"), steady(float(i % 100)))
            for i in range(n)]


def test_query_count_is_fixed_whatever_the_cluster_size():
    counts = []
    for n in (10, 1000):
        gpus, _, metrics, fake = run(many(n))
        assert len(gpus) == n
        assert metrics.queries == len(fake.requests)
        counts.append(metrics.queries)
    assert counts[0] == counts[1] == 13
    # The coarse long-tail history adds three range queries, whatever the size: 16 per sweep.
    with FakePrometheus(Cluster(many(1000))) as fake:
        metrics = PrometheusMetrics(fake.url)
        assert len(metrics.gpu_history(END, LOOKBACK, SLICE)) == 1000
    assert metrics.queries == len(fake.requests) == 3


def test_history_keeps_max_and_counts_and_drops_out_of_range_slices():
    # The history queries at SLICE are the fine max/min/count queries, so the fake answers them alike.
    series = [
        (gpu("n1", 0, namespace="ml", pod="a"), {**steady(5.0), "util_max": [5.0, 150.0, None, 5.0]}),
        (gpu("n1", 1), steady(0.0)),
    ]
    with FakePrometheus(Cluster(series)) as fake:
        history = PrometheusMetrics(fake.url, sample_interval_s=30).gpu_history(END, LOOKBACK, SLICE)
    by = {h.job: h for h in history}
    assert by["ml/a"].util_max == [5.0, None, None, 5.0]
    assert by["ml/a"].samples == [10, 0, 0, 10]
    assert by["ml/a"].util_min == [5.0, None, None, 5.0]
    assert by["ml/a"].expected == 10
    assert (by[None].node, by[None].gpu, by[None].util_max) == ("n1", 1, [0.0] * N)


def test_query_times_are_exact_and_shifted():
    _, _, _, fake = run([], time_shift=timedelta(seconds=0.5))
    ranges = [p for path, p in fake.requests if path.endswith("query_range")]
    end = END.timestamp() + 0.5
    assert float(ranges[0]["end"]) == pytest.approx(end)
    assert float(ranges[0]["start"]) == pytest.approx(end - (N - 1) * SLICE)
    assert ranges[0]["step"] == "300"


def test_bearer_token_and_headers_are_sent():
    _, _, _, fake = run([], headers={"X-Scope-OrgID": "gpu"}, bearer_token="s3cret")
    assert fake.last_headers.get("Authorization") == "Bearer s3cret"
    assert fake.last_headers.get("X-Scope-OrgID") == "gpu"


def test_a_failing_query_names_itself():
    def broken(path, params):
        raise ValueError("parse error")

    with FakePrometheus(broken) as fake:
        metrics = PrometheusMetrics(fake.url)
        with pytest.raises(PrometheusError, match="DCGM_FI_DEV_GPU_UTIL.*parse error"):
            metrics.gpu_series(END, LOOKBACK, SLICE)


def test_bad_configuration_is_named():
    with pytest.raises(ValueError, match="http"):
        PrometheusMetrics("prometheus:9090")

    class Empty:
        prometheus_url = None

    with pytest.raises(ValueError, match="STEWARD_PROMETHEUS_URL"):
        prometheus_metrics_from_settings(Empty())


def test_factory_reads_settings():
    from agent.config.settings import Settings

    s = Settings(prometheus_url="http://127.0.0.1:9", prometheus_headers={"X-A": "b"})
    m = prometheus_metrics_from_settings(s, sample_interval_s=15.0)
    assert m.url == "http://127.0.0.1:9" and m.sample_interval_s == 15.0
    assert math.isclose(m.time_shift.total_seconds(), 0.0)
