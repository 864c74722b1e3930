"""Issue 17, service layer: the simulated exporter serves vLLM's metrics for serving jobs (`requests_per_s`,
`latency_s`), and the shipped latency alert, on a clock scaled to the exporter's speed, lets a transient blip
go by (pending at most) while a sustained breach fires."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from sim.exporter_server import ExporterServer, SimExporter
from sim.scenario import ScenarioError, load_scenario, parse_scenario
from sim.vllm import LATENCY_BUCKETS, latency_cdf
from tests.test_prometheus_integration import _get, _start_prometheus, _wait, rules_at_speed

DATA = Path(__file__).parent / "data" / "serving-latency.yaml"
BLIP = Path(__file__).parents[1] / "evals" / "scenarios" / "inference-latency-blip.yaml"
LINE = re.compile(r'^(?P<name>[^{\s]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


def _series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            labels = frozenset(tuple(kv.split("=", 1)) for kv in re.findall(r'\w+="[^"]*"', m["labels"]))
            out[(m["name"], frozenset((k, v.strip('"')) for k, v in labels))] = float(m["value"])
    return out


def _pick(series: dict, name: str, **want: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in series.items()
            if n == name and all((k, v2) in labels for k, v2 in want.items())}


def _scrape_at(exporter: SimExporter, clock: list[float], offset_s: float) -> dict:
    clock[0] = exporter.wall_at(offset_s)
    return _series(exporter.scrape())


def test_exporter_serves_vllm_series_with_their_labels_and_counters():
    clock = [0.0]
    exporter = SimExporter(load_scenario(DATA), speed=1.0, wall_clock=lambda: clock[0])
    scrapes = [_scrape_at(exporter, clock, t) for t in (60.0, 300.0, 590.0, 660.0, 1200.0)]
    text = exporter.scrape()
    assert "# TYPE vllm:e2e_request_latency_seconds histogram" in text
    assert "# TYPE vllm:request_success_total counter" in text and "# TYPE vllm:num_requests_running gauge" in text
    last = scrapes[-1]
    for model, pod in (("chat-blip", "chat-blip"), ("chat-overloaded", "chat-overloaded")):
        owner = {"model_name": model, "engine": "0", "namespace": "serve", "pod": pod}
        buckets = _pick(last, "vllm:e2e_request_latency_seconds_bucket", **owner)
        assert len(buckets) == len(LATENCY_BUCKETS) + 1  # vLLM's buckets and +Inf
        assert all(dict(labels).keys() == set(owner) | {"le"} for labels in buckets)
        ordered = sorted(buckets.items(), key=lambda kv: float(dict(kv[0])["le"]))
        counts = [v for _, v in ordered]
        assert counts == sorted(counts), "bucket counts grow with le"
        assert dict(ordered[-1][0])["le"] == "+Inf"
        (count,) = _pick(last, "vllm:e2e_request_latency_seconds_count", **owner).values()
        assert count == counts[-1] and 7 * 1200 * 0.95 <= count <= 9 * 1200 * 1.05
        reasons = _pick(last, "vllm:request_success_total", **owner)
        assert {dict(labels)["finished_reason"] for labels in reasons} == {"stop", "length", "abort"}
        assert sum(reasons.values()) <= count and sum(reasons.values()) >= count - 2
        # every counter and bucket only grows from one scrape to the next
        for name in ("vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
                     "vllm:e2e_request_latency_seconds_count", "vllm:request_success_total"):
            for before, after in zip(scrapes, scrapes[1:], strict=False):
                b, a = _pick(before, name, **owner), _pick(after, name, **owner)
                assert a.keys() == b.keys() and all(a[k] >= b[k] for k in a), name
    # Mean latency from the histogram: ~1.5 s before the blip; during it the running requests pile up.
    def mean(s: dict, model: str) -> float:
        (total,) = _pick(s, "vllm:e2e_request_latency_seconds_sum", model_name=model).values()
        (count,) = _pick(s, "vllm:e2e_request_latency_seconds_count", model_name=model).values()
        return total / count
    assert 1.2 <= mean(scrapes[2], "chat-blip") <= 1.8
    (running,) = _pick(scrapes[3], "vllm:num_requests_running", model_name="chat-blip").values()
    assert running > 100  # Little's law: ~8/s x 25-35 s
    # A Slurm job without serving keys serves no vLLM series.
    assert 'hpc_job="batch-train"' not in "".join(line for line in text.splitlines() if line.startswith("vllm:"))


def test_latency_distribution_is_lognormal_around_the_mean():
    assert latency_cdf(1.5, 1.5) == pytest.approx(0.599, abs=0.01)  # mean above median: a right-skewed tail
    assert latency_cdf(10.0, 1.5) > 0.999 and latency_cdf(10.0, 30.0) < 0.05
    assert [latency_cdf(le, 2.0) for le in LATENCY_BUCKETS] == sorted(latency_cdf(le, 2.0) for le in LATENCY_BUCKETS)


def test_serving_keys_are_validated():
    base = {"name": "x", "duration": "1h", "nodes": [{"name": "n", "gpus": 1}]}
    job = {"id": "a/b", "phases": [{"requests_per_s": -1}]}
    with pytest.raises(ScenarioError, match="requests_per_s"):
        parse_scenario(base | {"jobs": [job]})
    ok = parse_scenario(base | {"jobs": [{"id": "a/b", "model_name": "m", "phases": [{"latency_s": [1, 2]}]}]})
    assert ok.jobs[0].phases[0].latency_s == (1.0, 2.0) and ok.jobs[0].model_name == "m"


def test_blip_scenario_serves_steady_traffic_and_one_spike():
    clock = [0.0]
    exporter = SimExporter(load_scenario(BLIP), speed=1.0, wall_clock=lambda: clock[0])
    means = []
    for t in (60 * 60.0, 89 * 60.0, 93 * 60.0, 120 * 60.0):
        s = _scrape_at(exporter, clock, t)
        (total,) = _pick(s, "vllm:e2e_request_latency_seconds_sum", model_name="qwen2.5-72b-instruct").values()
        (count,) = _pick(s, "vllm:e2e_request_latency_seconds_count", model_name="qwen2.5-72b-instruct").values()
        means.append((total, count))
    window = [(t2 - t1) / (c2 - c1) for (t1, c1), (t2, c2) in zip(means, means[1:], strict=False)]
    assert window[0] < 2.0 and window[1] > 10.0 and window[2] < 2.0  # the blip is in the middle window only


@pytest.mark.integration
def test_latency_alert_ignores_a_blip_and_fires_on_a_sustained_breach(tmp_path):
    """The shipped rules at 30x (for: 10m -> 20 s, [5m] -> 10 s) on the exporter playing tests/data/serving-latency:
    a 2-minute latency blip makes InferenceLatencySLOBreach pending at most; a sustained breach fires."""
    speed = 30.0
    gen = _start_prometheus(tmp_path, (rules_at_speed(tmp_path, speed),))
    url, exporter_port = next(gen)
    # From 5m: 10 s of normal traffic before both change at 10m; the breach fires ~20 s after that.
    exporter = SimExporter(load_scenario(DATA), speed=speed, start_at=5 * 60.0)
    server = ExporterServer(exporter, port=exporter_port).start()
    seen: dict[str, set[str]] = {}

    def poll() -> dict[str, set[str]]:
        for a in json.loads(_get(f"{url}/api/v1/alerts"))["data"]["alerts"]:
            seen.setdefault(f'{a["labels"]["alertname"]}/{a["labels"].get("model_name", "")}', set()).add(a["state"])
        return seen

    try:
        _wait("the sustained breach to fire",
              lambda: "firing" in poll().get("InferenceLatencySLOBreach/chat-overloaded", set()), 50)
        # Keep watching until the blip's window (its 2 minutes + the 5-minute rate window) has passed.
        _wait("the blip to leave the rate window", lambda: exporter.offset_at(time.time()) > 18 * 60.0 and bool(poll()), 30)
        assert "pending" in seen.get("InferenceLatencySLOBreach/chat-blip", set()), seen  # the rule saw the blip
        assert "firing" not in seen.get("InferenceLatencySLOBreach/chat-blip", set()), seen
        assert not any(k.startswith("InferenceErrorRateHigh/") for k in seen), seen  # no request aborted
        groups = json.loads(_get(f"{url}/api/v1/rules"))["data"]["groups"]
        broken = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"]
                  if r["health"] != "ok" or r.get("lastError")]
        assert not broken, broken
        # The Prometheus backend reads the same counter into the sweep's request rate (tools/promql.py): 8
        # requests per scenario second at 30x is ~240 per wall second; a job serving no vLLM counter has none.
        from datetime import UTC, datetime

        from tools.prometheus import PrometheusMetrics

        io = {s.job: s for s in PrometheusMetrics(url).job_io_series(datetime.now(UTC), 30.0, 10.0)}
        rates = [r for r in io["serve/chat-blip"].requests_per_s if r is not None]
        assert rates and all(0.75 * 8 * speed <= r <= 1.25 * 8 * speed for r in rates[-2:]), rates
        assert all(not s.requests_per_s for job, s in io.items() if not job.startswith("serve/")), io.keys()
    finally:
        server.stop()
        gen.close()


def _service(quiet_rps: float | None, labels: dict[str, str] | None = None) -> dict:
    """idle-inference-service's vLLM server, its quiet hours serving `quiet_rps` requests/s (None: rate unknown)."""
    busy = {"duration": "40m", "gpu_util": [20, 60], "gpu_mem_gb": 40, "cpu_pct": [50, 120], "log": "lines"}
    quiet: dict = {"gpu_util": 0, "cpu_pct": [0.5, 3], "log": "silent"}
    if quiet_rps is not None:
        busy |= {"requests_per_s": [2, 4], "latency_s": 1.5}
        quiet["requests_per_s"] = quiet_rps
    return {"name": "svc", "duration": "4h", "step": "60s",
            "pools": [{"name": "a100", "gpus_per_node": 8, "nodes": 1, "price_per_gpu_hour": 4.1}],
            "jobs": [{"id": "nlp/vllm-chat", "gpus": 2, "annotations": {"steward.io/warmup": "4m"},
                      "labels": {"app.kubernetes.io/component": "inference"} if labels is None else labels,
                      "phases": [busy, quiet]}]}


