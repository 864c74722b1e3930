"""The simulated exporter: cAdvisor-style counters, the running clock, the HTTP server and its CLI."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from agent.cli.main import build_parser
from sim.cadvisor import ProcessCounters
from sim.cluster import SimCluster
from sim.exporter_server import ExporterServer, SimExporter
from sim.scenario import load_scenario

SCENARIO = Path(__file__).parent / "data" / "prometheus-roundtrip.yaml"


def _value(text: str, name: str, needle: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and needle in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} with {needle} not in output")


def test_counters_integrate_the_scenario_rates():
    cluster = SimCluster(load_scenario(SCENARIO))
    counters = ProcessCounters(cluster.lifecycle, 1.0)
    cluster.advance_to(10)
    first = counters.render(10.0)
    cluster.advance_to(20)
    second = counters.render(20.0)
    # cv/hung spins 190-210% CPU after 5s (two ranks busy-waiting): 10 samples add 19-21 CPU seconds
    delta = _value(second, "container_cpu_usage_seconds_total", 'pod="hung"') - \
        _value(first, "container_cpu_usage_seconds_total", 'pod="hung"')
    assert 19 <= delta <= 21
    rx = _value(second, "container_network_receive_bytes_total", 'pod="busy"') - \
        _value(first, "container_network_receive_bytes_total", 'pod="busy"')
    assert 20e6 * 10 <= rx <= 40e6 * 10  # 20-40 MB/s
    assert 'hpc_job="ablation"' in second  # Slurm jobs carry dcgm-exporter's hpc_job label
    assert "# TYPE container_cpu_usage_seconds_total counter" in second


def test_exporter_clock_runs_at_speed_from_start_at():
    now = [1000.0]
    exporter = SimExporter(load_scenario(SCENARIO), speed=60, start_at=30, wall_clock=lambda: now[0])
    now[0] += 2.0
    text = exporter.scrape()
    assert exporter.cluster.offset_s == pytest.approx(150.0)
    assert "DCGM_FI_DEV_GPU_UTIL{" in text and "container_cpu_usage_seconds_total{" in text
    assert exporter.wall_at(150.0) == pytest.approx(1002.0)
    now[0] += 1e6  # past the scenario's end the clock stops there
    exporter.scrape()
    assert exporter.cluster.offset_s == exporter.scenario.duration


def test_bad_speed_and_start_are_named():
    scenario = load_scenario(SCENARIO)
    with pytest.raises(ValueError, match="--speed"):
        SimExporter(scenario, speed=0)
    with pytest.raises(ValueError, match="--start-at"):
        SimExporter(scenario, start_at=1e9)


def test_server_serves_metrics_and_status():
    server = ExporterServer(SimExporter(load_scenario(SCENARIO)), port=0).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = r.read().decode()
        with urllib.request.urlopen(base + "/status", timeout=5) as r:
            assert b'"scenario": "prometheus-roundtrip"' in r.read()
    finally:
        server.stop()
    assert 'DCGM_FI_DEV_XID_ERRORS{' in body and 'pod="notebook"' in body


def test_cli_registers_sim_exporter():
    args = build_parser().parse_args(["sim", "exporter", "--scenario", str(SCENARIO), "--port", "0",
                                      "--speed", "60", "--start-at", "2m"])
    assert (args.speed, args.start_at, args.port) == (60.0, 120.0, 0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sim", "exporter", "--speed", "-1"])
