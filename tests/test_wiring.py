"""Settings to deps: STEWARD_BACKEND=kubernetes builds the real adapters and a sweep runs through them.

The Kubernetes API server and Prometheus are faithful loopback fakes (tests/k8s_fake_api.py,
sim/fake_prometheus.py) speaking the real REST protocols; no real cluster can run here.
"""

from __future__ import annotations

import pytest

from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import cluster_deps
from sim.cluster import SimCluster
from sim.fake_prometheus import FakePrometheus
from sim.scenario import parse_scenario
from tests.k8s_fake_api import FakeKubernetesApi
from tests.k8s_fake_cluster import kubeconfig, mirror_sim
from tools.kubernetes import KubernetesScheduler
from tools.prometheus import PrometheusMetrics

SCENARIO = {
    "version": 1, "name": "wiring", "duration": "2h",
    "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 1}],
    "jobs": [{"id": "ml/notebook", "user": "alice", "gpus": 2, "node": "a100-0",
              "phases": [{"gpu_util": 0, "gpu_mem_gb": 10}]}],
}


def test_kubernetes_backend_sweeps_and_missing_metrics_mean_no_action(tmp_path):
    api = FakeKubernetesApi().start()
    # Prometheus answers, but has no samples at all.
    with FakePrometheus(lambda path, params: []) as prometheus:
        try:
            _sweep_once(api, prometheus, tmp_path)
        finally:
            api.stop()


def _sweep_once(api, prometheus, tmp_path):
    mirror_sim(api, SimCluster(parse_scenario(SCENARIO)))
    settings = Settings(backend="kubernetes", kubeconfig=kubeconfig(api, tmp_path), data_dir=tmp_path,
                        prometheus_url=prometheus.url)
    deps = cluster_deps(settings, Policy(), PolicyModel())
    assert isinstance(deps.scheduler, KubernetesScheduler) and isinstance(deps.metrics, PrometheusMetrics)
    result = SweepService(deps).sweep()
    assert result.state["observed"]["jobs"] == 1
    assert result.state["findings"] == []  # no data is never "idle"
    assert not [m for m, _, _ in api.requests if m != "GET"]
    assert prometheus.requests




def test_the_currency_prices_are_in_is_a_setting(tmp_path, monkeypatch):
    """A team whose steward.io/price-per-gpu-hour annotations are in yuan says so once: every cost shown follows."""
    from pydantic import ValidationError

    api = FakeKubernetesApi().start()
    try:
        monkeypatch.setenv("STEWARD_CURRENCY", "CNY")
        settings = Settings(backend="kubernetes", kubeconfig=kubeconfig(api, tmp_path), data_dir=tmp_path,
                            prometheus_url="http://127.0.0.1:9")
        assert cluster_deps(settings, Policy(), PolicyModel()).currency == "CNY"
    finally:
        api.stop()
    monkeypatch.setenv("STEWARD_CURRENCY", "yuan")
    with pytest.raises(ValidationError, match="currency"):
        Settings()


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="STEWARD_BACKEND='nomad'"):
        cluster_deps(Settings(backend="nomad", prometheus_url="http://127.0.0.1:9"), Policy(), PolicyModel())


def test_serve_runs_against_a_real_backend(tmp_path):
    """`steward serve` with STEWARD_BACKEND=kubernetes: the API answers from the real adapters."""
    from fastapi.testclient import TestClient

    from server import create_app

    api = FakeKubernetesApi().start()
    with FakePrometheus(lambda path, params: []) as prometheus:
        try:
            mirror_sim(api, SimCluster(parse_scenario(SCENARIO)))
            settings = Settings(backend="kubernetes", kubeconfig=kubeconfig(api, tmp_path), data_dir=tmp_path,
                                prometheus_url=prometheus.url, leader_lock="none")
            with TestClient(create_app(settings, run_scheduler=False), base_url="http://localhost") as client:
                assert client.post("/api/sweeps").status_code == 200
                assert client.get("/api/findings").json() is not None
                assert client.get("/healthz").status_code == 200
        finally:
            api.stop()


