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


# What a MIG instance's utilisation reads come from: its GR_ENGINE_ACTIVE samples (and their scale).
MIG_READS = {"util_max": ("engine_max", 100.0), "util_min": ("engine_min", 100.0), "util_avg": ("engine", 100.0),
             "util_count": ("engine_count", 1.0), "last_seen": ("engine_seen", 1.0)}


def mig(host: str, parent: int, instance: int, **labels: str) -> dict[str, str]:
    """A MIG instance's labels as dcgm-exporter gives them: the parent GPU's gpu and UUID, and the instance."""
    return {**gpu(host, parent), "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": str(instance), **labels}


def mig_steady(engine: float, count: int = 10) -> dict:
    """A MIG instance whose GR_ENGINE_ACTIVE reads `engine` while its GPU_UTIL reads 0 (dcgm-exporter#216)."""
    return {**steady(0.0, count), "engine": [engine] * N, "engine_max": [engine] * N, "engine_min": [engine] * N,
            "engine_count": [count] * N, "engine_seen": END.timestamp()}


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
        # The profiling query answers every DCGM field the exporter has, each series tagged with its field; the disk
        # query each of read and write whose counter it names, tagged alike.
        fields = (list(promql.PROFILING_FIELDS) if name == "profiling"
                  else [f for f, metric in promql.DISK_FIELDS.items() if metric in query] if name == "disk" else [name])
        out = []
        for labels, values, field in ((lb, v, f) for lb, v in rows for f in fields):
            scale = 1.0
            if labels.get("GPU_I_ID") and field in MIG_READS:
                # A MIG instance: the query's GPU_UTIL side excludes it (GPU_I_ID=""), its GR_ENGINE_ACTIVE side
                # (GPU_I_ID!="") answers the engine's samples, x 100 but for the count. The fake reads the query
                # text, so a query that still read GPU_UTIL for MIG would get the 0 that dcgm-exporter reports.
                if f'{promql.UTIL}{{{promql.NOT_MIG}}}' not in query:
                    pass  # an old query: it reads the instance's GPU_UTIL (`values[field]`, the 0 of #216)
                elif f'{promql.ENGINE}{{{promql.IS_MIG}}}' in query:
                    field, scale = MIG_READS[field]
                else:
                    continue
            if field not in values:
                continue
            metric = {k: labels[k] for k in keys if k in labels}
            if name in ("profiling", "disk"):
                metric[promql.FIELD_LABEL] = field
            v = values[field]
            if scale != 1.0:
                v = [x * scale if x is not None else None for x in v] if isinstance(v, list) else v * scale
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


def test_disk_writes_come_back_beside_reads_in_one_request():
    """A copy from network storage to local disk: no read the job's counters see, writes at speed. Read and write are
    one tagged request (the sweep's count does not grow); a job whose source has no write series has it unknown."""
    io = [({"hpc_job": "5512873"}, {"cpu_pct": [20.0] * N, "net_rx_mbps": [0.0] * N, "disk_read_mbps": [0.0] * N,
                                    "disk_write_mbps": [250.0, 240.0, None, 260.0]}),
          ({"namespace": "ml", "pod": "train"}, {"cpu_pct": [350.0] * N, "disk_read_mbps": [400.0] * N})]
    _, jobs, metrics, fake = run([], io, job_id_for_hpc_job={"5512873": "gpu/stage"})
    by = {j.job: j for j in jobs}
    assert by["gpu/stage"].disk_write_mbps == [250.0, 240.0, None, 260.0]
    assert by["gpu/stage"].disk_read_mbps == [0.0] * N
    assert by["ml/train"].disk_read_mbps == [400.0] * N and by["ml/train"].disk_write_mbps == [None] * N
    disk = [p["query"] for _, p in fake.requests if promql.DISK_READ in p["query"]]
    assert len(disk) == 1 and promql.DISK_WRITE in disk[0]
    assert disk[0].count(f'"{promql.FIELD_LABEL}"') == 2
    assert "sum by (namespace, pod, hpc_job) (rate(container_fs_writes_bytes_total{" in disk[0]
    assert metrics.queries == 14  # as before: 10 GPU, 4 process I/O (CPU, network, disk read and write, vLLM requests)


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
    assert counts == [14, 14]  # 10 GPU, 4 process I/O


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
    assert counts[0] == counts[1] == 14
    # The coarse long-tail history adds three range queries, whatever the size: 17 per sweep.
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
        with pytest.raises(PrometheusError, match="^gpu metrics: .*parse error.*query of DCGM_FI_DEV_GPU_UTIL") as err:
            metrics.gpu_series(END, LOOKBACK, SLICE)
        assert len(str(err.value)) < 400  # the cause first, the query named, not spelled out


