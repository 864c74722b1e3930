"""A loopback Kubernetes API server for tests: the real REST paths, JSON shapes, discovery and Status errors.

Only the API server's part: controllers (the Job controller acting on spec.suspend, Kubeflow's notebook controller
acting on kubeflow-resource-stopped, the training operator, JobSet and KubeRay acting on their suspend fields) are
not here; a test that needs one runs it (tests/k8s_fake_cluster.py). Custom resources (Notebook, the training jobs,
JobSet, RayJob, RayCluster) are served as a CRD serves them. A resource named in `unserved`
("notebooks.kubeflow.org", "pytorchjobs.kubeflow.org") is absent, as on a cluster without that CRD: not in
discovery, 404 for its paths. PATCH takes the media types the API server does (415 otherwise; no strategic merge
patch for a CRD's resources); metadata.uid and resourceVersion in a merge patch are preconditions (409).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from dataclasses import dataclass
from datetime import UTC, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.k8s_fake_store import RESOURCES, ApiError, FakeStore, Resource, json_patch, merge_patch

_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


def _resource_list(group_version: str, resources: list[Resource]) -> dict:
    out = []
    for r in resources:
        out.append({"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
                    "verbs": list(r.verbs)})
        for sub in r.subresources:
            kind = {"log": "Pod", "eviction": "Eviction", "scale": "Scale"}[sub]
            verbs = {"log": ["get"], "eviction": ["create"], "scale": ["get", "patch", "update"]}[sub]
            out.append({"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced, "kind": kind,
                        "verbs": verbs})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": out}


def _served(unserved: set[str]) -> list[Resource]:
    return [r for r in RESOURCES if (f"{r.plural}.{r.group}" if r.group else r.plural) not in unserved]


def _groups(resources: list[Resource]) -> dict[str, str]:
    return {r.group: r.version for r in resources if r.group}


_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json")


def _group(name: str, version: str) -> dict:
    gv = {"groupVersion": f"{name}/{version}", "version": version}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": [gv], "preferredVersion": gv}


def _scale(md: dict) -> dict:
    meta = md["metadata"]
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                         "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"]},
            "spec": {"replicas": md["spec"].get("replicas", 1)},
            "status": {"replicas": (md.get("status") or {}).get("replicas", 0),
                       "selector": f"cluster.x-k8s.io/deployment-name={meta['name']}"}}


@dataclass
class Fault:
    """An injected failure: the next `times` requests whose method matches and whose path contains `path_part`
    are answered with a meta/v1 Status error of `status` (`exact`: whose path is `path_part`). `hang_s` delays the answer first (a client with a
    shorter timeout gives up: a timeout); `applied` carries the request out before failing it (the effect
    happened, the answer was lost). `times=-1` keeps failing until `clear_faults()`."""

    method: str
    path_part: str
    status: int = 500
    reason: str = "InternalError"
    message: str = "Internal error occurred: injected fault"
    times: int = 1
    hang_s: float = 0.0
    applied: bool = False
    exact: bool = False


class FakeKubernetesApi:
    """Serves a FakeStore on 127.0.0.1; `requests` records (method, path, query) of every call, `callers` its
    (method, path, Authorization header): which client (kubeconfig token) sent it, when several share the API."""

    def __init__(self, store: FakeStore | None = None, *, unserved: tuple[str, ...] = ()) -> None:
        self.store = store or FakeStore()
        self.unserved = set(unserved)  # "plural.group" (core: "plural") this server does not serve
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.callers: list[tuple[str, str, str]] = []
        self.faults: list[Fault] = []
        self._faults_lock = threading.Lock()
        self._stopping = threading.Event()
        api = self

        class Handler(_Handler):
            owner = api

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def start(self) -> FakeKubernetesApi:
        self._thread.start()
        return self

    def inject(self, fault: Fault) -> Fault:
        with self._faults_lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._faults_lock:
            self.faults.clear()

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._faults_lock:
            for fault in self.faults:
                hit = path == fault.path_part if fault.exact else fault.path_part in path
                if fault.method == method and hit and fault.times != 0:
                    fault.times -= 1 if fault.times > 0 else 0
                    return fault
        return None

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers hanging on a fault
        self._server.shutdown()
        self._server.server_close()

    def calls(self, method: str, path_part: str = "") -> list[tuple[str, str, dict]]:
        return [r for r in self.requests if r[0] == method and path_part in r[1]]

    def write_kubeconfig(self, path: Path, token: str = "fake-token") -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "steward", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "steward", "namespace": "default"}}],
        }))
        return path


class _Handler(BaseHTTPRequestHandler):
    owner: FakeKubernetesApi
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet in test output
        pass

    _discard = False  # set while an injected fault carries a request out whose answer is then lost

    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        if self._discard:
            return
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else {}

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        self.owner.requests.append((method, url.path, query))
        self.owner.callers.append((method, url.path, self.headers.get("Authorization", "")))
        fault = self.owner._take_fault(method, url.path)
        if fault is not None:
            return self._fail(method, url.path, query, fault)
        self._answer(method, url.path, query)

    def _answer(self, method: str, path: str, query: dict[str, list[str]]) -> None:
        try:
            self._route(method, path.rstrip("/") or "/", {k: v[-1] for k, v in query.items()})
        except ApiError as err:
            self._send(err.code, err.status())
        except (KeyError, ValueError, TypeError) as err:
            self._send(400, ApiError(400, "BadRequest", f"bad request: {err}").status())

    def _fail(self, method: str, path: str, query: dict[str, list[str]], fault: Fault) -> None:
        if fault.applied:
            self._discard = True
            try:
                self._answer(method, path, query)
            finally:
                self._discard = False
        else:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if fault.hang_s:
            self.owner._stopping.wait(fault.hang_s)
        with contextlib.suppress(OSError):  # the client gave up waiting (a timeout): nobody reads the answer
            self._send(fault.status, ApiError(fault.status, fault.reason, fault.message).status())

    do_GET = lambda self: self._handle("GET")  # noqa: E731
    do_POST = lambda self: self._handle("POST")  # noqa: E731
    do_PUT = lambda self: self._handle("PUT")  # noqa: E731
    do_PATCH = lambda self: self._handle("PATCH")  # noqa: E731
    do_DELETE = lambda self: self._handle("DELETE")  # noqa: E731

    def _route(self, method: str, path: str, q: dict[str, str]) -> None:
        served = _served(self.owner.unserved)
        groups = _groups(served)
        if path == "/version":
            return self._send(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake", "platform": "linux/amd64"})
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.owner.url.removeprefix("http://")}]})
        if path == "/api/v1":
            return self._send(200, _resource_list("v1", [r for r in served if not r.group]))
        if path == "/apis":
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                    "groups": [_group(g, v) for g, v in groups.items()]})
        if m := re.fullmatch(r"/apis/([^/]+)", path):
            if m[1] not in groups:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._send(200, _group(m[1], groups[m[1]]))
        if (m := re.fullmatch(r"/apis/([^/]+)/([^/]+)", path)) and groups.get(m[1]) == m[2]:
            return self._send(200, _resource_list(f"{m[1]}/{m[2]}", [r for r in served if r.group == m[1]]))
        m = _PATH.match(path)
        group, version = ("", "v1") if m and m["core"] else ((m["group"], m["version"]) if m else ("", ""))
        res = next((r for r in served if m and (r.group, r.version, r.plural) == (group, version, m["plural"])), None)
        if m is None or res is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns, name, sub = m["ns"] or "", m["name"], m["sub"]
        self._resource(method, res, ns, name, sub, q)

    def _resource(self, method: str, res: Resource, ns: str, name: str | None, sub: str | None,
                  q: dict[str, str]) -> None:
        store = self.owner.store
        if name is None:
            if method == "GET":
                items = store.list(res.plural, ns or None, q.get("labelSelector"), q.get("fieldSelector"))
                if q.get("watch") in ("true", "1"):
                    return self._watch(items)
                return self._send(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                                        "metadata": {"resourceVersion": store.resource_version()}, "items": items})
            if method == "POST":
                body = self._body()
                if res.namespaced:
                    body.setdefault("metadata", {})["namespace"] = ns
                if res.plural == "leases" and (ns, body["metadata"].get("name")) in store.objects["leases"]:
                    raise ApiError(409, "AlreadyExists", f'leases "{body["metadata"]["name"]}" already exists')
                return self._send(201, store.put(res.plural, body))
        elif sub is None:
            if method == "GET":
                return self._send(200, store.get(res.plural, ns, name))
            if method == "DELETE":
                body = self._body()
                grace = q.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
                store.check_preconditions(res.plural, ns, name, body.get("preconditions"))
                return self._send(200, store.delete(res.plural, ns, name, None if grace is None else int(grace)))
            if method == "PATCH":
                ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
                accepted = [t for t in _PATCH_TYPES if not (res.crd and "strategic" in t)]
                if ctype not in accepted:
                    self._body()
                    raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                   f"accepted media types include: {', '.join(accepted)}")
                return self._send(200, store.patch(res.plural, ns, name, self._body(), ctype))
            if method == "PUT":  # optimistic concurrency: a replace carrying an old resourceVersion is refused
                body = self._body()
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted and wanted != store.get(res.plural, ns, name)["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", f"the object has been modified; {res.plural} {name!r}")
                return self._send(200, store.put(res.plural, body))
        elif sub == "log" and method == "GET":
            return self._log(ns, name, q)
        elif sub == "eviction" and method == "POST":
            options = self._body().get("deleteOptions") or {}
            store.check_preconditions("pods", ns, name, options.get("preconditions"))
            dry_run = q.get("dryRun") == "All" or "All" in (options.get("dryRun") or [])
            store.evict(ns, name, options.get("gracePeriodSeconds"), dry_run=dry_run)
            return self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                    "code": 201})
        elif sub == "scale" and res.plural == "machinedeployments":
            return self._scale(method, ns, name)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {res.plural}/{sub or ''}")

    def _scale(self, method: str, ns: str, name: str) -> None:
        store = self.owner.store
        if method in ("PATCH", "PUT"):
            body = self._body()
            current = _scale(store.get("machinedeployments", ns, name))
            ctype = self.headers.get("Content-Type", "")
            wanted = body if method == "PUT" else (json_patch(current, body) if "json-patch" in ctype
                                                   else merge_patch(current, body))
            replicas = int(wanted["spec"]["replicas"])
            if replicas < 0:
                raise ApiError(422, "Invalid", "spec.replicas: must be greater than or equal to 0")
            store.patch("machinedeployments", ns, name, {"spec": {"replicas": replicas}}, "merge")
            store.reconcile_machinedeployment(ns, name)
        elif method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on scale")
        self._send(200, _scale(store.get("machinedeployments", ns, name)))

    def _log(self, ns: str, name: str, q: dict[str, str]) -> None:
        lines = self.owner.store.pod_log(ns, name)
        if "sinceSeconds" in q:
            since = self.owner.store.now() - timedelta(seconds=int(q["sinceSeconds"]))
            lines = [(at, text) for at, text in lines if at >= since]
        if "tailLines" in q:
            lines = lines[-int(q["tailLines"]):] if int(q["tailLines"]) else []
        stamp = q.get("timestamps") in ("true", "1")
        text = "".join((f"{at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z " if stamp else "") + line + "\n"
                       for at, line in lines)
        self._send(200, text.encode(), "text/plain")

    def _watch(self, items: list[dict]) -> None:
        # Minimal watch: the current objects as ADDED events, then the stream ends (a server-side timeout).
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for item in items:
            data = (json.dumps({"type": "ADDED", "object": item}) + "\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")
