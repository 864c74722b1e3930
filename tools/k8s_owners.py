"""A stop acts on the object that would otherwise undo it: which object that is for a pod, and what is said about it.

Evicting a pod frees its GPUs only until its controller starts another: a Kubeflow Notebook's StatefulSet starts the
pod again under the same name within seconds, a batch/v1 Job creates a replacement (counted against its
backoffLimit), a training operator recreates a missing replica. The next sweep then sees a new pod (a new uid)
whose idle clock starts afresh: the owner is warned and the pod evicted every couple of hours while the waste stays.
Where the ecosystem has an agreed stop verb, KubernetesScheduler.stop_job uses it on the controller instead:

- A Kubeflow Notebook (the pod's StatefulSet is controlled by a kubeflow.org Notebook): the annotation
  `kubeflow-resource-stopped` (an RFC 3339 time) on the Notebook, exactly what Kubeflow's own idle culler sets.
  Source: kubeflow/kubeflow components/notebook-controller, pkg/culler/culler.go (STOP_ANNOTATION =
  "kubeflow-resource-stopped", SetStopAnnotation writes time.Now() in RFC 3339) and
  controllers/notebook_controller.go (generateStatefulSet: replicas 0 while StopAnnotationIsSet); the Kubeflow
  notebooks web app's stop/start buttons set and remove the same annotation. The notebook controller scales the
  StatefulSet to 0, the PVC keeps the work, the owner starts it again from the Kubeflow notebooks page (or removes
  the annotation: `kubectl annotate notebook NAME -n NS kubeflow-resource-stopped-`).
- A batch/v1 Job: `spec.suspend: true` (GA in Kubernetes 1.24; kubernetes.io/docs/concepts/workloads/controllers/job
  "Suspending a Job"): the Job controller deletes its active pods with their grace period and keeps the Job; the
  owner resumes it with `kubectl patch job NAME -n NS --type=merge -p '{"spec":{"suspend":false}}'`. Not when
  another controller manages the Job's suspend field: a JobSet's child Job is stopped through its JobSet (below),
  one that Kueue admits or another controller runs is evicted, with the advice (its Kueue Workload, its controller).

- A Kubeflow training job (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob; kubeflow.org, the version
  the pod's ownerReference names): `spec.runPolicy.suspend: true` (training-operator v1.7+, kubeflow/training-operator
  pkg/controller.v1/common/job.go ReconcileJobs: a suspended job's pods, services and PodGroup are deleted whatever
  its cleanPodPolicy, the job is kept with a Suspended condition, and resuming resets its startTime and creates the
  replicas again). An MPIJob of the mpi-operator (kubeflow.org/v2beta1) has the same field. An MXJob is only
  advised, as before.
- A JobSet (the controller of the pod's Job; jobset.x-k8s.io): `spec.suspend: true`; the JobSet controller suspends
  its child Jobs, whose controller deletes their pods, and resumes them when it is resumed.
- A RayJob (the controller of the pod's RayCluster; ray.io/v1, KubeRay v1.0+): `spec.suspend: true`; KubeRay deletes
  the RayCluster and the submitter Job and keeps the RayJob; resuming creates a cluster and submits the Ray job again
  from its start. KubeRay refuses to suspend a RayJob whose shutdownAfterJobFinishes is false (ValidateRayJobSpec):
  such a RayJob, and a RayCluster no RayJob controls, are evicted and advised.

Not when another controller owns the suspend field, which it would set back: Kueue (the `kueue.x-k8s.io/queue-name`
label resumes an admitted workload), a RayJob (over the RayCluster it created: the RayJob is stopped, never its
cluster). When the owner runs other pods than the one judged, it is suspended only with every one of them: pods of
one controller are judged as one job (core.cluster.owner_gang_key) and a stop is asked pod by pod, so the caller
names the siblings whose own stop is due now (stop_job's `siblings`, id -> uid: agent/graph/execute.py
_due_siblings, where each one's stop for the same reason passes the guardrail, its owner warned and its deadline
passed, re-read idle with the job). When every other pod the owner runs is among them, under that very uid, the
owner is suspended once (each pod's budgets asked first by a dry run), the result names the pods it covered and the
owner's uid, and their stops are recorded as done through it; a sibling's own stop then finds the owner suspended
and patches nothing. Otherwise (a sibling protected, kept, not warned, before its deadline, working, or replaced)
the pod alone is evicted, and the result names the siblings not due and says how to stop the workload
(shared_owner; for a RayJob the head and CPU-only pods of its cluster are not counted: the gang rule never lets an
idle GPU worker's stop through while one of them works, agent/detectors/gang.py). An owner already suspended is
never patched again nor its pod evicted, whatever pods it runs. A cluster that does not serve the owner's resource
(404: the CRD is not installed) gets the eviction and the advice, and the result says so.

Any other controller that replaces pods (a StatefulSet not from a Notebook, MXJob, a RayCluster of its own, ...)
has no agreed stop verb the steward uses: its pod is evicted as before, and the stop result and the owner's
warning say plainly that the controller starts it again and how the owner stops the workload. This module does
no I/O: the calls are KubernetesScheduler's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from core.cluster import JobInfo

NOTEBOOK_STOPPED = "kubeflow-resource-stopped"  # Kubeflow's culler: STOP_ANNOTATION
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"  # a Job Kueue admits: Kueue owns its spec.suspend
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
MERGE_PATCH = "application/merge-patch+json"  # what a CRD accepts (no strategic merge patch), and a Job too
# The Kubeflow training operator's jobs (kubeflow.org) and the MPI operator's: suspended through spec.runPolicy.
TRAINING_KINDS = ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "MXJob")
# Those the steward suspends: the training operator (v1.7+) honours runPolicy.suspend for them (an MXJob is advised).
SUSPENDED_TRAINING = ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
TRAINING_GROUP = "kubeflow.org"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a DNS-1123 name: safe to quote in a shell command


@dataclass(frozen=True)
class OwnerRef:
    """An ownerReference: what it names (group, version, kind, name) and its immutable identity (uid)."""

    api_version: str
    kind: str
    name: str
    uid: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


@dataclass(frozen=True)
class OwnerResource:
    """Where an owner kind is served (group, plural) and what the steward's role needs on it."""

    group: str
    plural: str
    kind: str

    def rule(self, verbs: str = "get, patch") -> str:
        """The RBAC rule to add, as it reads in deploy/kubernetes/base/rbac.yaml."""
        return f'{{apiGroups: ["{self.group}"], resources: ["{self.plural}"], verbs: [{verbs}]}}'


