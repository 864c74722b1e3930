"""KubernetesScheduler: GPU pods as jobs, their logs, and stops (through the owner that would undo an eviction, else
the Eviction API; kubernetes client)."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from core.cluster import CordonResult, FinishedJob, JobInfo, LogLine, NodeInfo, StopResult, gang_key, owner_gang_key
from tools.k8s_owners import (
    JOBS,
    JOBSET_NAME,
    JOBSETS,
    NOTEBOOKS,
    OPTIONAL,
    RAYCLUSTERS,
    RAYJOBS,
    STATEFULSETS,
    TRAINING,
    OwnerRef,
    OwnerResource,
    controller_ref,
    evicted_job_note,
    evicted_owner_note,
    gang_suspend_note,
    how_to_stop,
    jobset_of,
    managed_job,
    managed_owner,
    notebook_of,
    rayjob_of,
    replaced_note,
    route,
    shared_job,
    shared_owner,
    stop_note,
    stop_patch,
    stopped_since,
    stopped_text,
    suspend_note,
    with_pods_text,
)
from tools.k8s_pods import (
    ACTIVE_PODS,
    FINISHED_PODS,
    PodReading,
    node_gpus,
    node_to_info,
    owner_kind,
    owner_name,
    owner_uid,
    pod_gpus,
    pod_to_finished,
    pod_to_job,
)
from tools.protocols import Clock

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agent.config.settings import Settings



class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def api_message(exc: Exception) -> str:
    """The Status message the API server sent with an error, else the exception text."""
    body = getattr(exc, "body", None)
    try:
        status = json.loads(body) if body else {}
        causes = "; ".join(c.get("message", "") for c in (status.get("details") or {}).get("causes") or [])
        return status.get("message", str(exc)) + (f" ({causes})" if causes else "")
    except (TypeError, ValueError, AttributeError):
        return str(exc).strip()


def split_job_id(job_id: str) -> tuple[str, str]:
    ns, sep, name = job_id.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise ValueError(f"a Kubernetes job id is namespace/pod, got {job_id!r}")
    return ns, name


REQUEST_TIMEOUT_S = 30.0  # per API call: a hung API server fails the call (and the sweep says so), never stalls it


def throttled(exc: Exception) -> bool:
    """A 429 from the API server's own rate limiting (priority and fairness), not a PodDisruptionBudget's no."""
    if getattr(exc, "status", None) != 429:
        return False
    try:
        status = json.loads(getattr(exc, "body", None) or "{}")
    except (TypeError, ValueError):
        status = {}
    causes = (status.get("details") or {}).get("causes") or [] if isinstance(status, dict) else []
    said = " ".join([str(status.get("message", "")) if isinstance(status, dict) else "",
                     *(str(c.get("reason", "")) + " " + str(c.get("message", "")) for c in causes)]).lower()
    return "disruptionbudget" not in said and "disruption budget" not in said


def not_found_name(exc: Exception) -> str | None:
    """The name a 404 Status is about (details.name): an object that does not exist, not a path nobody serves."""
    try:
        status = json.loads(getattr(exc, "body", None) or "{}")
    except (TypeError, ValueError):
        return None
    return ((status.get("details") or {}).get("name") or None) if isinstance(status, dict) else None


def stop_error(job_id: str, exc: Exception, uid: str | None) -> StopResult | None:
    """What a failed pod read, eviction or delete means for a stop; None for an exception that is no API answer."""
    code = getattr(exc, "status", None)
    if code == 404:
        return StopResult(job=job_id, status="already_gone", detail="the pod no longer exists")
    if code == 429 and throttled(exc):  # the API server is shedding load: retried at a later sweep
        return StopResult(job=job_id, status="error", detail=f"throttled by the API server (HTTP 429: "
                          f"{api_message(exc)}); nothing was stopped")
    if code == 429:  # a PodDisruptionBudget said no: the workload's owner decided, not an error
        return StopResult(job=job_id, status="refused", detail=f"eviction refused: {api_message(exc)}")
    if code == 409 and uid:  # the name now belongs to another pod
        return StopResult(job=job_id, status="refused", detail=f"not the same pod: {api_message(exc)}")
    if code is not None:
        return StopResult(job=job_id, status="error", detail=f"HTTP {code}: {api_message(exc)}")
    return None


class KubernetesScheduler:
    """JobScheduler + LogSource over the core/v1 API; one pod list call per sweep, counted in `api_calls`."""

    def __init__(self, core_api: Any, *, reading: PodReading | None = None, clock: Clock | None = None,
                 pods_fresh_s: float = 30.0, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be positive, got {request_timeout_s}")
        self.core = core_api
        self.reading = reading or PodReading()
        self.clock = clock or WallClock()
        self.request_timeout_s = request_timeout_s
        self.api_calls = 0
        self.pods_fresh_s = pods_fresh_s  # list_nodes reuses a pod list this recent (same sweep)
        self._pods: list[dict] = []
        self._pods_at = -math.inf

    def _json(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.api_calls += 1
        resp = getattr(self.core, method)(*args, _preload_content=False, _request_timeout=self.request_timeout_s,
                                          **kwargs)
        return json.loads(resp.data)

    # -- jobs --------------------------------------------------------------------------------------
    def gpu_pods(self, *, fresh: bool = True) -> list[dict]:
        """Running and pending pods that ask for GPUs, and the pods without GPUs of the same distributed jobs (a Ray
        cluster's head and CPU workers, an MPI launcher: whether they work decides whether the GPU pods wait for
        them, agent/detectors/gang.py), from one list call (or the last one, if recent)."""
        if fresh or time.monotonic() - self._pods_at > self.pods_fresh_s:
            listed = self._json("list_pod_for_all_namespaces", field_selector=ACTIVE_PODS).get("items") or []
            gpu = [p for p in listed if pod_gpus(p, self.reading.gpu_resource) > 0]
            gangs = {key for p in gpu if (key := _gang_key(p)) is not None}
            self._pods = gpu + [p for p in listed if pod_gpus(p, self.reading.gpu_resource) <= 0
                                and _gang_key(p) in gangs]
            self._pods_at = time.monotonic()
        return self._pods

    def list_jobs(self) -> list[JobInfo]:
        return [pod_to_job(p, self.reading) for p in self.gpu_pods()]

    def list_finished(self, since: datetime) -> list[FinishedJob]:
        """GPU pods that ended (Succeeded or Failed) at or after `since`, oldest end first: one list call. Only what
        the cluster still keeps: Jobs' ttlSecondsAfterFinished and the pod garbage collector bound this history."""
        listed = self._json("list_pod_for_all_namespaces", field_selector=FINISHED_PODS)
        out = [f for p in listed.get("items") or [] if pod_gpus(p, self.reading.gpu_resource) > 0
               and (f := pod_to_finished(p, self.reading)) is not None and f.ended_at >= since]
        return sorted(out, key=lambda f: f.ended_at)

    def get_job(self, job_id: str) -> JobInfo | None:
        ns, name = split_job_id(job_id)
        try:
            return pod_to_job(self._json("read_namespaced_pod", name, ns), self.reading)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise

    def jobs_by_node(self, *, fresh: bool = False) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for pod in self.gpu_pods(fresh=fresh):
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                out.setdefault(node, []).append(f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}")
        return out

    def workloads_by_node(self) -> dict[str, list[str]]:
        """What removing a node is decided on: every pod bound to each node, GPU or not (a CPU pod, a MIG slice's),
        read now (one list call). Only finished pods, DaemonSet pods and static pods' mirrors do not count: the last
        two belong to the node and go with it."""
        out: dict[str, list[str]] = {}
        for pod in self._json("list_pod_for_all_namespaces", field_selector=ACTIVE_PODS).get("items") or []:
            meta = pod.get("metadata") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not _the_nodes_own(meta):
                out.setdefault(node, []).append(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")
        return out

    def list_nodes(self, *, for_removal: bool = False) -> list[NodeInfo]:
        """GPU nodes; the jobs on them come from this sweep's pod list, so this is one call. for_removal: every node,
        each with every workload bound to it (workloads_by_node), read now, not the sweep's list."""
        nodes = self._json("list_node").get("items") or []
        if for_removal:
            bound = self.workloads_by_node()
            return [node_to_info(n, sorted(bound.get(n["metadata"]["name"], [])), self.reading) for n in nodes]
        by_node = self.jobs_by_node()
        return [node_to_info(n, sorted(by_node.get(n["metadata"]["name"], [])), self.reading)
                for n in nodes if node_gpus(n, self.reading.gpu_resource) > 0]

    # -- stops -------------------------------------------------------------------------------------
    # stop_job takes `siblings`: the caller vouches for other pods whose stop is due now (agent/graph/execute.py).
    stops_through_owners = True

    def stop_job(self, job_id: str, *, force: bool, grace_s: float = 30.0, reason: str = "",
                 uid: str | None = None, siblings: Mapping[str, str] | None = None) -> StopResult:
        """A stop acts on the object that would otherwise undo it (tools/k8s_owners.py): a Job's pod by suspending
        the Job, a Kubeflow notebook's by stopping its Notebook as Kubeflow's idle culler does, and forced, the pod is
        then deleted with no grace. Any other pod is evicted (PodDisruptionBudgets honoured, grace period kept) or,
        forced, deleted with no grace; the result says when its controller starts it again.

        `siblings` (pod id -> uid): the other pods of the same distributed job whose own stop the caller found due
        now, for the same reason. A training job, JobSet or RayJob running more pods than this one is suspended only
        when every other pod it runs is among them (that very uid); the result's `covered` names them."""
        from kubernetes import client

        ns, name = split_job_id(job_id)
        # The API server checks the uid atomically with the delete: a namesake pod is never hit.
        pre = client.V1Preconditions(uid=uid) if uid else None
        try:
            pod = self._json("read_namespaced_pod", name, ns)
        except Exception as exc:
            if (failed := stop_error(job_id, exc, uid)) is None:
                raise
            return failed
        meta = pod.get("metadata") or {}
        way, ref = route(meta)
        note = replaced_note(meta)
        if ref is not None and way != "evict":
            if uid and meta.get("uid") != uid:
                return StopResult(job=job_id, status="refused", detail=f"not the same pod: {job_id} is now uid "
                                  f"{meta.get('uid')}, the stop was for uid {uid}; nothing was stopped")
            through_owner = self._stop_owner(job_id, pod, way, ref, force=force, pre=pre, siblings=siblings)
            if isinstance(through_owner, StopResult):
                return through_owner
            note = through_owner  # the owner is gone, or another controller manages it: evicted, and why is said
        tail = f"; {note}" if note else ""
        try:
            if force:
                self._json("delete_namespaced_pod", name, ns, grace_period_seconds=0,
                           body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=pre))
                return StopResult(job=job_id, status="stopped", detail="pod deleted with no grace period" + tail)
            body = client.V1Eviction(
                metadata=client.V1ObjectMeta(name=name, namespace=ns),
                delete_options=client.V1DeleteOptions(grace_period_seconds=max(0, int(grace_s)), preconditions=pre),
            )
            self._json("create_namespaced_pod_eviction", name, ns, body)
        except Exception as exc:
            if (failed := stop_error(job_id, exc, uid)) is None:
                raise
            return failed
        if (pod.get("status") or {}).get("phase") == "Pending":
            return StopResult(job=job_id, status="stopped", detail="pending pod evicted" + tail)
        return StopResult(job=job_id, status="stopping",
                          detail=f"evicted; terminating with a {int(grace_s)}s grace period{tail}")

    def stop_note(self, job: JobInfo, language: str) -> str:
        """For the owner's warning: how this backend stops the job and how to undo it (tools/k8s_owners.py). A pod is
        stopped through its Job, JobSet, training job or RayJob only when that owner is the steward's to suspend and
        runs this pod alone: the owner is read, as the stop will read it (one that cannot be read is described as the
        listing shows it)."""
        if job.owner_kind == "Job" and not job.labels.get(JOBSET_NAME):
            name = job.labels.get("batch.kubernetes.io/job-name") or job.labels.get("job-name")
            if name:
                try:
                    owner = self._object("get_namespaced_custom_object", JOBS.group, "v1", job.namespace,
                                         JOBS.plural, name)
                except Exception:  # noqa: BLE001 - the warning still goes out, described from the listing
                    owner = None
                if owner is not None and (why := managed_job(owner) or shared_job(owner, self._job_pods(owner))):
                    return evicted_job_note(why, language)
            return stop_note(job, language)
        if job.owner_kind in ("Job", "RayCluster", *TRAINING):
            try:
                note = self._suspend_note(job, language)
            except Exception:  # noqa: BLE001 - the warning still goes out, described from the listing
                note = None
            if note is not None:
                return note
        return stop_note(job, language)

    def _suspend_note(self, job: JobInfo, language: str) -> str | None:
        """The warning for a pod of a JobSet, training job or RayJob, from the owner the stop would suspend (None:
        not found out; the listing describes it)."""
        pod = self._json("read_namespaced_pod", job.name, job.namespace)
        way, ref = route(pod.get("metadata") or {})
        if ref is None or way not in ("job", "training", "raycluster"):
            return None
        target = self._target("", pod, way, ref)
        if not isinstance(target, tuple):
            return None
        res, owner_ref = target
        owner = self._read_owner("", res, owner_ref, job.namespace)
        if not isinstance(owner, dict):
            return None
        if res is JOBS:
            why = self._not_suspended(res, owner, pod)
            return evicted_job_note(why, language) if why is not None else stop_note(job, language)
        if (managed := managed_owner(res.kind, owner)) is not None:
            return evicted_owner_note(res.kind, managed, language)
        why, others = self._shared(res, owner, pod, None)
        if why is not None and others:  # suspended only once every pod of it is due (stop_job's `siblings`)
            return gang_suspend_note(res.kind, owner_ref.name, job.namespace, len(others) + 1, language)
        if why is not None:
            return evicted_owner_note(res.kind, why, language)
        return suspend_note(res.kind, owner_ref.name, job.namespace, language)

    @cached_property
    def _objects(self) -> Any:
        """Calls by group, version and plural (CustomObjectsApi) on the core client's connection: a Job, a
        StatefulSet and a Notebook are read and patched alike, the patch a merge patch (all a CRD accepts)."""
        from kubernetes import client

        return client.CustomObjectsApi(self.core.api_client)

    def _object(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.api_calls += 1
        resp = getattr(self._objects, method)(*args, _preload_content=False,
                                              _request_timeout=self.request_timeout_s, **kwargs)
        return json.loads(resp.data)

    def _target(self, job_id: str, pod: dict, way: str,
                ref: OwnerRef) -> tuple[OwnerResource, OwnerRef] | StopResult | str:
        """The object a stop patches, and the resource it is served as: the Notebook a notebook's StatefulSet names,
        the JobSet above a Job, the RayJob that created a RayCluster (each named by its controller's ownerReference,
        uid and version), else the pod's own controller; a StopResult, or a note when the pod is to be evicted."""
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace", "default")
        if way == "statefulset":  # a Kubeflow notebook's pod: its StatefulSet names the Notebook (and its version)
            sts = self._read_owner(job_id, STATEFULSETS, ref, ns)
            if not isinstance(sts, dict):
                return sts
            notebook = notebook_of(sts)
            return (NOTEBOOKS, notebook) if notebook is not None else replaced_note(meta)
        if way == "raycluster":  # a RayJob's cluster: the RayJob is stopped, never the cluster it manages
            cluster = self._read_owner(job_id, RAYCLUSTERS, ref, ns)
            if not isinstance(cluster, dict):
                return cluster
            rayjob = rayjob_of(cluster)
            return (RAYJOBS, rayjob) if rayjob is not None else replaced_note(meta)
        if way == "training":
            return TRAINING[ref.kind], ref
        if way == "job" and (meta.get("labels") or {}).get(JOBSET_NAME):  # a JobSet's pod: its Job names the JobSet
            job = self._read_owner(job_id, JOBS, ref, ns)
            if not isinstance(job, dict):
                return job
            jobset = jobset_of(job)
            if jobset is not None:
                return JOBSETS, jobset
        return (JOBS if way == "job" else NOTEBOOKS), ref

    def _not_suspended(self, res: OwnerResource, owner: dict, pod: dict) -> str | None:
        """Why the owner is not the steward's to suspend for this pod (another controller owns its suspend field, or
        it runs other pods than the one judged): the pod alone is evicted, and this says why. None: suspend it."""
        if res is JOBS:
            return managed_job(owner) or shared_job(owner, self._job_pods(owner))
        if res is NOTEBOOKS:
            return None
        return managed_owner(res.kind, owner) or self._shared(res, owner, pod, None)[0]

    def _shared(self, res: OwnerResource, owner: dict, pod: dict,
                siblings: Mapping[str, str] | None) -> tuple[str | None, list[dict]]:
        """(why suspending a JobSet, training job or RayJob would stop pods this stop is not for, else None; the
        other pods it stops, as listed now). Pods among `siblings` (id -> uid: the caller found their own stop due
        now) are pods this stop is for too."""
        pods = self._owner_pods(res, owner, pod)
        if pods is None:
            return shared_owner(res.kind, owner, None), []
        me = (pod.get("metadata") or {}).get("uid")
        others = [p for p in pods if (p.get("metadata") or {}).get("uid") != me]
        due = siblings or {}
        left = [_pod_id(p) for p in others if due.get(_pod_id(p)) != (p.get("metadata") or {}).get("uid")]
        if not left:
            return None, others
        return shared_owner(res.kind, owner, len(others) + 1, left if siblings is not None else None), others

    def _stop_owner(self, job_id: str, pod: dict, way: str, ref: OwnerRef, *, force: bool,
                    pre: Any, siblings: Mapping[str, str] | None = None) -> StopResult | str:
        """Stop the pod's owner (tools/k8s_owners.py: the one its ownerReferences name by uid); a StopResult, or a
        note when the pod is to be evicted after all (its owner is gone, or not the steward's to suspend, or its
        resource not served). An owner running other pods is suspended only when each is among `siblings`; an
        owner already suspended is never patched again, whatever pods it runs, and a pod of it that its controller
        is not deleting is evicted."""

        meta = pod.get("metadata") or {}
        ns = meta.get("namespace", "default")
        target = self._target(job_id, pod, way, ref)
        if not isinstance(target, tuple):
            return target
        res, ref = target
        if force:
            return self._force_after_owner(job_id, pod, res, ref, pre)
        stamp: str | None = None
        checked = False
        covered: list[dict] = []
        for attempt in (1, 2):
            owner = self._read_owner(job_id, res, ref, ns)
            if not isinstance(owner, dict):
                return owner
            shared = res not in (JOBS, NOTEBOOKS)
            if shared and (managed := managed_owner(res.kind, owner)) is not None:
                return managed
            if shared and stopped_since(res.kind, owner) is not None:
                if not meta.get("deletionTimestamp"):
                    # Suspended, yet its controller has not deleted this pod (the operator is down, or the suspend
                    # was set by hand): claiming it stopped would free nothing. The pod is evicted; the suspended
                    # owner does not start it again.
                    return (f"its owner {res.kind} {ns}/{ref.name} is already suspended but its controller has not "
                            f"deleted this pod: the pod is evicted")
                stamp, covered = None, []  # already suspended (by a stop of a sibling, say): nothing patched again
                break
            if shared:
                alone, covered = self._shared(res, owner, pod, siblings)
            else:
                alone = self._not_suspended(res, owner, pod)
            if alone is not None:
                return alone
            if stopped_since(res.kind, owner) is not None:
                stamp = None  # already stopped: said so, nothing patched
                break
            if not checked:  # the controller deletes the pods, not the Eviction API: ask it first, for each
                for one in (pod, *covered):
                    one_pre = pre if one is pod else _uid_pre((one.get("metadata") or {}).get("uid"))
                    if (blocked := self._disruption_check(job_id, one, one_pre, res.kind)) is not None:
                        return blocked
                checked = True
            stamp = self.clock.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            try:
                self._object("patch_namespaced_custom_object", res.group, ref.version, ns, res.plural, ref.name,
                             stop_patch(res.kind, owner, stamp))
                break
            except Exception as exc:
                if getattr(exc, "status", None) == 409 and attempt == 1:
                    continue  # changed since it was read (its controller writes its status): read it again, once
                return self._owner_failed(job_id, exc, res, ref, ns, "patch")
        text = stopped_text(res.kind, ref.name, ns, ref.uid, stamp)
        ids = [_pod_id(p) for p in covered]
        if ids:
            text += f"; {with_pods_text(ids)}"
        pending = (pod.get("status") or {}).get("phase") == "Pending"
        return StopResult(job=job_id, status="stopped" if pending else "stopping", detail=text, covered=ids,
                          owner_uid=ref.uid)

    def _owner_pods(self, res: OwnerResource, owner: dict, pod: dict) -> list[dict] | None:
        """The active pods a suspend of `owner` would stop, as listed now (None: the listing failed): a training
        job's pods (owned by its uid), a JobSet's (labelled with its name, across its child Jobs), a RayJob's GPU
        pods (its cluster's head and CPU-only workers are its plumbing, agent/detectors/gang.py)."""
        meta = owner.get("metadata") or {}
        ns = meta.get("namespace", "default")
        selector = f"{JOBSET_NAME}={meta.get('name')}" if res is JOBSETS else None
        try:
            items = self._json("list_namespaced_pod", ns, field_selector=ACTIVE_PODS,
                               **({"label_selector": selector} if selector else {})).get("items") or []
        except Exception:  # noqa: BLE001 - not known to be alone: the caller evicts the pod alone
            return None
        if res is JOBSETS:
            return list(items)
        cluster = controller_ref(pod.get("metadata") or {})
        uid = cluster.uid if res is RAYJOBS and cluster is not None else meta.get("uid")
        return [p for p in items
                if any(r.get("uid") == uid for r in (p.get("metadata") or {}).get("ownerReferences") or [])
                and (res is not RAYJOBS or pod_gpus(p, self.reading.gpu_resource) > 0)]

    def _job_pods(self, job: dict) -> int | None:
        """The Job's active pods (running or pending, owned by its uid) as listed now; None when the listing failed."""
        meta = job.get("metadata") or {}
        try:
            items = self._json("list_namespaced_pod", meta.get("namespace", "default"),
                               field_selector=ACTIVE_PODS).get("items") or []
        except Exception:  # noqa: BLE001 - not known to be alone: the caller evicts the pod alone
            return None
        uid = meta.get("uid")
        return sum(1 for pod in items
                   if any(ref.get("uid") == uid for ref in (pod.get("metadata") or {}).get("ownerReferences") or []))

    def _force_after_owner(self, job_id: str, pod: dict, res: OwnerResource, ref: OwnerRef,
                           pre: Any) -> StopResult | str:
        """A forced stop never patches the owner: it deletes, with no grace, only a pod that is terminating because
        its owner is still stopped. An owner resumed since the graceful stop (its owner's command in the warning) is
        the owner's decision; a pod the owner's stop never reached (its controller down) never got SIGTERM, so it
        cannot have ignored it. A pod that was evicted alone (its owner another controller's to suspend, or running
        other pods) is forced like any evicted pod."""
        from kubernetes import client

        meta = pod.get("metadata") or {}
        ns = meta.get("namespace", "default")
        owner = self._read_owner(job_id, res, ref, ns)
        if not isinstance(owner, dict):
            return owner
        # An owner suspended with all its pods (stop_job's `siblings`) left this one terminating: deleted below, as a
        # pod its owner ran alone is; any other pod of an owner running others is forced alone, as it was evicted.
        gang_stopped = (res not in (JOBS, NOTEBOOKS) and managed_owner(res.kind, owner) is None
                        and stopped_since(res.kind, owner) is not None and bool(meta.get("deletionTimestamp")))
        if not gang_stopped and (alone := self._not_suspended(res, owner, pod)) is not None:
            return alone
        name = f"{res.kind} {ns}/{ref.name}"
        if stopped_since(res.kind, owner) is None:
            return StopResult(job=job_id, status="refused", detail=f"{name} is running again (resumed since the "
                              "graceful stop): a forced stop does not stop it again; nothing was forced")
        if not meta.get("deletionTimestamp"):
            return StopResult(job=job_id, status="refused", detail=f"{name} is stopped but the pod is not "
                              "terminating: the stop never reached it (is the controller running?), so it did not "
                              "ignore SIGTERM; nothing was forced")
        text = stopped_text(res.kind, ref.name, ns, ref.uid, None)
        try:
            self._json("delete_namespaced_pod", meta["name"], ns, grace_period_seconds=0,
                       body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=pre))
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return StopResult(job=job_id, status="stopped", detail=f"{text}; the pod is already gone")
            if (failed := stop_error(job_id, exc, pre.uid if pre else None)) is None:
                raise
            return failed.model_copy(update={"detail": f"{text}; but the pod's delete failed: {failed.detail}"})
        return StopResult(job=job_id, status="stopped", detail=f"{text}; pod deleted with no grace period")

    def _read_owner(self, job_id: str, res: OwnerResource, ref: OwnerRef, ns: str) -> dict | StopResult | str:
        """The owner the ownerReference names, refused when its uid differs (a namesake created since)."""
        try:
            owner = self._object("get_namespaced_custom_object", res.group, ref.version, ns, res.plural, ref.name)
        except Exception as exc:
            return self._owner_failed(job_id, exc, res, ref, ns, "get")
        now_uid = (owner.get("metadata") or {}).get("uid")
        if now_uid != ref.uid:
            return StopResult(job=job_id, status="refused", detail=f"not the same {res.kind}: {ns}/{ref.name} is now "
                              f"uid {now_uid}, the pod's ownerReference names uid {ref.uid} (a namesake created "
                              "since); nothing was stopped")
        return owner

    def _owner_failed(self, job_id: str, exc: Exception, res: OwnerResource, ref: OwnerRef, ns: str,
                      verb: str) -> StopResult | str:
        """A failed read or patch of the owner. Never an eviction in its place that the owner would undo: a result
        naming what is missing, or (the owner no longer exists, so nothing starts the pod again) a note to evict."""
        code = getattr(exc, "status", None)
        what = f"{res.kind} {ns}/{ref.name}"
        undone = f"evicting the pod instead would only have its {ref.kind} start it again"
        if code == 404 and not_found_name(exc) == ref.name:
            return f"its {what} no longer exists, so nothing starts the pod again"
        if code == 404 and res in OPTIONAL:  # the CRD is not installed (or not at this version): evicted, as before
            return (f"the cluster does not serve {res.plural}.{res.group}/{ref.version} (HTTP 404: "
                    f"{api_message(exc)}), so its {what} could not be stopped through it: this pod alone is evicted "
                    f"and its {ref.kind} may start it again; {how_to_stop(ref.kind, ref.name, ns)}")
        if code == 404:
            return StopResult(job=job_id, status="error", detail=f"the cluster does not serve {res.plural}."
                              f"{res.group}/{ref.version} (HTTP 404: {api_message(exc)}), so the {what} that owns "
                              f"the pod cannot be stopped; {undone}: nothing was stopped")
        if code == 403:
            verbs = "get" if res in (STATEFULSETS, RAYCLUSTERS) else "get, patch"
            return StopResult(job=job_id, status="error", detail=f"not allowed to {verb} {res.plural}.{res.group} "
                              f"(HTTP 403: {api_message(exc)}): add the rule {res.rule(verbs)} to the steward's "
                              f"ClusterRole (deploy/kubernetes/base/rbac.yaml); {undone}: nothing was stopped")
        if code == 409:
            return StopResult(job=job_id, status="refused", detail=f"the {what} changed while it was being stopped "
                              f"({api_message(exc)}); nothing was stopped")
        if code == 429:
            return StopResult(job=job_id, status="error", detail=f"throttled by the API server (HTTP 429: "
                              f"{api_message(exc)}); nothing was stopped")
        if code is not None:
            return StopResult(job=job_id, status="error", detail=f"{verb} {what}: HTTP {code}: {api_message(exc)}; "
                              "nothing was stopped")
        raise exc

    def _disruption_check(self, job_id: str, pod: dict, pre: Any, kind: str) -> StopResult | None:
        """A dry-run eviction (as `kubectl drain --dry-run=server`): the pod's PodDisruptionBudgets are honoured when
        its controller deletes it, as the Eviction API honours them. None: a disruption is allowed."""
        from kubernetes import client

        meta = pod.get("metadata") or {}
        name, ns = meta["name"], meta.get("namespace", "default")
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns),
                                 delete_options=client.V1DeleteOptions(dry_run=["All"], preconditions=pre))
        try:
            self._json("create_namespaced_pod_eviction", name, ns, body, dry_run="All")
        except Exception as exc:
            if getattr(exc, "status", None) == 429 and not throttled(exc):
                return StopResult(job=job_id, status="refused", detail=f"eviction refused (a dry run before "
                                  f"stopping its {kind}): {api_message(exc)}; the {kind} was not stopped")
            if (failed := stop_error(job_id, exc, pre.uid if pre else None)) is None:
                raise
            return failed
        return None

    # -- nodes -------------------------------------------------------------------------------------
    def cordon_node(self, node: str, *, uid: str | None = None) -> CordonResult:
        """Mark the node unschedulable (`kubectl cordon`): running pods stay, no new ones land. Idempotent.

        Re-reads the node first; with `uid` the patch carries it and the node's resourceVersion, so the API
        server refuses (409) a node re-registered under the name or changed in between.
        """
        try:
            current = self._json("read_node", node)
            meta = current.get("metadata") or {}
            if uid and meta.get("uid") != uid:
                return CordonResult(node=node, status="refused",
                                    detail=f"not the same node: uid {meta.get('uid')}, proposed for {uid}")
            if (current.get("spec") or {}).get("unschedulable"):
                return CordonResult(node=node, status="unchanged", detail="already cordoned")
            guard = {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
            self._json("patch_node", node, {"metadata": guard, "spec": {"unschedulable": True}})
        except Exception as exc:
            code = getattr(exc, "status", None)
            if code == 404:
                return CordonResult(node=node, status="refused", detail="the node no longer exists")
            if code == 409:
                return CordonResult(node=node, status="refused", detail=f"the node changed: {api_message(exc)}")
            if code is not None:
                return CordonResult(node=node, status="error", detail=f"HTTP {code}: {api_message(exc)}")
            raise
        return CordonResult(node=node, status="cordoned", detail="spec.unschedulable set; running pods untouched")

    # -- logs --------------------------------------------------------------------------------------
    def tail(self, job_id: str, since: datetime, until: datetime, limit: int = 200) -> list[LogLine]:
        ns, name = split_job_id(job_id)
        since_s = max(1, math.ceil((self.clock.now() - since).total_seconds()))
        try:
            self.api_calls += 1
            text = self.core.read_namespaced_pod_log(name, ns, since_seconds=since_s, timestamps=True,
                                                     _preload_content=False,
                                                     _request_timeout=self.request_timeout_s).data.decode(
                                                         "utf-8", "replace")
        except Exception as exc:
            if getattr(exc, "status", None) in (400, 404):  # gone, or not started yet: no lines
                return []
            raise
        lines = [line for line in (parse_log_line(raw) for raw in text.splitlines()) if line is not None]
        return [line for line in lines if since <= line.at <= until][-limit:] if limit > 0 else []


def parse_log_line(raw: str) -> LogLine | None:
    """`2024-05-01T14:30:00.123456789Z text` as the kubelet writes it with timestamps=true."""
    stamp, _, text = raw.partition(" ")
    head, dot, frac = stamp.rstrip("Z").partition(".")
    try:
        at = datetime.fromisoformat(head + (dot + frac[:6] if dot else "")).replace(tzinfo=UTC)
    except ValueError:
        return None
    return LogLine(at=at, text=text)


def kubernetes_api_client(settings: Settings) -> Any:
    """An ApiClient from the service account (in a pod) or from the kubeconfig in settings."""
    from kubernetes import client, config

    if settings.kubeconfig is not None:
        if not settings.kubeconfig.is_file():
            raise ValueError(f"STEWARD_KUBECONFIG {settings.kubeconfig} does not exist")
        return config.new_client_from_config(config_file=str(settings.kubeconfig))
    try:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except config.ConfigException:
        return config.new_client_from_config()  # ~/.kube/config or $KUBECONFIG


def kubernetes_scheduler_from_settings(settings: Settings, *, clock: Clock | None = None,
                                       api_client: Any = None) -> KubernetesScheduler:
    from kubernetes import client

    return KubernetesScheduler(client.CoreV1Api(api_client or kubernetes_api_client(settings)), clock=clock)



def _pod_id(pod: dict) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def _uid_pre(uid: str | None) -> Any:
    from kubernetes import client

    return client.V1Preconditions(uid=uid) if uid else None


def _the_nodes_own(meta: dict) -> bool:
    """A pod that belongs to its node rather than running work there: a DaemonSet's, or a static pod's mirror."""
    return "kubernetes.io/config.mirror" in (meta.get("annotations") or {}) or any(
        ref.get("kind") in ("DaemonSet", "Node") and ref.get("controller") for ref in meta.get("ownerReferences") or [])


def _gang_key(pod: dict) -> tuple[str, ...] | None:
    """The distributed job a pod belongs to, as the detectors group it (core.cluster.job_gang): its gang label
    (gang_key), else its controller (owner_gang_key: a DLRover ElasticJob's CPU-only master is listed beside its GPU
    workers, as the simulator lists it), else None."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace", "default")
    return gang_key(ns, meta.get("labels") or {}) or owner_gang_key(ns, owner_kind(meta), owner_name(meta),
                                                                    owner_uid(meta))
