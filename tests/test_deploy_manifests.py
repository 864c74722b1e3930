"""deploy/kubernetes: every overlay renders with the real `kubectl kustomize`, every rendered object validates
against the Kubernetes schemas (kubernetes-validate, offline, one fixed version), and the security and wiring
properties hold: non-root, read-only root, readiness on /healthz but liveness on the TCP port, settings that
agent/config/settings.py reads, access control for the non-loopback bind."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from agent.api.auth import auth_mode, check_access_settings
from agent.config.policy import load_policy
from agent.config.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").exists())
SECRET_TEMPLATE = DEPLOY / "secret.example.yaml"
# The oldest Kubernetes minor still in upstream support when this was written; kubectl in .ci is 1.32 too.
KUBERNETES_VERSION = "1.32.0"
# Custom resources have no schema in kubernetes-validate (it ships only the built-in API); these kinds are checked
# by hand below instead. Any other kind without a schema is a failure.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is not installed (Debian package kubernetes-client; .ci/run installs it)")
        pytest.skip("kubectl is not installed")
    return kubectl


def render(overlay: str) -> list[dict[str, Any]]:
    done = subprocess.run([_kubectl(), "kustomize", str(DEPLOY / "overlays" / overlay)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize overlays/{overlay} failed:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(objects: list[dict[str, Any]], kind: str, name: str = "gpu-steward") -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name)]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def validate(obj: dict[str, Any]) -> None:
    """Raises kubernetes_validate's ValidationError (unknown or wrong fields too: strict) for a bad object."""
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def steward_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def secret_template() -> dict[str, Any]:
    return yaml.safe_load(SECRET_TEMPLATE.read_text())


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(request.param)


def test_both_overlays_exist():
    assert {"dev", "production"} <= set(OVERLAYS)


def test_every_rendered_object_validates_against_the_kubernetes_schemas(rendered):
    overlay, objects = rendered
    validated = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue
        try:
            validate(obj)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"overlays/{overlay}: {obj['kind']} {obj['metadata']['name']}: {exc.message} at "
                        f"{'.'.join(map(str, exc.path))}")
        validated.append(obj["kind"])
    assert {"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
            "PodDisruptionBudget", "NetworkPolicy", "ConfigMap", "Namespace"} <= set(validated)


def test_the_validator_refuses_a_broken_object():
    """The schema check can fail: a misspelt field and a wrong type are both caught."""
    deployment = one(render("dev"), "Deployment")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    deployment["spec"]["replicas"] = 1
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)


def test_the_service_monitor_scrapes_the_service(rendered):
    """ServiceMonitor is a CRD (no schema above): its selector and port must still reach the Service's /metrics."""
    _, objects = rendered
    monitor, service = one(objects, "ServiceMonitor"), one(objects, "Service")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [("http", "/metrics")]
    assert "http" in port_names


def test_the_pod_runs_as_non_root_with_a_read_only_root(rendered):
    _, objects = rendered
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert pod["serviceAccountName"] == "gpu-steward"
    container = steward_container(objects)
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc.get("privileged", False) is False and sc["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"].keys() >= {"cpu", "memory"}
    assert container["resources"]["limits"].keys() >= {"cpu", "memory"}
    # The records and /tmp are writable volumes, not the root filesystem.
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for path in (env["STEWARD_DATA_DIR"], "/tmp"):
        assert path in mounts, f"{path} is not a mounted volume"
        assert volumes[mounts[path]].keys() & {"emptyDir", "persistentVolumeClaim"}


def test_readiness_is_healthz_and_liveness_is_only_the_port(rendered):
    """/healthz answers 503 while degraded: as a liveness probe it would restart a steward that should report."""
    _, objects = rendered
    container = steward_container(objects)
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("livenessProbe", "startupProbe"):
        assert set(container[probe]) & {"httpGet", "exec", "grpc"} == set(), f"{probe} must be tcpSocket only"
        assert container[probe]["tcpSocket"]["port"] == "http"
    (port,) = container["ports"]
    assert port["name"] == "http" and container["readinessProbe"]["httpGet"]["port"] == "http"
    assert container["args"][container["args"].index("--port") + 1] == str(port["containerPort"])
    service = one(objects, "Service")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    policy = one(objects, "NetworkPolicy")
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [port["containerPort"]]


def _settings_names() -> set[str]:
    return {f"STEWARD_{name.upper()}" for name in Settings.model_fields}