def _service_findings(data: dict) -> list:
    from agent.config.policy import Policy
    from agent.detectors.engine import run_detectors
    from agent.planning.policy_model import PolicyModel
    from agent.wiring import simulated_deps

    deps, cluster = simulated_deps(parse_scenario(data), Policy(), PolicyModel())
    cluster.advance_to(3 * 3600)
    return [f for f in run_detectors(deps.observe(), Policy()) if f.target == "nlp/vllm-chat"]


def test_idle_service_advice_counts_the_requests_of_its_window():
    from agent.detectors.evidence import describe

    [none] = _service_findings(_service(0.0))
    assert none.kind == "idle_serving" and none.metrics["requests"] == 0
    assert "; no requests in the last " in none.evidence and "Scale it to zero" in none.evidence
    assert "内没有请求" in describe(none, "zh")
    [few] = _service_findings(_service(0.002))  # ~7 an hour: a trickle, still a candidate for scale to zero
    assert few.kind == "idle_serving" and 5 <= few.metrics["requests"] <= 30
    assert f"; {few.metrics['requests']:.0f} requests in the last " in few.evidence
    assert f"内 {few.metrics['requests']:.0f} 个请求" in describe(few, "zh")
    [unknown] = _service_findings(_service(None))  # no vLLM metrics: the advice as before, no count
    assert unknown.kind == "idle_serving" and "requests" not in unknown.metrics and "request" not in unknown.evidence


def test_a_service_with_requests_flowing_is_not_idle_however_quiet_its_gpu():
    assert _service_findings(_service(0.5)) == []  # 30 requests a minute finishing between GPU samples
    # A job that serves vLLM request metrics is a service even without a serving label.
    [f] = _service_findings(_service(0.0, labels={}))
    assert f.kind == "idle_serving" and "serves vLLM request metrics" in f.evidence