JOBS = OwnerResource("batch", "jobs", "Job")
STATEFULSETS = OwnerResource("apps", "statefulsets", "StatefulSet")
NOTEBOOKS = OwnerResource("kubeflow.org", "notebooks", "Notebook")
JOBSETS = OwnerResource("jobset.x-k8s.io", "jobsets", "JobSet")
RAYCLUSTERS = OwnerResource("ray.io", "rayclusters", "RayCluster")  # read only: its RayJob is what is suspended
RAYJOBS = OwnerResource("ray.io", "rayjobs", "RayJob")
TRAINING = {kind: OwnerResource(TRAINING_GROUP, f"{kind.lower()}s", kind) for kind in SUSPENDED_TRAINING}
# Resources a cluster may not serve (a CRD not installed): then the pod is evicted, with the advice, as before.
OPTIONAL = (JOBSETS, RAYCLUSTERS, RAYJOBS, *TRAINING.values())


def suspend_path(kind: str) -> tuple[str, ...]:
    """Where the owner's suspend field is: spec.runPolicy.suspend for a training job, else spec.suspend."""
    return ("spec", "runPolicy", "suspend") if kind in SUSPENDED_TRAINING else ("spec", "suspend")


def _field(kind: str) -> str:
    return ".".join(suspend_path(kind))


def _nested(path: tuple[str, ...], value: object) -> dict:
    out: dict = {path[-1]: value}
    for key in reversed(path[:-1]):
        out = {key: out}
    return out


