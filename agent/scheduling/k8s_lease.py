"""Leader election over a Kubernetes Lease (coordination.k8s.io/v1): one replica of the Deployment sweeps."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.config.settings import Settings


# Where deploy/kubernetes installs the steward, its Deployment and so its Lease: the Lease a steward outside the
# cluster (a workstation `steward sweep`) looks for unless STEWARD_LEASE_NAMESPACE names another.
DEFAULT_NAMESPACE = "gpu-steward"


def _now() -> datetime:
    return datetime.now(UTC)


class LeaseForbidden(PermissionError):
    """The Kubernetes user may not read, create or update the sweeper Lease (or its namespace does not exist):
    this steward cannot tell whether another one sweeps the cluster, so it does not sweep."""


class KubernetesLease:
    """Take the Lease when it is free or expired, renew it while held; optimistic via resourceVersion.

    `api` is a kubernetes.client.CoordinationV1Api (in-cluster config in production, any host in tests).
    """

    def __init__(self, api: Any, name: str, namespace: str, holder: str, duration_s: float = 30.0,
                 clock: Callable[[], datetime] = _now) -> None:
        self.api, self.name, self.namespace, self.holder = api, name, namespace, holder
        self.duration_s, self._clock = duration_s, clock

    def _spec(self, now: datetime, transitions: int, acquired: datetime | None) -> Any:
        from kubernetes import client

        return client.V1LeaseSpec(holder_identity=self.holder, lease_duration_seconds=int(self.duration_s),
                                  acquire_time=acquired or now, renew_time=now, lease_transitions=transitions)

    def acquire(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._acquire()
        except ApiException as exc:
            if exc.status in (401, 403):
                raise LeaseForbidden(
                    f"this Kubernetes user may not use the sweeper Lease {self.namespace}/{self.name} ({exc.status} "
                    f"{exc.reason}): it needs get, create and update on coordination.k8s.io leases in namespace "
                    f"{self.namespace!r} (deploy/kubernetes/base/leader-election.yaml grants them to the steward's "
                    "service account: bind that Role to this user too). Without them this steward cannot see "
                    "whether another one sweeps the cluster, so it does not sweep; STEWARD_LEADER_LOCK=sqlite "
                    "sweeps under a lease only its own data dir sees, for a cluster no other steward sweeps") from exc
            raise

    def _acquire(self) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        now = self._clock()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                  spec=self._spec(now, 0, None))
            try:
                self.api.create_namespaced_lease(self.namespace, body)
                return True
            except ApiException as race:
                if race.status == 409:  # another replica created it first
                    return False
                if race.status == 404:
                    raise LeaseForbidden(
                        f"the namespace {self.namespace!r} of the sweeper Lease does not exist: set "
                        "STEWARD_LEASE_NAMESPACE to the namespace the in-cluster steward runs in") from race
                raise
        spec = lease.spec or client.V1LeaseSpec()
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or renewed + timedelta(seconds=spec.lease_duration_seconds or 0) <= now
        mine = spec.holder_identity == self.holder
        if not (mine or expired or not spec.holder_identity):
            return False
        transitions = (spec.lease_transitions or 0) + (0 if mine else 1)
        lease.spec = self._spec(now, transitions, spec.acquire_time if mine else None)
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)  # carries resourceVersion
        except ApiException as exc:
            if exc.status == 409:  # someone else renewed or took it between our read and write
                return False
            raise
        return True

    def current_holder(self) -> str | None:
        """Who holds the Lease now (None when it is free, expired or cannot be read): for messages only."""
        try:
            spec = self.api.read_namespaced_lease(self.name, self.namespace).spec
        except Exception:
            return None
        renewed = spec.renew_time or spec.acquire_time if spec else None
        if spec is None or renewed is None or not spec.holder_identity:
            return None
        live = renewed + timedelta(seconds=spec.lease_duration_seconds or 0) > self._clock()
        return str(spec.holder_identity) if live else None

    def release(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.holder:
                lease.spec.holder_identity = None
                lease.spec.renew_time = None
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException:
            pass  # the lease expires on its own


def in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def cluster_lease(settings: Settings, holder: str) -> KubernetesLease:
    """The Lease on the cluster the Kubernetes backend sweeps: through the service account in a pod, else through
    the kubeconfig the backend uses (STEWARD_KUBECONFIG, $KUBECONFIG, ~/.kube/config), in STEWARD_LEASE_NAMESPACE or
    DEFAULT_NAMESPACE. So every steward sweeping one cluster (the Deployment's replicas, a cron job, a workstation)
    takes one Lease, wherever its data dir is."""
    if settings.kubeconfig is None and in_cluster():
        return in_cluster_lease(settings.lease_name, settings.lease_namespace, holder, settings.lease_duration_s)
    from kubernetes import client

    from tools.kubernetes import kubernetes_api_client

    return KubernetesLease(client.CoordinationV1Api(kubernetes_api_client(settings)), settings.lease_name,
                           settings.lease_namespace or DEFAULT_NAMESPACE, holder, settings.lease_duration_s)


def in_cluster_lease(name: str, namespace: str | None, holder: str, duration_s: float) -> KubernetesLease:
    from kubernetes import client, config

    config.load_incluster_config()
    if namespace is None:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            namespace = fh.read().strip()
    return KubernetesLease(client.CoordinationV1Api(), name, namespace, holder, duration_s)


