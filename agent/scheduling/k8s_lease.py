"""Leader election over a Kubernetes Lease (coordination.k8s.io/v1): one replica of the Deployment sweeps."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any


def _now() -> datetime:
    return datetime.now(UTC)


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


def in_cluster_lease(name: str, namespace: str | None, holder: str, duration_s: float) -> KubernetesLease:
    from kubernetes import client, config

    config.load_incluster_config()
    if namespace is None:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            namespace = fh.read().strip()
    return KubernetesLease(client.CoordinationV1Api(), name, namespace, holder, duration_s)


