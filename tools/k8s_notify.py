"""KubernetesEventNotifier: warns a pod's owner with a Warning Event on the pod and a stop-after annotation."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from core.cluster import NotifyResult
from tools.kubernetes import REQUEST_TIMEOUT_S, WallClock, api_message, split_job_id
from tools.protocols import Clock

STOP_AFTER = "steward.io/stop-after"
WARNED_AT = "steward.io/warned-at"
REASON = "StewardWarning"
COMPONENT = "gpu-steward"


class KubernetesEventNotifier:
    """Notifier: `kubectl describe pod` and `kubectl get events` show the warning, as with kube-janitor."""

    def __init__(self, core_api: Any, *, notice_s: float, clock: Clock | None = None,
                 request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.core = core_api
        self.request_timeout_s = request_timeout_s
        self.notice_s = notice_s  # the policy's warning.min_notice: the earliest stop the pod is told about
        self.clock = clock or WallClock()
        self.api_calls = 0

    def notify(self, recipient: str, subject: str, body: str, *, job_id: str | None = None,
               deadline: datetime | None = None, target_uid: str | None = None) -> NotifyResult:
        from kubernetes import client

        if job_id is None:
            return NotifyResult(recipient=recipient, status="suppressed", channel="kubernetes-event",
                                detail="no pod to attach a Kubernetes event to")
        ns, name = split_job_id(job_id)
        now = self.clock.now()
        # The warning's own deadline (the later of the notice and the job's long-tail grace), else the notice.
        stop_after = (deadline or now + timedelta(seconds=self.notice_s)).isoformat()
        try:
            # The annotation first: it tells us the pod still exists and gives its uid for the event. With the uid
            # in the patch the API server applies it only to that pod (409 for a namesake created since).
            self.api_calls += 1
            meta: dict[str, Any] = {"annotations": {STOP_AFTER: stop_after, WARNED_AT: now.isoformat()}}
            if target_uid:
                meta["uid"] = target_uid
            resp = self.core.patch_namespaced_pod(
                name, ns, {"metadata": meta},
                _content_type="application/merge-patch+json", _preload_content=False,
                _request_timeout=self.request_timeout_s)
            pod = json.loads(resp.data)
            event_name = f"{name}.steward-{uuid.uuid4().hex[:10]}"
            event = client.CoreV1Event(
                metadata=client.V1ObjectMeta(name=event_name, namespace=ns),
                involved_object=client.V1ObjectReference(api_version="v1", kind="Pod", name=name, namespace=ns,
                                                         uid=pod["metadata"].get("uid")),
                reason=REASON, type="Warning", message=f"{subject}: {body}"[:1024], count=1,
                first_timestamp=now, last_timestamp=now,
                source=client.V1EventSource(component=COMPONENT), reporting_component=COMPONENT,
                reporting_instance=COMPONENT,
            )
            self.api_calls += 1
            self.core.create_namespaced_event(ns, event, _preload_content=False,
                                              _request_timeout=self.request_timeout_s)
        except Exception as exc:
            code = getattr(exc, "status", None)
            if code is None:
                raise
            why = ("the pod no longer exists" if code == 404 else
                   f"the pod is another one now (not uid {target_uid}): {api_message(exc)}" if code == 409 and target_uid
                   else f"HTTP {code}: {api_message(exc)}")
            return NotifyResult(recipient=recipient, status="error", channel="kubernetes-event", detail=why)
        return NotifyResult(recipient=recipient, status="sent", channel="kubernetes-event", message_id=event_name,
                            detail=f"event {ns}/{event_name}; {STOP_AFTER}={stop_after}")


def kubernetes_notifier_from_settings(settings: Any, notice_s: float, *, clock: Clock | None = None,
                                      api_client: Any = None) -> KubernetesEventNotifier:
    from kubernetes import client

    from tools.kubernetes import kubernetes_api_client

    return KubernetesEventNotifier(client.CoreV1Api(api_client or kubernetes_api_client(settings)),
                                   notice_s=notice_s, clock=clock)