def controller_ref(meta: dict) -> OwnerRef | None:
    """The ownerReference marked controller (the one that replaces the object), else None."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid") and ref.get("name"):
            return OwnerRef(str(ref.get("apiVersion", "")), str(ref.get("kind", "")), str(ref["name"]),
                            str(ref["uid"]))
    return None


def route(pod_meta: dict) -> tuple[str, OwnerRef | None]:
    """How a pod is stopped: ("job", its Job, or the JobSet above it), ("statefulset", the StatefulSet a Kubeflow
    notebook runs in: its Notebook is read from it), ("notebook", a Notebook owning the pod directly), ("training",
    a training job owning it), ("raycluster", the RayCluster it runs in: its RayJob is read from it), else ("evict",
    its controller or None)."""
    ref = controller_ref(pod_meta)
    if ref is None:
        return "evict", None
    if ref.kind == "Job" and ref.group == "batch":
        return "job", ref
    if ref.kind in SUSPENDED_TRAINING and ref.group == TRAINING_GROUP:
        return "training", ref
    if ref.kind == "RayCluster" and ref.group == RAYCLUSTERS.group:
        return "raycluster", ref
    if ref.kind == "StatefulSet" and ref.group == "apps" and "notebook-name" in (pod_meta.get("labels") or {}):
        return "statefulset", ref
    if ref.kind == "Notebook" and ref.group == NOTEBOOKS.group:
        return "notebook", ref
    return "evict", ref


def notebook_of(statefulset: dict) -> OwnerRef | None:
    """The Kubeflow Notebook controlling a StatefulSet, with the version its ownerReference names (one the cluster
    serves: the controller wrote it), else None."""
    ref = controller_ref(statefulset.get("metadata") or {})
    return ref if ref is not None and ref.kind == "Notebook" and ref.group == NOTEBOOKS.group else None


def jobset_of(job: dict) -> OwnerRef | None:
    """The JobSet controlling a Job (at the version its ownerReference names), else None."""
    ref = controller_ref(job.get("metadata") or {})
    return ref if ref is not None and ref.kind == "JobSet" and ref.group == JOBSETS.group else None


def rayjob_of(cluster: dict) -> OwnerRef | None:
    """The RayJob controlling a RayCluster (it created the cluster and owns its lifecycle), else None."""
    ref = controller_ref(cluster.get("metadata") or {})
    return ref if ref is not None and ref.kind == "RayJob" and ref.group == RAYJOBS.group else None


def managed_owner(kind: str, obj: dict) -> str | None:
    """Why a JobSet's, training job's or RayJob's suspend field is another controller's, or is refused by its own
    (KubeRay), so that the steward does not patch it; else None."""
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace", "default"), str(meta.get("name") or "NAME")
    if KUEUE_QUEUE in (meta.get("labels") or {}) or KUEUE_QUEUE in (meta.get("annotations") or {}):
        return (f"its {kind} {ns}/{name} is queued by Kueue, which resumes an admitted workload: to stop the "
                f"workload, deactivate its Workload (kubectl get workloads -n {ns}; spec.active=false)")
    spec = obj.get("spec") or {}
    if kind == "RayJob" and (not spec.get("shutdownAfterJobFinishes") or spec.get("clusterSelector")):
        return (f"KubeRay does not suspend RayJob {ns}/{name} (only one with shutdownAfterJobFinishes: true and its "
                f"own cluster): to free the GPUs, delete it (kubectl delete rayjob {_q(name)} -n {_q(ns)})")
    return None


def shared_owner(kind: str, obj: dict, pods: int | None, left: list[str] | None = None) -> str | None:
    """Why suspending a JobSet, training job or RayJob would stop more than the pods whose stop is due: it runs other
    pods (for a RayJob, other GPU pods), else None; `pods` as listed now (None: the listing failed), `left` those of
    them whose own stop is not due now (None: not asked). Then the pod alone is evicted, and its controller starts it
    again: said, with how the owner stops the workload."""
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace", "default"), str(meta.get("name") or "NAME")
    how = _how_to_stop(kind, name, ns, "en")
    if pods is None:
        return (f"the pods of its {kind} {ns}/{name} could not be listed: this pod alone is evicted and its "
                f"{kind} starts it again; {how}")
    if pods <= 1:
        return None
    what = "GPU pods" if kind == "RayJob" else "pods"
    which = (f"{_some(left)} {'is' if len(left) == 1 else 'are'} not due for the same stop now (each warned, past "
             "its deadline, idle with the job)" if left else "not each of them due for the same stop now")
    return (f"its {kind} {ns}/{name} runs {pods} {what}, {which}: suspending it would stop them all, so this pod "
            f"alone is evicted and the {kind} starts it again; {how}")


def _some(ids: list[str], most: int = 4) -> str:
    return ", ".join(ids[:most]) + (f" and {len(ids) - most} more" if len(ids) > most else "")


def with_pods_text(ids: list[str]) -> str:
    """A stop result's words for the other pods one suspension of their owner stopped with the pod asked for."""
    return (f"with it its other {'pod' if len(ids) == 1 else f'{len(ids)} pods'} {_some(ids, 8)}, each due for the "
            "same stop now (warned, past its deadline, idle with the job), so the owner is suspended once for all")


