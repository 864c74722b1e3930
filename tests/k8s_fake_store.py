"""The fake Kubernetes API's object store: resources, selectors, patches, evictions and the CAPI controller."""

from __future__ import annotations

import builtins
import copy
import itertools
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class Resource:
    group: str  # "" = core
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
    crd: bool = False  # served by a CustomResourceDefinition: no strategic merge patch (HTTP 415)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES = (
    Resource("", "v1", "pods", "Pod", subresources=("log", "eviction")),
    Resource("", "v1", "nodes", "Node", namespaced=False),
    Resource("", "v1", "events", "Event"),
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    Resource("cluster.x-k8s.io", "v1beta1", "machinedeployments", "MachineDeployment", subresources=("scale",),
             crd=True),
    Resource("cluster.x-k8s.io", "v1beta1", "machines", "Machine", crd=True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease"),
    Resource("batch", "v1", "jobs", "Job"),
    Resource("apps", "v1", "statefulsets", "StatefulSet"),
    Resource("kubeflow.org", "v1", "notebooks", "Notebook", crd=True),  # Kubeflow's notebook controller's CRD
    # The Kubeflow training operator's CRDs (spec.runPolicy.suspend), JobSet's and KubeRay's (spec.suspend).
    *(Resource("kubeflow.org", "v1", f"{kind.lower()}s", kind, crd=True)
      for kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")),
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", crd=True),
    Resource("ray.io", "v1", "rayclusters", "RayCluster", crd=True),
    Resource("ray.io", "v1", "rayjobs", "RayJob", crd=True),
)
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"


class ApiError(Exception):
    """Answered as a meta/v1 Status object with this code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
                "reason": self.reason, "details": self.details, "code": self.code}


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _terms(selector: str) -> list[str]:
    return [t.strip() for t in selector.split(",") if t.strip()]


def label_match(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based label selectors: a=b, a==b, a!=b, a, !a."""
    for term in _terms(selector or ""):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_match(selector: str | None, obj: dict) -> bool:
    for term in _terms(selector or ""):
        negate = "!=" in term
        key, value = term.replace("==", "=").split("!=" if negate else "=", 1)
        actual = _dig(obj, key)
        actual = "" if actual is None else str(actual)
        if (actual == value) == negate:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch (strategic merge patch is the same for the maps tests patch)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: dict, ops: Any) -> dict:
    """RFC 6902 add/replace/remove, enough for what kubectl and clients send."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    out = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent = out
        for part in parts[:-1]:
            parent = parent.setdefault(part, {})
        if op["op"] in ("add", "replace"):
            parent[parts[-1]] = op["value"]
        elif op["op"] == "remove":
            parent.pop(parts[-1], None)
        else:
            raise ApiError(422, "Invalid", f"unsupported json patch op {op['op']!r}")
    return out


@dataclass
class FakeStore:
    """Objects by resource and (namespace, name); every change bumps one resourceVersion counter."""

    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    objects: dict[str, dict[tuple[str, str], dict]] = field(default_factory=lambda: {r.plural: {} for r in RESOURCES})
    logs: dict[tuple[str, str], list[tuple[datetime, str]]] = field(default_factory=dict)
    log_provider: Callable[[str, str], list[tuple[datetime, str]]] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    _rv: itertools.count = field(default_factory=lambda: itertools.count(1))

    def resource_version(self) -> str:
        return str(next(self._rv))

    def put(self, plural: str, obj: dict) -> dict:
        """Create or replace an object as the API server stores it (uid, resourceVersion, timestamps)."""
        res = next(r for r in RESOURCES if r.plural == plural)
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if "name" not in meta:
                if "generateName" not in meta:
                    raise ApiError(422, "Invalid", f"{res.kind} metadata.name: Required value")
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            ns = meta.get("namespace", "default") if res.namespaced else ""
            if res.namespaced:
                meta["namespace"] = ns
            old = self.objects[plural].get((ns, meta["name"]))
            meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", old["metadata"]["creationTimestamp"] if old else rfc3339(self.now()))
            meta["resourceVersion"] = self.resource_version()
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            self.objects[plural][(ns, meta["name"])] = obj
            return copy.deepcopy(obj)

    def get(self, plural: str, ns: str, name: str) -> dict:
        with self.lock:
            self._finish_terminating()
            obj = self.objects[plural].get((ns, name))
            if obj is None:
                kind = next(r for r in RESOURCES if r.plural == plural).plural
                raise ApiError(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": kind})
            return copy.deepcopy(obj)

    def list(self, plural: str, ns: str | None = None, labels: str | None = None, fields: str | None = None) -> list:
        with self.lock:
            self._finish_terminating()
            return [copy.deepcopy(o) for (o_ns, _), o in sorted(self.objects[plural].items())
                    if (ns is None or o_ns == ns) and label_match(labels, o["metadata"].get("labels") or {})
                    and field_match(fields, o)]

    def delete(self, plural: str, ns: str, name: str, grace_s: int | None = None) -> dict:
        with self.lock:
            obj = self.get(plural, ns, name)
            if plural != "pods" or grace_s == 0:
                self.objects[plural].pop((ns, name))
                return obj
            grace = obj["spec"].get("terminationGracePeriodSeconds", 30) if grace_s is None else grace_s
            live = self.objects[plural][(ns, name)]
            if "deletionTimestamp" not in live["metadata"]:  # a second delete never extends the deadline
                live["metadata"]["deletionTimestamp"] = rfc3339(self.now() + timedelta(seconds=grace))
                live["metadata"]["deletionGracePeriodSeconds"] = grace
                live["metadata"]["resourceVersion"] = self.resource_version()
            return copy.deepcopy(live)

    def patch(self, plural: str, ns: str, name: str, body: Any, content_type: str) -> dict:
        with self.lock:
            obj = self.get(plural, ns, name)
            # As the API server: metadata.uid / resourceVersion in a merge patch are preconditions (409 if stale).
            sent = (body.get("metadata") or {}) if isinstance(body, dict) and "json-patch" not in content_type else {}
            for key in ("uid", "resourceVersion"):
                if sent.get(key) and sent[key] != obj["metadata"].get(key):
                    raise ApiError(409, "Conflict", f"Operation cannot be fulfilled on {plural} \"{name}\": "
                                   f"Precondition failed: {key} in precondition: {sent[key]}, "
                                   f"{key} in object meta: {obj['metadata'].get(key)}")
            patched = json_patch(obj, body) if "json-patch" in content_type else merge_patch(obj, body)
            return self.put(plural, patched)

    def check_preconditions(self, plural: str, ns: str, name: str, preconditions: dict | None) -> None:
        """DeleteOptions.preconditions: the API server answers 409 Conflict when the uid differs."""
        wanted = (preconditions or {}).get("uid")
        if not wanted:
            return
        actual = self.get(plural, ns, name)["metadata"].get("uid")
        if wanted != actual:
            raise ApiError(409, "Conflict", f"Operation cannot be fulfilled on {plural} \"{name}\": "
                           f"Precondition failed: UID in precondition: {wanted}, UID in object meta: {actual}")

    def evict(self, ns: str, name: str, grace_s: int | None, dry_run: bool = False) -> None:
        """policy/v1 Eviction: 429 while a matching PodDisruptionBudget allows no disruption. A dry run (dryRun=All,
        as `kubectl drain --dry-run=server` sends) checks the budgets and changes nothing."""
        with self.lock:
            pod = self.get("pods", ns, name)
            labels = pod["metadata"].get("labels") or {}
            for pdb in self.list("poddisruptionbudgets", ns):
                wanted = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
                if not all(labels.get(k) == v for k, v in wanted.items()):
                    continue
                allowed = (pdb.get("status") or {}).get("disruptionsAllowed", 0)
                if allowed <= 0:
                    pdb_name = pdb["metadata"]["name"]
                    raise ApiError(429, "TooManyRequests",
                                   "Cannot evict pod as it would violate the pod's disruption budget.",
                                   {"causes": [{"reason": "DisruptionBudget", "message": f"The disruption budget "
                                                f"{pdb_name} needs {pdb['spec'].get('minAvailable', 1)} healthy "
                                                "pods and has 1 currently"}]})
                if dry_run:
                    continue
                live = self.objects["poddisruptionbudgets"][(ns, pdb["metadata"]["name"])]
                live["status"]["disruptionsAllowed"] = allowed - 1
            if not dry_run:
                self.delete("pods", ns, name, grace_s)

    def _finish_terminating(self) -> None:
        # The kubelet's part: a terminating pod is gone once its grace period has run out.
        now = rfc3339(self.now())
        for key, pod in list(self.objects["pods"].items()):
            deadline = pod["metadata"].get("deletionTimestamp")
            if deadline and deadline <= now:
                self.objects["pods"].pop(key)

    def pod_log(self, ns: str, name: str) -> builtins.list[tuple[datetime, str]]:
        self.get("pods", ns, name)
        if self.log_provider is not None:
            return self.log_provider(ns, name)
        return list(self.logs.get((ns, name), []))

    def reconcile_machinedeployment(self, ns: str, name: str) -> None:
        """The CAPI controller's part: drop surplus Machines, the delete-machine-annotated ones first."""
        with self.lock:
            md = self.objects["machinedeployments"][(ns, name)]
            want = md["spec"].get("replicas", 1)
            machines = [m for m in self.list("machines", ns, f"cluster.x-k8s.io/deployment-name={name}")]
            machines.sort(key=lambda m: (DELETE_MACHINE not in (m["metadata"].get("annotations") or {}),
                                         m["metadata"]["creationTimestamp"]), reverse=False)
            surplus = len(machines) - want
            for machine in machines[:max(0, surplus)]:
                self.objects["machines"].pop((ns, machine["metadata"]["name"]))
                node = (machine.get("status") or {}).get("nodeRef", {}).get("name")
                if node:
                    self.objects["nodes"].pop(("", node), None)
            md.setdefault("status", {})["replicas"] = min(want, len(machines))