def test_every_steward_variable_is_a_real_setting(rendered):
    _, objects = rendered
    names = _settings_names()
    env = [e["name"] for e in steward_container(objects)["env"]]
    unknown = [n for n in env if n.startswith("STEWARD_") and n not in names]
    assert not unknown, f"the Deployment sets variables agent/config/settings.py does not read: {unknown}"
    assert {"STEWARD_BACKEND", "STEWARD_PROMETHEUS_URL", "STEWARD_POLICY_FILE", "STEWARD_DATA_DIR"} <= set(env)
    secret_keys = set(secret_template()["stringData"])
    unknown = sorted(secret_keys - names)
    assert not unknown, f"secret.example.yaml sets variables agent/config/settings.py does not read: {unknown}"


def test_the_secret_template_is_a_valid_secret_the_deployment_reads():
    secret = secret_template()
    validate(secret)
    (source,) = steward_container(render("dev"))["envFrom"]
    assert source["secretRef"]["name"] == secret["metadata"]["name"] and not source["secretRef"].get("optional")
    # The template stays out of what Kustomize applies, so its placeholders are never served.
    for overlay in OVERLAYS:
        assert not [o for o in render(overlay) if o["kind"] == "Secret"]


def test_the_deployed_settings_pass_the_access_check_for_a_non_loopback_bind(rendered, monkeypatch):
    """`steward serve --host 0.0.0.0` refuses local-dev mode: the env plus the Secret must configure access."""
    _, objects = rendered
    container = steward_container(objects)
    assert container["args"][:3] == ["serve", "--host", "0.0.0.0"]
    for key in list(os.environ):
        if key.startswith("STEWARD_"):
            monkeypatch.delenv(key)
    for e in container["env"]:
        if "value" in e:
            monkeypatch.setenv(e["name"], e["value"])
    for key, value in secret_template()["stringData"].items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    check_access_settings(settings)
    assert auth_mode(settings) != "local-dev"
    assert settings.backend == "kubernetes" and settings.leader_lock == "kubernetes"


def _policy(objects: list[dict[str, Any]], tmp_path: Path):
    config = one(objects, "ConfigMap", "gpu-steward-policy")
    policy_dir = next(m["mountPath"] for m in steward_container(objects)["volumeMounts"] if m["name"] == "policy")
    env = {e["name"]: e.get("value") for e in steward_container(objects)["env"]}
    assert env["STEWARD_POLICY_FILE"] == f"{policy_dir}/policy.yaml"
    path = tmp_path / "policy.yaml"
    path.write_text(config["data"]["policy.yaml"])
    return load_policy(path)


def test_the_base_policy_is_the_example_policy():
    """Kustomize reads no file above its folder, so the base holds a copy; it must not drift from the example."""
    assert (DEPLOY / "base" / "policy.yaml").read_text() == (ROOT / "agent/assets/policy.example.yaml").read_text(), \
        "copy agent/assets/policy.example.yaml to deploy/kubernetes/base/policy.yaml"


def test_dev_is_one_replica_that_only_observes(tmp_path):
    objects = render("dev")
    assert one(objects, "Deployment")["spec"]["replicas"] == 1
    assert _policy(objects, tmp_path).mode == "observe"
    roles = {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole"}
    assert roles == {"gpu-steward"}
    pdb = one(objects, "PodDisruptionBudget")["spec"]
    assert pdb == {"maxUnavailable": 1, "selector": pdb["selector"]}  # one replica: a drain is not blocked


def test_production_is_two_replicas_kept_up_with_level_3(tmp_path):
    objects = render("production")
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pdb = one(objects, "PodDisruptionBudget")["spec"]
    assert pdb["minAvailable"] == 1 and "maxUnavailable" not in pdb
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    assert set(roles) == {"gpu-steward", "gpu-steward-force-reclaim"}  # level 3 on, level 4 (pools) off
    bound = {o["roleRef"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"}
    assert bound == set(roles)
    assert _policy(objects, tmp_path).mode == "enforce"


def test_the_sweeper_lease_is_allowed_in_the_namespace_only(rendered):
    """Several replicas elect the sweeper with a coordination.k8s.io Lease (agent/scheduling/k8s_lease.py)."""
    _, objects = rendered
    role = one(objects, "Role", "gpu-steward-leader")
    assert role["metadata"]["namespace"] == "gpu-steward"
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    assert not [r for o in objects if o["kind"] == "ClusterRole" for r in o["rules"]
                if "coordination.k8s.io" in r["apiGroups"]]


def test_the_containerfile_installs_the_locked_wheel_as_the_deployments_user():
    text = (ROOT / "Containerfile").read_text()
    assert re.search(r"pip install .*--require-hashes -r \S*requirements\.lock", text)
    assert re.search(r"pip install .*--no-deps \S*\.whl", text)
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    (user,) = re.findall(r"^USER (\S+)$", text, re.M)
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "USER must be a numeric non-root uid (runAsNonRoot checks numbers)"
    pod = one(render("dev"), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
