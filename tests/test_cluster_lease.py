"""Everything that sweeps one Kubernetes cluster takes that cluster's Lease, wherever its data dir is.

The in-cluster Deployment sweeps under the Kubernetes Lease (STEWARD_LEADER_LOCK=kubernetes). An operator runs
`steward sweep` from a workstation with a kubeconfig (docs/real-cluster-kubernetes.md, "From a workstation"). With
STEWARD_LEADER_LOCK=auto outside a pod this used to mean a SQLite lease in the workstation's own data dir, so the
two never saw each other: both warned the owner, the second warning rewrote the pod's steward.io/stop-after with a
later deadline, and the Deployment evicted before it. Now `auto` with the Kubernetes backend takes the cluster's
Lease through the kubeconfig; a kubeconfig user without rights on leases gets a clear error, and no sweep.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import CoordinationV1Api

from agent.api.build import make_lease
from agent.config.settings import Settings
from agent.scheduling.k8s_lease import KubernetesLease
from agent.scheduling.scheduler import SweepSchedule, SweepScheduler
from tests.conftest import free_port
from tests.fault_world import NOTEBOOK, World, executions
from tests.k8s_fake_api import Fault
from tools.kubernetes import kubernetes_api_client

POD = "/api/v1/namespaces/ml/pods/idle-notebook"


@pytest.fixture
def world(fault_world):
    return fault_world


def settings(world: World, data_dir, **options) -> Settings:
    return Settings(backend="kubernetes", kubeconfig=world.settings.kubeconfig, data_dir=data_dir, **options)


def guarded(world: World, svc, lease) -> SweepScheduler:
    return SweepScheduler(lambda trigger: svc.sweep(trigger=trigger), world.cluster.now, SweepSchedule(every_s=1), lease)


def test_a_workstation_sweep_beside_the_deployment_takes_the_clusters_lease_and_waits(world, tmp_path):
    # The Deployment's replica: the Lease in its namespace (through its service account in the cluster).
    deployment_lease = KubernetesLease(CoordinationV1Api(kubernetes_api_client(world.settings)),
                                       "gpu-steward-sweeper", "gpu-steward", "gpu-steward-7d9f-x2x4k", 30)
    # The workstation: STEWARD_BACKEND=kubernetes, a kubeconfig, its own data dir, STEWARD_LEADER_LOCK unset.
    workstation_lease = make_lease(settings(world, tmp_path / "workstation", leader_lock="auto"))
    deployment = guarded(world, world.service(), deployment_lease)
    server_dir, world.data_dir = world.data_dir, tmp_path / "workstation"  # the workstation's own data dir
    workstation = guarded(world, world.service(), workstation_lease)
    world.data_dir = server_dir

    world.at(80)
    assert deployment.run_as_leader("schedule")[0] == "ran"  # warns: stop after 10:50
    stop_after = world.pod()["metadata"]["annotations"]["steward.io/stop-after"]
    world.at(100)
    assert workstation.run_as_leader("cli")[0] == "not_leader"  # the Deployment holds the cluster's Lease
    assert workstation_lease.current_holder() == deployment_lease.holder
    world.at(110)
    assert deployment.run_as_leader("schedule")[0] == "ran"  # evicts, at the deadline its own warning gave
    assert len(world.api.calls("PATCH", POD)) == 1
    assert len(world.evictions()) == 1
    assert world.pod() is None or world.pod()["metadata"]["annotations"]["steward.io/stop-after"] == stop_after
    assert [(e.action, e.status) for e in executions(world.service().deps.audit, NOTEBOOK)] == [
        ("notify", "executed"), ("terminate", "executed")]
    stored = world.api.store.objects["leases"][("gpu-steward", "gpu-steward-sweeper")]
    assert stored["spec"]["holderIdentity"] == deployment_lease.holder


def test_a_kubeconfig_user_without_rights_on_leases_gets_a_clear_error_and_no_sweep(world, tmp_path, monkeypatch,
                                                                                   capsys):
    from agent.cli.main import main
    from agent.cli.sweep import LEASE_EXIT

    world.api.inject(Fault("GET", "/leases/", status=403, reason="Forbidden", times=-1,
                           message='leases.coordination.k8s.io "gpu-steward-sweeper" is forbidden'))
    lease = make_lease(settings(world, tmp_path / "workstation", leader_lock="auto"))
    with pytest.raises(PermissionError, match="get, create and update on coordination.k8s.io leases"):
        lease.acquire()

    monkeypatch.setenv("STEWARD_BACKEND", "kubernetes")
    monkeypatch.setenv("STEWARD_KUBECONFIG", str(world.settings.kubeconfig))
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path / "workstation"))
    monkeypatch.setenv("STEWARD_RUNBOOKS_ENABLED", "false")
    monkeypatch.setenv("STEWARD_PROMETHEUS_URL", f"http://127.0.0.1:{free_port()}")  # never asked: nothing sweeps
    monkeypatch.delenv("STEWARD_LEADER_LOCK", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["sweep"]) == LEASE_EXIT
    err = capsys.readouterr().err
    assert "not swept" in err and "may not use the sweeper Lease gpu-steward/gpu-steward-sweeper" in err
    assert "STEWARD_LEADER_LOCK=sqlite" in err  # the stated way out, for a cluster no other steward sweeps
    assert not world.api.calls("PATCH", POD) and not world.evictions()


def _lease(world: World, holder: str, duration_s: float = 30, **clocks) -> KubernetesLease:
    return KubernetesLease(CoordinationV1Api(kubernetes_api_client(world.settings)), "gpu-steward-sweeper",
                           "gpu-steward", holder, duration_s, **clocks)


def test_a_host_clock_ahead_or_behind_never_decides_who_holds_the_lease(world):
    """Expiry was renewTime (the holder's clock) + leaseDurationSeconds against this host's clock: a replica 45 s
    ahead (a new node before NTP synced, a laptop) took the Lease one second after its holder renewed it, and both
    swept; one 45 s behind waited 75 s for a dead holder. Now, as in client-go, a record is taken only once it has
    stood unchanged for a lease duration as the taker saw it, on its own clock."""
    t = [datetime(2026, 12, 3, 12, 0, tzinfo=UTC)]

    def replica(holder: str, skew_s: float) -> KubernetesLease:
        return _lease(world, holder, clock=lambda: t[0] + timedelta(seconds=skew_s))

    a, ahead, behind = replica("replica-a", 0), replica("replica-b", 45), replica("replica-c", -45)
    assert a.acquire()
    for _ in range(6):  # A renews every 10 s, as the scheduler does while it sweeps
        t[0] += timedelta(seconds=10)
        assert a.acquire()
        t[0] += timedelta(seconds=1)
        assert not ahead.acquire() and not behind.acquire()
        assert ahead.current_holder() == behind.current_holder() == "replica-a"
    # A is killed without giving the Lease back: each takes it a lease duration after it last saw A's renewal.
    t[0] += timedelta(seconds=29)
    assert not ahead.acquire() and not behind.acquire()
    t[0] += timedelta(seconds=1)
    assert behind.acquire()
    assert not ahead.acquire() and ahead.current_holder() == "replica-c"  # a new record: waited for afresh
    assert not a.acquire()  # A, back, sees C's record
    stored = world.api.store.objects["leases"][("gpu-steward", "gpu-steward-sweeper")]
    assert stored["spec"]["holderIdentity"] == "replica-c" and stored["spec"]["leaseTransitions"] == 1


def test_a_steward_that_never_saw_the_lease_waits_a_lease_duration_unless_it_was_given_back(world):
    wall, mono = [datetime(2026, 12, 3, 12, 0, tzinfo=UTC)], [0.0]
    assert _lease(world, "replica-a", clock=lambda: wall[0]).acquire()
    wall[0] += timedelta(hours=1)  # renewTime an hour old by this host's clock: a dead holder, or a wrong clock
    fresh = _lease(world, "workstation", clock=lambda: wall[0], monotonic=lambda: mono[0])
    assert not fresh.acquire()
    assert fresh.current_holder() == "replica-a" and fresh.lapses_in_s() == 30
    mono[0] += 29
    assert not fresh.acquire()
    wall[0] -= timedelta(days=1)  # the host clock steps back (NTP): only the elapsed (monotonic) time counts
    mono[0] += 1
    assert fresh.lapses_in_s() == 0 and fresh.current_holder() is None
    assert fresh.acquire()
    fresh.release()  # given back: taken at once
    assert _lease(world, "replica-b", clock=lambda: wall[0], monotonic=lambda: mono[0]).acquire()


def test_a_cron_sweep_waits_out_a_lease_its_holder_left_behind_and_not_one_renewed(world, tmp_path, monkeypatch,
                                                                                  capsys):
    """A one-shot `steward sweep` has never seen the Lease: it waits one lease duration, once, and asks again,
    rather than never taking the Lease of a steward that stopped without giving it back."""
    import threading

    from agent.cli.main import main
    from agent.cli.sweep import BUSY_EXIT

    monkeypatch.setenv("STEWARD_BACKEND", "kubernetes")
    monkeypatch.setenv("STEWARD_KUBECONFIG", str(world.settings.kubeconfig))
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path / "workstation"))
    monkeypatch.setenv("STEWARD_RUNBOOKS_ENABLED", "false")
    monkeypatch.setenv("STEWARD_PROMETHEUS_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("STEWARD_LEASE_DURATION_S", "1")
    monkeypatch.delenv("STEWARD_LEADER_LOCK", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    live = _lease(world, "gpu-steward-7d9f-x2x4k", 1)
    assert live.acquire()
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.2):
            live.acquire()

    renewing = threading.Thread(target=renew, daemon=True)
    renewing.start()
    try:
        assert main(["sweep"]) == BUSY_EXIT  # renewed while it waited: the holder sweeps, this run does not
    finally:
        stop.set()
        renewing.join()
    err = capsys.readouterr().err
    assert "held by gpu-steward-7d9f-x2x4k; waiting 1s" in err and "another steward holds" in err
    # The holder is killed and never gives the Lease back: the cron sweep takes it after a lease duration, sweeps
    # (Prometheus is not there: degraded, 3) and gives it back.
    assert main(["sweep"]) == 3
    stored = world.api.store.objects["leases"][("gpu-steward", "gpu-steward-sweeper")]
    assert not stored["spec"].get("holderIdentity")