def gang_suspend_note(kind: str, name: str, ns: str, pods: int, language: str) -> str:
    """The owner's warning for a pod of a JobSet, training job or RayJob that runs other pods: it is suspended once
    every pod of it is due to be stopped (stop_job's `siblings`); before that, a stop evicts the pod alone."""
    cmd = resume_command(kind, name, ns)
    what = ("GPU pods" if kind == "RayJob" else "pods")
    if language == "zh":
        done, resumed = _on_suspend(kind, "zh")
        return (f"停止方式：当 `{kind}` `{ns}/{name}` 的全部 {pods} 个 Pod 都到了停止时间（整个作业空闲、均已警告且已过期限），"
                f"steward 只暂停该 `{kind}` 一次（`{_field(kind)}=true`），{done}{resumed}。恢复：`{cmd}`。"
                f"在此之前若要停止，steward 只驱逐该 Pod，`{kind}` 会重新创建它，只能暂时释放 GPU。")
    done, resumed = _on_suspend(kind)
    return (f"How: once every one of the {pods} {what} of its {kind} {ns}/{name} is due to be stopped (the whole job "
            f"idle, each pod warned and past its deadline), the steward suspends the {kind} once "
            f"({_field(kind)}=true): {done}{resumed}. To resume: `{cmd}`. A stop before that evicts this pod only, "
            f"and the {kind} starts it again, freeing the GPUs only for a while.")


def managed_job(job: dict) -> str | None:
    """Why a Job's suspend field is another controller's (it would resume the Job), else None."""
    meta = job.get("metadata") or {}
    ns = meta.get("namespace", "default")
    ref = controller_ref(meta)
    if ref is not None and ref.kind != "CronJob":  # a CronJob leaves its Jobs' spec alone
        if ref.kind == "JobSet":
            return (f"its Job is managed by JobSet {ns}/{ref.name}, which resumes a suspended child Job: to stop the "
                    f"workload, suspend the JobSet: {_cmd_jobset(ref.name, ns)}")
        return f"its Job is managed by {ref.kind} {ns}/{ref.name}: to stop the workload, stop the {ref.kind}"
    if KUEUE_QUEUE in (meta.get("labels") or {}) or KUEUE_QUEUE in (meta.get("annotations") or {}):
        return (f"its Job is queued by Kueue, which resumes an admitted Job: to stop the workload, deactivate its "
                f"Workload (kubectl get workloads -n {ns}; spec.active=false)")
    return None


def shared_job(job: dict, pods: int | None) -> str | None:
    """Why suspending a Job would stop more than the pod judged: it runs other pods too (a parallel Job's workers
    are judged one by one), else None. Then only the pod is evicted. `pods`: its active pods as listed now (None:
    the listing failed, and what is not known to be alone is not suspended); its status may lag behind."""
    meta = job.get("metadata") or {}
    if pods is None:
        return (f"the pods of its Job {meta.get('namespace', 'default')}/{meta.get('name')} could not be listed: "
                "this pod alone is evicted")
    active = max(int((job.get("status") or {}).get("active") or 0), pods)
    if active <= 1:
        return None
    return (f"its Job {meta.get('namespace', 'default')}/{meta.get('name')} runs {active} pods: suspending it would "
            "stop them all, so this pod alone is evicted and the Job may start a replacement")


