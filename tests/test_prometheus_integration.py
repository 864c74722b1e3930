"""Round trip through a real Prometheus: it scrapes the simulated exporter, and a sweep whose metrics come only
from PromQL finds the same waste (kinds and targets) as the in-process simulator at the same instant."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent.config.policy import parse_policy
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from sim.exporter_server import ExporterServer, SimExporter
from sim.scenario import load_scenario, parse_scenario
from tests.conftest import free_port, require_binary
from tools.prometheus import PrometheusMetrics

pytestmark = pytest.mark.integration

SCENARIO = Path(__file__).parent / "data" / "prometheus-roundtrip.yaml"
SWEEP_AT = 27.0  # scenario seconds: every window (20s) lies after the phase changes at 5s
# Seconds-scale detector windows so the test runs on the scenario's real clock (speed 1).
POLICY = {
    "mode": "observe",
    "detectors": {"slice": "5s", "idle": {"window": "20s"}, "zombie": {"window": "20s"},
                  "overprovisioned": {"window": "20s"}, "longtail": {"lookback": "40s", "history_slice": "10s"},
                  "pools": {"empty_window": "20s"}},
}


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.read()


def _wait(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _start_prometheus(tmp_path: Path, rule_files: tuple[Path, ...] = ()) -> Iterator[tuple[str, int]]:
    """A real Prometheus scraping a simulated exporter on a free port every second (yields url, exporter port)."""
    binary = require_binary("prometheus")
    exporter_port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    rules = "".join(f"  - {path}\n" for path in rule_files)
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + f"scrape_configs:\n  - job_name: sim\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{prom_port}"
    try:
        _wait("prometheus to be ready", lambda: _get(url + "/-/ready") is not None, 30)
        yield url, exporter_port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def prometheus(tmp_path):
    yield from _start_prometheus(tmp_path)


def _findings(deps) -> set[tuple[str, str]]:
    state = SweepService(deps).sweep(trigger="test").state
    return {(f["kind"], f["target"]) for f in state["findings"]}


def _roundtrip_exporter(exporter_port: int):
    """The round-trip scenario, its seconds-scale policy, and its exporter serving on the port Prometheus scrapes."""
    scenario = load_scenario(SCENARIO)
    exporter = SimExporter(scenario, speed=1.0)
    return scenario, parse_policy(POLICY, "test policy"), exporter, ExporterServer(exporter, port=exporter_port).start()


def test_sweep_through_prometheus_matches_in_process(prometheus):
    url, exporter_port = prometheus
    scenario, policy, exporter, server = _roundtrip_exporter(exporter_port)
    try:
        sweep_wall = exporter.wall_at(SWEEP_AT)
        # Wait until Prometheus has stored the scrapes up to the sweep instant (and one more).
        _wait("the scenario clock to pass the sweep instant", lambda: time.time() > sweep_wall + 2.0, SWEEP_AT + 30)
        up = json.loads(_get(f"{url}/api/v1/query?query=up&time={sweep_wall:.3f}"))["data"]["result"]
        assert up and up[0]["value"][1] == "1", f"prometheus did not scrape the exporter: {up}"

        expected_deps, expected_cluster = simulated_deps(scenario, policy, PolicyModel())
        expected_cluster.advance_to(SWEEP_AT)
        expected = _findings(expected_deps)

        deps, cluster = simulated_deps(scenario, policy, PolicyModel())
        cluster.advance_to(SWEEP_AT)
        slurm = {j.name: j.id for j in scenario.jobs if j.scheduler == "slurm"}
        # 1.25s: a slice of 5s expects 4 samples, so a late 1s scrape on a busy machine is not a gap.
        metrics = PrometheusMetrics(url, job_id_for_hpc_job=slurm, sample_interval_s=1.25,
                                    time_shift=exporter.time_shift())
        deps.metrics = metrics
        got = _findings(deps)
    finally:
        server.stop()

    kinds = {kind for kind, _ in expected}
    assert kinds == {"idle", "zombie", "overprovisioned", "node_health", "oversized"}, expected
    assert got == expected
    assert metrics.queries == 17  # 10 GPU, 3 coarse history, 4 process I/O (CPU, network, disk read+write, vLLM)
    # Disk read and write came through one tagged PromQL request, as cAdvisor's two counters.
    io = {s.job: s for s in metrics.job_io_series(cluster.now(), 20.0, 5.0)}
    assert 4.0 < (io["ml/busy"].disk_write_mbps[-1] or 0.0) < 16.0 and io["ml/busy"].disk_read_mbps[-1] == 0.0
    assert io["cv/hung"].disk_write_mbps[-1] == 0.0 and io["cv/hung"].disk_read_mbps[-1] == 0.0
    gpus = metrics.gpu_series(cluster.now(), 20.0, 5.0)
    assert {g.job for g in gpus} >= {"ml/busy", "ml/notebook", "cv/hung", "research/sweep", "gpu-long/ablation"}
    assert len(gpus) == 24  # every GPU of the three nodes, once
    # The DCGM profiling fields came through PromQL (one tagged query): the hung job's GPUs pinned but idle inside.
    by_job = {g.job: g for g in gpus if g.job}
    hung, busy = by_job["cv/hung"], by_job["ml/busy"]
    assert hung.util_avg[-1] >= 99 and hung.sm_active_avg[-1] < 0.15 and hung.tensor_active_avg[-1] == 0.0
    assert hung.power_w_slices[-1] < 110 and hung.nvlink_bytes_avg[-1] == 0.0 and hung.pcie_bytes_avg[-1] == 0.0
    assert busy.sm_active_avg[-1] > 0.5 and busy.power_w_slices[-1] > 300 and busy.nvlink_bytes_avg[-1] > 1e10


def test_an_exporter_that_stopped_makes_the_sweep_degraded_not_quiet(prometheus):
    """A dead exporter: Prometheus still answers, with samples that stop. A sweep past them says its GPU metrics are
    stale (degraded: /healthz 503) instead of reporting "no waste found"; nothing is judged on them."""
    url, exporter_port = prometheus
    scenario, policy, exporter, server = _roundtrip_exporter(exporter_port)
    try:
        _wait("the scenario clock to pass the sweep instant", lambda: time.time() > exporter.wall_at(SWEEP_AT) + 2.0,
              SWEEP_AT + 30)
    finally:
        server.stop()  # the exporter dies; Prometheus keeps what it scraped
    deps, cluster = simulated_deps(scenario, policy, PolicyModel())
    later = SWEEP_AT + 15.0  # three 5 s slices after the last scrape
    _wait("three slices to pass the exporter's death", lambda: time.time() > exporter.wall_at(later) + 1.0, 30)
    cluster.advance_to(later)
    slurm = {j.name: j.id for j in scenario.jobs if j.scheduler == "slurm"}
    deps.metrics = PrometheusMetrics(url, job_id_for_hpc_job=slurm, sample_interval_s=1.25,
                                     time_shift=exporter.time_shift())
    state = SweepService(deps).sweep(trigger="test").state
    [stale] = [d for d in state["observed"]["degraded"] if d.startswith("GPU metrics stale")]
    assert "no GPU has a sample since" in stale and "exporter" in stale
    assert not [f for f in state["findings"] if f["kind"] in ("idle", "zombie")]


MIG_SCENARIO = Path(__file__).parents[1] / "evals" / "scenarios" / "mig-slice-idle.yaml"
MIG_START_AT = 2395.0  # scenario seconds: 5 s before the notebook goes idle (40 min)
MIG_SWEEP_AT = 2430.0  # the idle window (20 s) and the long-tail lookback (30 s) lie after the exporter started
MIG_POLICY = {**POLICY, "detectors": {**POLICY["detectors"], "longtail": {"lookback": "30s", "history_slice": "10s"}}}


def test_mig_slices_through_prometheus_match_in_process(prometheus):
    """dcgm-exporter#216/#105: on MIG instances GPU_UTIL reads 0 however busy, and the exporter serves it so. A
    sweep whose metrics come only from PromQL reads each instance's DCGM_FI_PROF_GR_ENGINE_ACTIVE instead, sees
    every instance of the shared A100 as a GPU of its own, and finds the idle notebook's slice and not its busy
    neighbours: the same findings as the in-process simulator at that instant."""
    url, exporter_port = prometheus
    data = yaml.safe_load(MIG_SCENARIO.read_text())
    data["step"] = "1s"  # the same scenario sampled every second, as Prometheus scrapes it (speed 1)
    scenario = parse_scenario(data, str(MIG_SCENARIO))
    policy = parse_policy(MIG_POLICY, "test policy")
    exporter = SimExporter(scenario, speed=1.0, start_at=MIG_START_AT)
    server = ExporterServer(exporter, port=exporter_port).start()
    try:
        sweep_wall = exporter.wall_at(MIG_SWEEP_AT)
        _wait("the scenario clock to pass the sweep instant", lambda: time.time() > sweep_wall + 2.0,
              MIG_SWEEP_AT - MIG_START_AT + 30)
        scraped = json.loads(_get(f"{url}/api/v1/query?query=count(DCGM_FI_DEV_GPU_UTIL)&time={sweep_wall:.3f}"))
        assert scraped["data"]["result"][0]["value"][1] == "7", scraped  # seven 1g.10gb instances of one A100

        expected_deps, expected_cluster = simulated_deps(scenario, policy, PolicyModel())
        expected_cluster.advance_to(MIG_SWEEP_AT)
        expected = _findings(expected_deps)

        deps, cluster = simulated_deps(scenario, policy, PolicyModel())
        cluster.advance_to(MIG_SWEEP_AT)
        metrics = PrometheusMetrics(url, sample_interval_s=1.25, time_shift=exporter.time_shift())
        deps.metrics = metrics
        got = _findings(deps)
    finally:
        server.stop()

    assert expected == {("idle", "course-ml/jupyter-stu042")}, expected
    assert got == expected
    assert metrics.queries == 17  # MIG costs no request
    gpus = metrics.gpu_series(cluster.now(), 20.0, 5.0)
    assert len(gpus) == 7 and len({g.gpu for g in gpus}) == 7  # every instance, once, each a device of its own
    assert {g.uuid.rsplit("/", 1)[0] for g in gpus} == {gpus[0].uuid.rsplit("/", 1)[0]}  # all on one A100
    by_job: dict[str | None, list] = {}
    for g in gpus:
        by_job.setdefault(g.job, []).append(g)
    assert len(by_job["course-ml/tutor-llm"]) == 2 and len(by_job[None]) == 3
    (idle,) = by_job["course-ml/jupyter-stu042"]
    assert idle.util_max[-1] == 0.0 and idle.samples[-1] > 0  # read, and quiet
    busy = by_job["course-ml/tutor-llm"] + by_job["course-ml/jupyter-stu017"]
    assert all(g.util_avg[-1] is not None and g.util_avg[-1] > 20 for g in busy)  # GR_ENGINE_ACTIVE x 100, not 0


RULES = Path(__file__).parents[1] / "deploy" / "prometheus" / "steward-rules.yaml"
XID_SCENARIO = Path(__file__).parents[1] / "evals" / "scenarios" / "node-xid-errors.yaml"


def _rules_without_hold(tmp_path: Path) -> Path:
    """The shipped rules with every `for:` removed, so an alert fires at its first true evaluation: the rules
    hold for minutes of wall time, and this test runs the scenario at 60x. Expressions, labels and annotations
    are the shipped ones, unchanged."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule.pop("for", None)
    out = tmp_path / "steward-rules.nohold.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _scaled(duration: str, speed: float) -> str:
    """A Prometheus duration (`10m`, `1h30m`) divided by `speed`, in whole milliseconds (at least 1 s)."""
    seconds = sum(int(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(duration))
    return f"{max(round(seconds * 1000 / speed), 1000)}ms"


def rules_at_speed(tmp_path: Path, speed: float) -> Path:
    """The shipped rules on a clock `speed` times faster: every `for:` and every range selector (`[5m]`) divided
    by `speed`, so a rule means over the exporter's scenario time what it means on a real cluster (at 30x,
    `rate(...[5m])` with `for: 10m` becomes `rate(...[10000ms])` with `for: 20000ms`). Expressions are otherwise
    the shipped ones, as are labels and annotations."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = _scaled(str(rule["for"]), speed)
            rule["expr"] = re.sub(r"\[([0-9smhdw]+)\]", lambda m: f"[{_scaled(m.group(1), speed)}]", rule["expr"])
    out = tmp_path / f"steward-rules.x{speed:g}.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def test_shipped_rules_evaluate_against_the_simulated_exporter(tmp_path):
    """Issue 17: the alerting rules run in the real Prometheus on the simulator's DCGM series. Every rule
    evaluates without error; the XID 79 node raises GpuXidError and GpuFallenOffBus for that GPU only, the hot
    GPU raises GpuHighTemperature, and the healthy node raises nothing."""
    rules = _rules_without_hold(tmp_path)
    gen = _start_prometheus(tmp_path, (rules,))
    url, exporter_port = next(gen)
    # 60x from 85 min: the XID 79 (at 1 h) is already there, the 93 C GPU (90 min) comes 5 s later and the
    # XID 13 (100 min) 15 s later.
    exporter = SimExporter(load_scenario(XID_SCENARIO), speed=60.0, start_at=85 * 60.0)
    server = ExporterServer(exporter, port=exporter_port).start()

    def alerts() -> list[dict]:
        return json.loads(_get(f"{url}/api/v1/alerts"))["data"]["alerts"]

    def firing(name: str) -> set[tuple[str, str]]:
        return {(a["labels"].get("Hostname", ""), a["labels"].get("gpu", "")) for a in alerts()
                if a["labels"]["alertname"] == name and a["state"] == "firing"}

    try:
        _wait("the XID 13 on gpu-a-2 GPU 0 to fire", lambda: ("gpu-a-2", "0") in firing("GpuXidError"), 60)
        assert firing("GpuFallenOffBus") == {("gpu-a-1", "3")}
        assert firing("GpuXidError") == {("gpu-a-1", "3"), ("gpu-a-2", "0")}
        _wait("the 93 C GPU to fire", lambda: firing("GpuHighTemperature") == {("gpu-a-2", "5")}, 30)
        assert not [a for a in alerts() if a["labels"].get("Hostname") == "gpu-a-3"]
        fired = {a["labels"]["alertname"] for a in alerts()}
        assert all(a["annotations"].get("runbook") for a in alerts())
        groups = json.loads(_get(f"{url}/api/v1/rules"))["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        shipped = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
        assert len(loaded) == len(shipped)
        broken = [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok" or r.get("lastError")]
        assert not broken, broken
        # Nothing else this scenario does not have: no queue, serving or steward alerts from DCGM series alone.
        assert fired <= {"GpuXidError", "GpuFallenOffBus", "GpuHighTemperature"}, fired
    finally:
        server.stop()
        gen.close()
