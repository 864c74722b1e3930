"""Leader election over a Kubernetes Lease (coordination.k8s.io/v1): one replica of the Deployment sweeps."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
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
    """Take the Lease when it is free or has lapsed, renew it while held; optimistic via resourceVersion.

    Whether another holder's Lease has lapsed is judged as client-go's leader election judges it, never by comparing
    the holder's renewTime (the holder's clock) with this host's clock: a host clock 45 s ahead took a Lease one
    second after its holder renewed it, and both swept. This replica remembers the record it last saw (holder,
    renewTime, resourceVersion) and when it first saw it on its own monotonic clock (`monotonic`); it takes the Lease
    only once that record has stood unchanged for the holder's leaseDurationSeconds. So a process that has never seen
    the record waits a full lease duration after first reading it, unless the Lease is free (released or empty).
    The holder's fence (core/fencing.py) ends a lease duration after it asked to renew, before its write; another
    replica first sees that write after it, so it takes over only after the fence is gone.

    `api` is a kubernetes.client.CoordinationV1Api (in-cluster config in production, any host in tests). `clock`
    writes acquireTime and renewTime (for people and other tools to read); `monotonic` judges lapses: by default
    time.monotonic, or the seconds of `clock` where a test gives one.
    """

    def __init__(self, api: Any, name: str, namespace: str, holder: str, duration_s: float = 30.0,
                 clock: Callable[[], datetime] = _now, monotonic: Callable[[], float] | None = None) -> None:
        self.api, self.name, self.namespace, self.holder = api, name, namespace, holder
        self.duration_s, self._clock = duration_s, clock
        if monotonic is None:
            monotonic = time.monotonic if clock is _now else (lambda: clock().timestamp())
        self._monotonic = monotonic
        self._seen_lock = threading.Lock()
        # The record last read (holder, renewTime, resourceVersion), when this process first read it (monotonic), and
        # the lease duration it declares.
        self._seen: tuple[tuple[Any, ...], float, float] | None = None

    def _observe(self, lease: Any) -> float:
        """Note the record read; how long (monotonic seconds) it has stood unchanged since this process first saw it,
        less its lease duration: >= 0 once it has lapsed."""
        spec, meta = getattr(lease, "spec", None), getattr(lease, "metadata", None)
        record = (spec.holder_identity if spec else None, spec.renew_time if spec else None,
                  meta.resource_version if meta else None)
        declared = float(spec.lease_duration_seconds or 0) if spec else 0.0
        duration = declared if declared > 0 else float(self.duration_s)
        now = self._monotonic()
        with self._seen_lock:
            if self._seen is None or self._seen[0] != record:
                self._seen = (record, now, duration)
            return now - self._seen[1] - duration

    def lapses_in_s(self) -> float | None:
        """Seconds until the record this process last read, if nobody renews it, may be taken (0 when it may now);
        None when it has read none. A one-shot `steward sweep` waits this long once rather than never taking the
        Lease of a steward that stopped without giving it back."""
        with self._seen_lock:
            if self._seen is None:
                return None
            _, seen_at, duration = self._seen
        return max(0.0, seen_at + duration - self._monotonic())

    def _spec(self, now: datetime, transitions: int, acquired: datetime | None) -> Any:
        from kubernetes import client

        # Rounded up: others wait at least as long as this holder's fence lasts.
        return client.V1LeaseSpec(holder_identity=self.holder, lease_duration_seconds=math.ceil(self.duration_s),
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
                self._observe(self.api.create_namespaced_lease(self.namespace, body))
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
        lapsed = self._observe(lease) >= 0
        mine = spec.holder_identity == self.holder
        if not (mine or lapsed or not spec.holder_identity):
            return False
        transitions = (spec.lease_transitions or 0) + (0 if mine else 1)
        lease.spec = self._spec(now, transitions, spec.acquire_time if mine else None)
        try:
            written = self.api.replace_namespaced_lease(self.name, self.namespace, lease)  # carries resourceVersion
        except ApiException as exc:
            if exc.status == 409:  # someone else renewed or took it between our read and write
                return False
            raise
        self._observe(written)
        return True

    def current_holder(self) -> str | None:
        """Who holds the Lease now (None when it is free, has lapsed or cannot be read): for messages only. Judged as
        acquire judges it: a record this process has not seen stand unchanged for its lease duration is held."""
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except Exception:
            return None
        spec = lease.spec
        if spec is None or not spec.holder_identity:
            return None
        return str(spec.holder_identity) if self._observe(lease) < 0 else None

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