def evicted_job_note(why: str, language: str) -> str:
    """The owner's warning for a Job's pod that is evicted rather than stopped through its Job, and why."""
    if language == "zh":
        return f"注意：steward 只驱逐该 Pod，其 Job 可能会重新创建它（{why}）。"
    return f"Note: the steward evicts this pod only, and its Job may start it again ({why})."


def stopped_since(kind: str, obj: dict) -> str | None:
    """When the owner was already stopped (its annotation's time, "" when unknown), else None."""
    if kind == "Notebook":
        return ((obj.get("metadata") or {}).get("annotations") or {}).get(NOTEBOOK_STOPPED)
    value: object = obj
    for key in suspend_path(kind):
        value = value.get(key) if isinstance(value, dict) else None
    return "" if value is True else None


def stop_patch(kind: str, obj: dict, stamp: str) -> dict:
    """The merge patch that stops the owner; its metadata.uid and resourceVersion make the API server refuse it (409)
    for a namesake created since or an object changed since it was read."""
    meta = obj.get("metadata") or {}
    guard: dict = {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
    if kind == "Notebook":
        return {"metadata": {**guard, "annotations": {NOTEBOOK_STOPPED: stamp}}}
    return {"metadata": guard, **_nested(suspend_path(kind), True)}


def _q(name: str) -> str:
    return name if _NAME.match(name) else "NAME"


def _cmd_jobset(name: str, ns: str) -> str:
    return _cmd_suspend("JobSet", name, ns, True)


def resume_command(kind: str, name: str, ns: str) -> str:
    """What the owner runs to undo the steward's stop."""
    if kind == "Notebook":
        return f"kubectl annotate notebook {_q(name)} -n {_q(ns)} {NOTEBOOK_STOPPED}-"
    return _cmd_suspend(kind, name, ns, False)


def _cmd_suspend(kind: str, name: str, ns: str, suspend: bool) -> str:
    body = json.dumps(_nested(suspend_path(kind), suspend), separators=(",", ":"))
    return f"kubectl patch {kind.lower()} {_q(name)} -n {_q(ns)} --type=merge -p '{body}'"


# What each suspend-stopped owner's controller does with its pods, and what resuming does (stopped_text, suspend_note).
_ON_SUSPEND = {
    "Job": ("the Job controller deletes its pods with their grace period and keeps the Job", ""),
    "JobSet": ("the JobSet controller suspends its child Jobs, whose pods are deleted with their grace period, and keeps "
               "the JobSet", ""),
    "RayJob": ("KubeRay deletes its RayCluster and submitter Job and keeps the RayJob",
               "; resuming creates a new cluster and submits the Ray job again from its start"),
}
_TRAINING_ON_SUSPEND = ("the training operator deletes its pods and services and keeps the {kind}",
                        "; resuming creates its replicas again (training continues from the job's own checkpoints)")
_ON_SUSPEND_ZH = {
    "Job": ("`Job` 控制器按 Pod 自身的宽限期停止其 Pod，`Job` 本身保留", ""),
    "JobSet": ("`JobSet` 控制器暂停其子 `Job`，其 Pod 按宽限期停止，`JobSet` 本身保留", ""),
    "RayJob": ("`KubeRay` 删除其 `RayCluster` 和提交用的 `Job`，`RayJob` 本身保留",
               "；恢复后会新建集群并从头重新提交该作业"),
}
_TRAINING_ON_SUSPEND_ZH = ("训练作业控制器删除其 Pod 和服务，`{kind}` 本身保留",
                           "；恢复后重新创建各副本（训练从作业自己的检查点继续）")


def _on_suspend(kind: str, language: str = "en") -> tuple[str, str]:
    if language == "zh":
        done, resumed = _ON_SUSPEND_ZH.get(kind, _TRAINING_ON_SUSPEND_ZH)
    else:
        done, resumed = _ON_SUSPEND.get(kind, _TRAINING_ON_SUSPEND)
    return done.format(kind=kind), resumed


def stopped_text(kind: str, name: str, ns: str, uid: str, stamp: str | None) -> str:
    """A stop result's detail for a stop through the owner (stamp None: it was already stopped, nothing patched)."""
    if kind != "Notebook":
        done, resumed = _on_suspend(kind)
        head = (f"{kind} {ns}/{name} (uid {uid}) was already suspended; nothing patched" if stamp is None else
                f"{kind} {ns}/{name} (uid {uid}) suspended ({_field(kind)}=true)")
        return f"{head}: {done}{resumed}; resume with `{resume_command(kind, name, ns)}`"
    head = (f"Notebook {ns}/{name} (uid {uid}) was already stopped ({NOTEBOOK_STOPPED}); nothing patched"
            if stamp is None else
            f"Notebook {ns}/{name} (uid {uid}) stopped as Kubeflow's idle culler does ({NOTEBOOK_STOPPED}={stamp})")
    return (f"{head}: the notebook controller scales its StatefulSet to 0 and its volumes keep the work; the owner "
            f"starts it again from the Kubeflow notebooks page, or `{resume_command(kind, name, ns)}`")


def suspend_note(kind: str, name: str, ns: str, language: str) -> str:
    """The owner's warning for a pod stopped by suspending its JobSet, training job or RayJob: how, and how to
    resume."""
    cmd = resume_command(kind, name, ns)
    if language == "zh":
        done, resumed = _on_suspend(kind, "zh")
        return f"停止方式：暂停其 `{kind}` `{ns}/{name}`（`{_field(kind)}=true`），{done}{resumed}。恢复：`{cmd}`。"
    done, resumed = _on_suspend(kind)
    return (f"How: the steward suspends its {kind} {ns}/{name} ({_field(kind)}=true): {done}{resumed}. "
            f"To resume: `{cmd}`.")


def evicted_owner_note(kind: str, why: str, language: str) -> str:
    """The owner's warning for a pod of a JobSet, training job or RayJob that is evicted rather than stopped through
    its owner, and why (with how the owner stops the workload)."""
    if language == "zh":
        return f"注意：steward 只驱逐该 Pod，其 `{kind}` 会重新创建它，只能暂时释放 GPU（{why}）。"
    return f"Note: the steward evicts this pod only, and its {kind} starts it again, freeing the GPUs only for a while ({why})."


def replaced_note(pod_meta: dict) -> str:
    """For a pod that is evicted: whether its controller starts it again, and how the owner stops the workload."""
    ref = controller_ref(pod_meta)
    if ref is None:
        return ""
    ns, labels = pod_meta.get("namespace", "default"), pod_meta.get("labels") or {}
    name = ref.name
    if ref.kind == "ReplicaSet" and labels.get("pod-template-hash"):
        name = re.sub(rf"-{re.escape(labels['pod-template-hash'])}$", "", name)
        return (f"its Deployment {ns}/{name} starts a replacement pod: to free the GPUs, scale it down "
                f"(kubectl scale deployment {_q(name)} -n {_q(ns)} --replicas=0)")
    return f"its {ref.kind} {ns}/{name} starts a replacement pod: {_how_to_stop(ref.kind, name, ns, 'en')}"


def how_to_stop(kind: str, name: str, ns: str) -> str:
    """How the owner stops a workload whose controller the steward did not stop (English, for a stop result)."""
    return _how_to_stop(kind, name, ns, "en")


def _how_to_stop(kind: str, name: str, ns: str, language: str) -> str:
    """How the owner stops a workload whose controller the steward does not stop."""
    zh = language == "zh"
    if kind == "StatefulSet":
        cmd = f"kubectl scale statefulset {_q(name)} -n {_q(ns)} --replicas=0"
        return f"要释放 GPU，请将其缩容到零：`{cmd}`" if zh else f"to free the GPUs, scale it to zero: `{cmd}`"
    if kind in TRAINING_KINDS or kind == "RayJob":
        cmd = _cmd_suspend(kind, name, ns, True)
        return f"要停止它，请暂停该作业：`{cmd}`" if zh else f"to stop it, suspend it: `{cmd}`"
    if kind == "RayCluster":
        return ("要停止它，请暂停创建它的 `RayJob`（`spec.suspend: true`）或删除该 `RayCluster`" if zh
                else "to stop it, suspend the RayJob that created it (spec.suspend: true) or delete the RayCluster")
    if kind == "JobSet":
        return f"要停止它，请暂停该 `JobSet`：`{_cmd_jobset(name, ns)}`" if zh else \
            f"to stop it, suspend the JobSet: `{_cmd_jobset(name, ns)}`"
    return (f"要释放 GPU，请停止该 `{kind}` 本身（暂停或缩容到零）" if zh
            else f"to free the GPUs, stop the {kind} itself (suspend it or scale it to zero)")


def stop_note(job: JobInfo, language: str) -> str:
    """The owner's warning, on how the stop is done and how to undo it (or why a stop would not free the GPUs and
    how the owner stops the workload), from what the pod listing shows; "" for a pod nothing replaces."""
    zh = language == "zh"
    ns, labels, kind = job.namespace, job.labels, job.owner_kind or "Pod"
    if kind == "Notebook":
        name = labels.get("notebook-name") or job.name
        cmd = resume_command("Notebook", name, ns)
        if zh:
            return (f"停止方式：与 Kubeflow 的空闲回收相同，在 `Notebook` `{ns}/{name}` 上设置 `{NOTEBOOK_STOPPED}` 注解，"
                    f"笔记本缩容到零，数据卷中的文件保留。恢复：在 Kubeflow 笔记本页面重新启动，或运行 `{cmd}`。")
        return (f"How: as Kubeflow's idle culler does, the steward sets `{NOTEBOOK_STOPPED}` on Notebook {ns}/{name}, "
                f"which scales the notebook to zero; its volumes keep your files. To resume: start it again from the "
                f"Kubeflow notebooks page, or run `{cmd}`.")
    if kind == "Job" and labels.get(JOBSET_NAME):
        name = labels[JOBSET_NAME]
        how = _how_to_stop("JobSet", name, ns, language)
        if zh:
            return f"注意：该 Pod 属于 `JobSet` `{ns}/{name}`，被驱逐后会被重新创建，停止它只能暂时释放 GPU；{how}。"
        return (f"Note: this pod belongs to JobSet {ns}/{name}, which starts it again after an eviction, so a stop "
                f"frees the GPUs only for a while; {how}.")
    if kind == "Job":
        name = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name") or job.name
        cmd = resume_command("Job", name, ns)
        if zh:
            return (f"停止方式：暂停其 `Job` `{ns}/{name}`（`spec.suspend=true`），Job 控制器按 Pod 自身的宽限期停止其 Pod，"
                    "Job 本身保留。"
                    f"恢复：`{cmd}`。")
        return (f"How: the steward suspends its Job {ns}/{name} (spec.suspend=true): the Job controller stops its "
                f"pods (with their own termination grace period) and keeps the Job. To resume: `{cmd}`.")
    if kind in ("Pod", "batch", "Deployment"):  # nothing replaces it; a Slurm job; a Deployment is only advised
        return ""
    name = (labels.get("training.kubeflow.org/job-name") if kind in TRAINING_KINDS else
            labels.get("ray.io/cluster") if kind == "RayCluster" else
            re.sub(r"-\d+$", "", job.name) if kind == "StatefulSet" else None) or "NAME"
    how = _how_to_stop(kind, name, ns, language)
    if zh:
        return f"注意：该 Pod 由 `{kind}` `{ns}/{name}` 管理，被驱逐后会被重新创建，停止它只能暂时释放 GPU；{how}。"
    return (f"Note: this pod is run by {kind} {ns}/{name}, which starts it again after an eviction, so a stop frees "
            f"the GPUs only for a while; {how}.")