def test_a_refused_connection_says_so_without_the_encoded_query():
    metrics = PrometheusMetrics("http://127.0.0.1:9", timeout_s=0.5, retry=False)
    with pytest.raises(PrometheusError) as err:
        metrics.gpu_series(END, LOOKBACK, SLICE)
    text = str(err.value)
    assert text.startswith("gpu metrics: query_range on http://127.0.0.1:9 failed") and "query=" not in text
    assert "Connection refused" in text or "Max retries" in text


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


def test_settings_carry_the_sample_interval_token_and_selector_from_the_environment(monkeypatch):
    """docs/real-cluster-prometheus.md names these settings: they must exist, or a 1-minute scrape is unsettable."""
    from agent.config.settings import Settings

    monkeypatch.setenv("STEWARD_PROMETHEUS_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("STEWARD_PROMETHEUS_SAMPLE_INTERVAL_S", "60")
    monkeypatch.setenv("STEWARD_PROMETHEUS_BEARER_TOKEN", "t0k")
    monkeypatch.setenv("STEWARD_PROMETHEUS_SELECTOR", 'cluster="gpu-prod"')
    monkeypatch.setenv("STEWARD_PROMETHEUS_TIMEOUT_S", "90")
    m = prometheus_metrics_from_settings(Settings())
    assert m.sample_interval_s == 60.0 and m.selector == 'cluster="gpu-prod"' and m.client._timeout == 90.0
    assert m.client.headers == {"Authorization": "Bearer t0k"}
    monkeypatch.setenv("STEWARD_PROMETHEUS_SAMPLE_INTERVAL_S", "0")
    with pytest.raises(ValueError, match="prometheus_sample_interval_s"):
        Settings()


def test_a_sample_interval_set_shorter_than_the_real_one_is_said_not_silent():
    # Prometheus' own default scrape is 1 minute: 5 samples a 5-minute slice against the 10 a 30 s setting expects.
    # Coverage would stay at 50 % and no job would ever be judged idle, without a word.
    series = [(gpu("n1", i, namespace="ml", pod=f"p{i}"), steady(0, count=5)) for i in range(3)]
    gpus, _, metrics, _ = run(series, sample_interval_s=30)
    assert {g.expected for g in gpus} == {10}
    (line,) = metrics.warnings
    assert "no GPU's slice holds the 10 samples" in line and "at most 5" in line and "every 1m" in line
    assert "STEWARD_PROMETHEUS_SAMPLE_INTERVAL_S" in line
    # The right setting, or one full slice anywhere (an outage is not a setting): nothing to say.
    assert run(series, sample_interval_s=60)[2].warnings == []
    mixed = [*series, (gpu("n2", 0, namespace="ml", pod="q"), steady(0, count=10))]
    assert run(mixed, sample_interval_s=30)[2].warnings == []


def test_a_sample_interval_longer_than_the_slice_is_said():
    series = [(gpu("n1", 0, namespace="ml", pod="p"), steady(0, count=1))]
    _, _, metrics, _ = run(series, sample_interval_s=600)
    assert any("sampled every 10m, longer than the 5m slice" in w and "detectors.slice" in w
               for w in metrics.warnings)


def test_a_busy_mig_instance_reads_its_engine_activity_not_its_zero_gpu_util():
    """dcgm-exporter#216/#105: GPU_UTIL reads 0 on a MIG instance however busy; GR_ENGINE_ACTIVE is the truth."""
    gpus, _, metrics, _ = run([(mig("n1", 0, 7, namespace="ml", pod="nb"), mig_steady(0.6))], sample_interval_s=30)
    (g,) = gpus
    assert g.job == "ml/nb"
    assert g.util_max == pytest.approx([60.0] * N) and g.util_avg == pytest.approx([60.0] * N)
    assert g.samples == [10] * N and g.expected == 10  # full slices: a known reading, far from idle
    assert g.engine_active_avg == [0.6] * N
    assert metrics.queries == 14  # 10 GPU, 4 process I/O: MIG costs no request


def test_a_quiet_mig_instance_reads_zero_with_full_samples():
    gpus, _, _, _ = run([(mig("n1", 0, 7, namespace="ml", pod="nb"), mig_steady(0.0))], sample_interval_s=30)
    (g,) = gpus
    assert g.util_max == [0.0] * N and g.util_avg == [0.0] * N and g.samples == [10] * N


def test_a_mig_instance_without_engine_activity_is_unknown_never_idle():
    """An exporter without DCP profiling has no GR_ENGINE_ACTIVE: the instance has no utilisation samples at all
    (its GPU_UTIL, 0, is not read), so nothing can call it idle."""
    v = mig_steady(0.0)
    for name in ("engine", "engine_max", "engine_min", "engine_count", "engine_seen"):
        del v[name]
    gpus, _, _, _ = run([(mig("n1", 0, 7, namespace="ml", pod="nb"), v)])
    assert gpus == []


def test_two_instances_of_one_gpu_held_by_two_pods_are_two_series():
    series = [(mig("n1", 0, 7, namespace="ml", pod="idle-nb"), mig_steady(0.0)),
              (mig("n1", 0, 8, namespace="ml", pod="server"), mig_steady(0.7)),
              (mig("n1", 1, 7), mig_steady(0.0)),  # a free instance of the next GPU
              (gpu("n1", 2, namespace="ml", pod="train"), steady(90))]  # a whole GPU on the same node
    gpus, _, _, _ = run(series)
    by = {g.job: g for g in gpus}
    assert len(gpus) == 4
    assert len({(g.node, g.gpu) for g in gpus}) == 4  # distinct devices for history joins and node health
    idle, busy, free, whole = by["ml/idle-nb"], by["ml/server"], by[None], by["ml/train"]
    assert idle.util_max == [0.0] * N and busy.util_max == pytest.approx([70.0] * N)
    assert (idle.gpu, busy.gpu, free.gpu) == (10_007, 10_008, 10_107)  # base + parent x 100 + GPU_I_ID
    assert (idle.uuid, busy.uuid, free.uuid) == ("GPU-n1-0/7", "GPU-n1-0/8", "GPU-n1-1/7")
    # A whole GPU is read exactly as before: its index, its UUID, its GPU_UTIL.
    assert (whole.gpu, whole.uuid, whole.util_max, whole.engine_active_avg) == (2, "GPU-n1-2", [90.0] * N, [0.9] * N)


def test_gpu_util_is_read_only_for_whole_gpus_and_engine_activity_only_for_mig_instances():
    queries = promql.gpu_range_queries('namespace="ml"', SLICE)
    util = 'DCGM_FI_DEV_GPU_UTIL{namespace="ml", GPU_I_ID=""}[300s]'
    engine = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{namespace="ml", GPU_I_ID!=""}[300s]'
    k = "by (Hostname, gpu, UUID, GPU_I_ID, modelName, namespace, pod, hpc_job, exported_namespace, exported_pod)"
    assert queries["util_max"] == f"max {k} (max_over_time({util})) or max {k} (max_over_time({engine})) * 100"
    assert queries["util_count"] == f"max {k} (count_over_time({util})) or max {k} (count_over_time({engine}))"
    history = promql.gpu_history_queries("", SLICE)
    assert all("GPU_I_ID!=" in q and 'GPU_I_ID=""' in q for q in history.values())
    last_seen = promql.gpu_instant_queries("", LOOKBACK)["last_seen"]
    assert 'timestamp(DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_ID!=""})' in last_seen


def test_mig_history_comes_from_engine_activity_under_the_same_index():
    series = [(mig("n1", 0, 7, namespace="ml", pod="nb"), mig_steady(0.0)),
              (mig("n1", 0, 8, namespace="ml", pod="server"), mig_steady(0.5))]
    with FakePrometheus(Cluster(series)) as fake:
        metrics = PrometheusMetrics(fake.url, sample_interval_s=30)
        history = metrics.gpu_history(END, LOOKBACK, SLICE)
        fine = metrics.gpu_series(END, LOOKBACK, SLICE)
    by = {h.job: h for h in history}
    assert by["ml/server"].util_max == pytest.approx([50.0] * N) and by["ml/nb"].util_max == [0.0] * N
    assert {(h.node, h.gpu, h.job) for h in history} == {(g.node, g.gpu, g.job) for g in fine}


def test_a_mig_instance_takes_the_parent_gpus_xid_and_temperature_when_only_the_parent_reports_them():
    parent = {"xid_last": [0, 79, 79, 79], "temp_max": 91.0}  # the parent GPU's device-level series only
    inst = mig_steady(0.5)  # its own XID reads 0 throughout
    del inst["temp_max"]
    series = [(gpu("n1", 0), parent), (mig("n1", 0, 7, namespace="ml", pod="nb"), inst)]
    gpus, _, _, _ = run(series)
    (g,) = gpus  # the parent has no utilisation series of its own: only the instance is a GPU series
    assert g.xid_last == 79 and g.temp_c_max == 91.0


def test_a_sample_interval_set_longer_than_the_real_one_is_said_and_coverage_counts_what_full_slices_hold():
    # A 15 s scrape read as 1 minute: full slices hold 20 samples, not 5. A GPU with half of them would read as
    # whole against 5; against what the other GPUs' full slices hold it reads 50 %.
    series = [(gpu("n1", i, namespace="ml", pod=f"p{i}"), steady(0, count=20)) for i in range(3)]
    series.append((gpu("n2", 0, namespace="ml", pod="half"), steady(0, count=10)))
    gpus, _, metrics, _ = run(series, sample_interval_s=60)
    assert {g.expected for g in gpus} == {20}
    half = next(g for g in gpus if g.job == "ml/half")
    assert half.samples == [10] * N
    (line,) = metrics.warnings
    assert "hold about 20 samples, not the 5" in line and "every 15s" in line
    # A job's re-read before acting counts the same way, with no warning of its own.
    from core.cluster import JobInfo

    job = JobInfo(id="ml/half", scheduler="kubernetes", namespace="ml", name="half", user="u", gpus=1)
    with FakePrometheus(Cluster(series)) as fake:
        fleet = PrometheusMetrics(fake.url, sample_interval_s=60)
        fleet.gpu_series(END, LOOKBACK, SLICE)
        scoped = fleet.for_job(job)
        assert scoped._expected("gpu metrics", {}, SLICE) == 20 and scoped.warnings == fleet.warnings
    # The right setting: nothing to say.
    assert run(series, sample_interval_s=15)[2].warnings == []


def test_a_young_prometheus_is_not_taken_for_a_slow_scrape():
    # 75 s of data: each GPU has one slice with samples, partly filled. Nothing says the interval is wrong yet.
    young = {**steady(0, count=5), "util_count": [None, None, None, 5]}
    for k in ("util_max", "util_min", "util_avg"):
        young[k] = [None, None, None, 0.0]
    series = [(gpu("n1", i, namespace="ml", pod=f"p{i}"), young) for i in range(3)]
    assert run(series, sample_interval_s=15)[2].warnings == []


def test_renamed_pod_labels_are_read_from_exported_ones():
    """A scrape with honor_labels off (a ServiceMonitor without honorLabels: true) puts the exporter's own pod in
    namespace/pod and dcgm-exporter's in exported_namespace/exported_pod. The occupant is the exported one; a GPU
    without one is free, not the exporter's; a job's re-read narrows on the exported labels."""
    exporter = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p"}
    series = [(gpu("n1", 0, **exporter, exported_namespace="ml", exported_pod="train"), steady(90)),
              (gpu("n1", 1, **exporter), steady(0))]
    gpus, _, metrics, _ = run(series)
    assert {(g.gpu, g.job) for g in gpus} == {(0, "ml/train"), (1, None)} and metrics.renamed
    from core.cluster import JobInfo

    job = JobInfo(id="ml/train", scheduler="kubernetes", namespace="ml", name="train", user="u", gpus=1)
    with FakePrometheus(Cluster(series)) as fake:
        fleet = PrometheusMetrics(fake.url)
        fleet.gpu_series(END, LOOKBACK, SLICE)
        scoped = fleet.for_job(job)
        assert 'exported_namespace="ml", exported_pod="train"' in scoped._gpu_selector()
        assert scoped._io_selector() == 'namespace="ml", pod="train"'


def test_a_selector_given_with_its_braces_is_taken():
    assert PrometheusMetrics("http://127.0.0.1:9", selector='{cluster="gpu-prod"}').selector == 'cluster="gpu-prod"'