def _cluster_without_prometheus(api, tmp_path, monkeypatch) -> None:
    """`steward sweep`'s settings for a real Kubernetes backend (the loopback API) whose Prometheus does not answer."""
    from tests.conftest import free_port

    mirror_sim(api, SimCluster(parse_scenario(SCENARIO)))
    monkeypatch.setenv("STEWARD_BACKEND", "kubernetes")
    monkeypatch.setenv("STEWARD_KUBECONFIG", str(kubeconfig(api, tmp_path)))
    monkeypatch.setenv("STEWARD_PROMETHEUS_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("STEWARD_RUNBOOKS_ENABLED", "false")


def test_a_cluster_sweep_that_could_not_read_exits_3_for_cron(tmp_path, monkeypatch, capsys):
    """`steward sweep` against a real backend whose Prometheus does not answer: it reports the degradation and
    exits 3, so cron and monitoring tell it from a clean sweep (it exited 0)."""
    from agent.cli.main import main

    api = FakeKubernetesApi().start()
    try:
        _cluster_without_prometheus(api, tmp_path, monkeypatch)
        assert main(["sweep"]) == 3
        assert "cluster not read: metrics unavailable" in capsys.readouterr().out
    finally:
        api.stop()


def test_a_cron_sweep_beside_the_server_does_nothing_while_the_server_holds_the_sweeper_lease(tmp_path, monkeypatch,
                                                                                                capsys):
    """A cron `steward sweep` on the server's data dir used to run beside the server's sweep: the job in flight was
    evicted (and warned) twice. It takes the server's lease now: held by the server, the cron sweep reads and does
    nothing and exits 75 (EX_TEMPFAIL); once the lease is free it sweeps, and lets the lease go after. (A server
    outside the cluster, with the lease row in the data dir: with STEWARD_LEADER_LOCK=auto both would take the
    cluster's Lease, tests/test_cluster_lease.py.)"""
    from agent.cli.main import main
    from agent.cli.sweep import BUSY_EXIT, LEASE_EXIT
    from agent.scheduling.leases import SqliteLease
    from tests.k8s_fake_api import Fault

    api = FakeKubernetesApi().start()
    try:
        _cluster_without_prometheus(api, tmp_path, monkeypatch)
        monkeypatch.setenv("STEWARD_LEADER_LOCK", "sqlite")
        (tmp_path / "data").mkdir()
        server = SqliteLease(tmp_path / "data" / "leases.sqlite", "gpu-steward-sweeper", "server-pod-1", 600)
        assert server.acquire()
        assert main(["sweep"]) == BUSY_EXIT
        captured = capsys.readouterr()
        assert "not swept: another steward holds the sweeper lease 'gpu-steward-sweeper' (server-pod-1)" in captured.err
        assert captured.out == ""  # no report: nothing was read, judged or done
        assert server.current_holder() == "server-pod-1"  # the cron run did not take or drop the server's lease
        server.release()
        assert main(["sweep"]) == 3  # swept (Prometheus is not there: degraded, as above)
        assert server.current_holder() is None  # and gave the lease back
        # A lease that cannot be taken at all (the Kubernetes Lease, which this kubeconfig's user may not use) is a
        # configuration error, said as such, not "busy" forever.
        monkeypatch.setenv("STEWARD_LEADER_LOCK", "kubernetes")
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        api.inject(Fault("GET", "/leases/", status=403, reason="Forbidden", times=-1))
        assert main(["sweep"]) == LEASE_EXIT
        assert "not swept: the sweeper lease 'gpu-steward-sweeper' (STEWARD_LEADER_LOCK=kubernetes) cannot be taken" \
            in capsys.readouterr().err
    finally:
        api.stop()
