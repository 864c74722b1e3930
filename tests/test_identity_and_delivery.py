"""Real-cluster terms for the guardrail's promises: reused names, undelivered warnings, advice that is no warning.

Each test here failed before jobs carried the scheduler's immutable identity (uid) and before a stop
needed a *delivered* warning about the same kind of waste that stated its deadline.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.service import SweepService
from agent.guardrail.decide import Facts, decide
from agent.planning.policy_model import PolicyModel
from agent.wiring import cluster_deps, simulated_deps
from core.actions import Finding, History, HistoryEntry, ProposedAction
from core.cluster import JobInfo
from sim.scenario import load_scenario
from tests.k8s_fake_api import FakeKubernetesApi
from tests.k8s_fake_cluster import gpu_node, gpu_pod, kubeconfig
from tools.kubernetes import kubernetes_scheduler_from_settings
from tools.notify import NoChannelNotifier

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SCENARIOS = __import__("pathlib").Path(__file__).resolve().parent.parent / "evals" / "scenarios"


def _job(uid: str) -> JobInfo:
    return JobInfo(id="gpu/bash", uid=uid, scheduler="slurm", namespace="gpu", name="bash", user="carol", gpus=1)


def _idle() -> list[Finding]:
    return [Finding(kind="idle", target="gpu/bash", since=NOW - timedelta(hours=2), detected_at=NOW,
                    evidence="0% for 2h")]


def _warning(uid: str | None, kind: str = "idle", deadline: bool = True) -> HistoryEntry:
    at = NOW - timedelta(hours=1)
    return HistoryEntry(action="notify", target="gpu/bash", status="executed", at=at, finding_kind=kind,  # type: ignore[arg-type]
                        target_uid=uid, deadline=at + timedelta(minutes=30) if deadline else None)


def _stop(uid: str | None = None) -> ProposedAction:
    return ProposedAction(action="terminate", target="gpu/bash", finding_kind="idle", target_uid=uid)


def test_a_warning_to_an_earlier_namesake_does_not_license_a_stop():
    # Every `srun --pty bash` is named bash: the warning went to Slurm job 100, job 200 runs now.
    facts = Facts(now=NOW, job=_job("slurm:200"), findings=_idle())
    decision = decide(_stop(), facts, Policy(), History(entries=[_warning("slurm:100")]))
    assert (decision.verdict, decision.rule) == ("deny", "warning_first"), decision
    assert decide(_stop(), facts, Policy(), History(entries=[_warning("slurm:200")])).verdict == "allow"


def test_a_job_renamed_by_a_namesake_keeps_its_warning_its_keep_and_its_denial():
    """Slurm ids are names: `gpu/lone` becomes `gpu/lone-7` when a second `lone` is submitted (a real Slurm). The
    records are about the uid, so the warning still licenses the stop (it was warned again and its notice began
    anew), an owner's keep still protects it, and a human's "no" still holds."""
    renamed = JobInfo(id="gpu/lone-7", uid="slurm:7@1", scheduler="slurm", namespace="gpu", name="lone", user="carol",
                      gpus=1)
    finding = [f.model_copy(update={"target": "gpu/lone-7"}) for f in _idle()]
    warned = _warning("slurm:7@1").model_copy(update={"target": "gpu/lone"})
    stop = ProposedAction(action="terminate", target="gpu/lone-7", finding_kind="idle", target_uid="slurm:7@1")
    facts = Facts(now=NOW, job=renamed, findings=finding)
    assert decide(stop, facts, Policy(), History(entries=[warned])).verdict == "allow"
    namesake = warned.model_copy(update={"target": "gpu/lone-7", "target_uid": "slurm:8@2"})
    assert decide(stop, facts, Policy(), History(entries=[namesake])).rule == "warning_first"  # another job's
    from core.actions import DeniedAnswer, Exemption

    kept = Exemption(target="gpu/lone", until=NOW + timedelta(hours=3), by="chatops:carol", target_uid="slurm:7@1")
    assert decide(stop, facts, Policy(), History(entries=[warned], exemptions=[kept])).rule == "protected"
    denied = DeniedAnswer(action="terminate", target="gpu/lone", at=NOW - timedelta(minutes=5), target_uid="slurm:7@1",
                          by="lead")
    assert decide(stop, facts, Policy(), History(entries=[warned], denials=[denied])).verdict == "deny"
    from agent.planning.policy_model import _last

    assert _last(History(entries=[warned]), "notify", "gpu/lone-7", uid="slurm:7@1") == warned.at
    assert _last(History(entries=[namesake]), "notify", "gpu/lone-7", uid="slurm:7@1") is None


def test_an_action_proposed_for_one_uid_never_runs_against_a_namesake():
    # A force-stop approved for job 100 reaches execute after job 100 ended and job 200 took the name.
    facts = Facts(now=NOW, job=_job("slurm:200"), findings=_idle())
    history = History(entries=[_warning("slurm:200")])
    decision = decide(_stop("slurm:100"), facts, Policy(), history, approved=True)
    assert (decision.verdict, decision.rule) == ("deny", "replaced_target")
    assert "slurm:100" in decision.reason


def test_advice_and_other_kinds_are_not_warnings():
    facts = Facts(now=NOW, job=_job("slurm:200"), findings=_idle())
    # "Request fewer GPUs next time" promised no stop: no deadline.
    advice = History(entries=[_warning("slurm:200", kind="overprovisioned", deadline=False)])
    assert decide(_stop(), facts, Policy(), advice).rule == "warning_first"
    # A zombie warning does not announce a stop for idleness.
    other = History(entries=[_warning("slurm:200", kind="zombie")])
    assert decide(_stop(), facts, Policy(), other).rule == "warning_first"


def test_proposals_for_namesakes_are_distinct_approvals():
    assert _stop("slurm:100").key() != _stop("slurm:200").key()


@pytest.fixture
def k8s(tmp_path):
    server = FakeKubernetesApi()
    server.start()
    server.store.put("nodes", gpu_node("gpu-0", 8, pool="a100"))
    server.store.put("pods", gpu_pod("kf", "nb-0", 1, owner=("StatefulSet", "nb")))
    try:
        yield server, kubernetes_scheduler_from_settings(Settings(kubeconfig=kubeconfig(server, tmp_path),
                                                                  data_dir=tmp_path))
    finally:
        server.stop()


@pytest.mark.parametrize("force", [False, True])
def test_eviction_and_delete_carry_the_uid_so_a_recreated_pod_is_not_hit(k8s, force):
    server, scheduler = k8s
    old_uid = scheduler.get_job("kf/nb-0").uid
    assert old_uid
    # The StatefulSet's pod was replaced between the decision and the stop: same name, new uid.
    server.store.delete("pods", "kf", "nb-0", 0)
    server.store.put("pods", gpu_pod("kf", "nb-0", 1, owner=("StatefulSet", "nb")))
    assert scheduler.get_job("kf/nb-0").uid != old_uid
    result = scheduler.stop_job("kf/nb-0", force=force, grace_s=30, reason="idle", uid=old_uid)
    assert result.status == "refused" and "Precondition failed" in result.detail
    assert scheduler.get_job("kf/nb-0").state == "running"
    # The right uid goes through.
    fresh = scheduler.get_job("kf/nb-0").uid
    assert scheduler.stop_job("kf/nb-0", force=force, grace_s=30, reason="idle", uid=fresh).status in (
        "stopped", "stopping")


def test_with_no_channel_warnings_fail_and_nothing_is_stopped():
    """A warning nobody received is no warning: the idle notebook keeps running, and the report says why."""
    deps, cluster = simulated_deps(load_scenario(SCENARIOS / "idle-notebook.yaml"), Policy(), PolicyModel())
    deps.notifier = NoChannelNotifier()
    service = SweepService(deps)
    end = float(cluster.scenario.duration)
    for at in range(0, int(end) + 1, 300):
        cluster.advance_to(at)
        service.sweep("t")
    executions = deps.audit.entries(kind="execution", limit=1000)
    assert not [e for e in executions if e.action in ("terminate", "force_terminate") and e.status == "executed"]
    notifies = [e for e in executions if e.action == "notify"]
    assert notifies and all(e.status == "failed" for e in notifies)
    assert "no notification channel" in notifies[0].data["detail"]
    # The report the operator reads says the warning did not reach anyone.
    reports = [e.reason or "" for e in deps.audit.entries(kind="report", limit=1000)]
    assert any("no notification channel" in r for r in reports), reports[-1]
    # Asked directly, the guardrail names the undelivered warning as the reason.
    job = next(j for j in cluster.list_jobs() if j.id == notifies[0].target)
    facts = Facts(now=cluster.now(), job=job, findings=[Finding(kind="idle", target=job.id, since=cluster.now(),
                                                                  detected_at=cluster.now(), evidence="idle")])
    decision = decide(ProposedAction(action="terminate", target=job.id, finding_kind="idle", target_uid=job.uid),
                      facts, deps.policy, deps.audit.history(cluster.now()))
    assert decision.rule == "warning_first" and "was not delivered" in decision.reason


def test_a_slurm_cluster_without_a_channel_gets_no_pretend_inbox(tmp_path, monkeypatch):
    monkeypatch.delenv("STEWARD_SMTP_HOST", raising=False)
    monkeypatch.setattr("tools.slurm.slurm_scheduler_from_settings", lambda s: _FakeSlurm())
    settings = Settings(backend="slurm", data_dir=tmp_path, prometheus_url="http://127.0.0.1:9")
    deps = cluster_deps(settings, Policy(), PolicyModel())
    assert isinstance(deps.notifier, NoChannelNotifier)


class _FakeSlurm:
    def steward_id_for(self, slurm_job_id: str) -> str | None:
        return None


def test_a_kubernetes_warning_lands_only_on_the_pod_it_was_meant_for(fault_world):
    """The pod is recreated under its name between the steward's re-read and the warning: the stop-after annotation
    and the Warning event must not land on the namesake (another run, maybe another owner) while the audit records a
    warning delivered to the old uid. The patch carries the uid, a precondition the API server enforces (409)."""
    from tests.fault_world import NOTEBOOK, executions

    world = fault_world
    s = world.service()
    real = s.deps.scheduler.get_job
    done = []

    def get_job(job_id):
        job = real(job_id)
        if job_id == NOTEBOOK and not done:  # the re-read before the warning; then the notebook pod is recreated
            done.append(job.uid)
            pod = world.pod()
            world.api.store.objects["pods"].pop(("ml", "idle-notebook"))
            pod["metadata"].pop("uid")
            pod["metadata"]["labels"]["steward.io/owner"] = "bob"
            world.api.store.put("pods", pod)
        return job
    s.deps.scheduler.get_job = get_job
    world.at(80)
    s.sweep()
    [note] = executions(s.deps.audit, action="notify")
    new_uid = world.pod()["metadata"]["uid"]
    ev = world.api.store.list("events", "ml")
    assert note.data["target_uid"] == done[0] != new_uid
    assert note.status == "failed" and "is another one now" in note.data.get("detail", ""), note
    assert not ev and "steward.io/stop-after" not in (world.pod()["metadata"].get("annotations") or {})


def test_a_chatops_warning_to_a_namesake_is_not_dropped_as_a_duplicate():
    """A notebook pod recreated under its name 40 minutes after its warning (another owner): the chat warning for the
    new uid goes out; the same uid's repeat within warning.repeat_every is still dropped."""
    from agent.chatops.notifier import ChatOpsNotifier, Route
    from agent.planning.policy_model import warning_message

    class Robot:
        def __init__(self) -> None:
            self.sent: list = []

        def send(self, message) -> None:
            self.sent.append(message)

    class Clock:
        t = NOW

        def now(self):
            return self.t

    clock, robot, policy = Clock(), Robot(), Policy()
    notifier = ChatOpsNotifier(clock=clock, policy=policy, default=Route(dingtalk=robot))
    job_id = "ml/jupyter-alice-0"

    def warn(uid: str, who: str):
        f = Finding(kind="idle", target=job_id, since=clock.t - timedelta(hours=1), detected_at=clock.t,
                    evidence="0% for 1h", gpus=1)
        return notifier.notify(who, f"GPU Steward: {job_id}", warning_message(f, policy, clock.t, "en"),
                               job_id=job_id, target_uid=uid).status

    assert warn("uid-old", "alice") == "sent"
    clock.t = NOW + timedelta(minutes=40)
    assert warn("uid-old", "alice") == "suppressed"
    assert warn("uid-new", "bob") == "sent"
    assert len(robot.sent) == 2


def _listed_then_namesake():
    """Slurm job 11 `train` of alice in partition gpu (steward id gpu/train), and the scheduler that lists it; then
    mallory submits a job named `train` too: job 11 reads as gpu/train-11. (job before, job after, scheduler)"""
    import json

    from tests.test_slurm_adapter import JSON_OLD, T0, FakeCli
    from tools.slurm import SlurmScheduler

    listing = {"jobs": [dict(JSON_OLD["jobs"][0], submit_time=T0 - 600)]}
    scheduler = SlurmScheduler(FakeCli({("squeue", "--json"): lambda: json.dumps(listing)}))
    [job] = scheduler.list_jobs()
    listing["jobs"].append(dict(JSON_OLD["jobs"][0], job_id=12, user_name="mallory", submit_time=T0 + 7000))
    renamed = next(j for j in scheduler.list_jobs() if j.uid == job.uid)
    assert (job.id, renamed.id) == ("gpu/train", "gpu/train-11")
    return job, renamed, scheduler


def _stop_of(job: JobInfo, now: datetime, action: str = "notify") -> tuple[ProposedAction, Facts]:
    idle = [Finding(kind="idle", target=job.id, since=now - timedelta(hours=5), detected_at=now, evidence="0%")]
    return (ProposedAction(action=action, target=job.id, finding_kind="idle", target_uid=job.uid),  # type: ignore[arg-type]
            Facts(now=now, job=job, findings=idle))


def test_another_users_namesake_never_unprotects_a_slurm_job():
    """protection.jobs lists steward ids, and a Slurm steward id is partition/jobname until any user submits a job of
    the same name: then gpu/train-11, and the protected job was warned and stopped. A keep recorded without a uid
    (by name) was lost the same way. The job's own partition/jobname, and that with its own job id, name it
    whatever else is listed; its namesake is protected with it (erring toward protecting)."""
    job, renamed, _ = _listed_then_namesake()
    now = NOW
    policy = Policy.model_validate({"protection": {"jobs": ["gpu/train"]}})
    for listed in (job, renamed):
        assert decide(*_stop_of(listed, now), policy, History()).rule == "protected", listed.id
    by_suffix = Policy.model_validate({"protection": {"jobs": ["gpu/train-11"]}})  # written while a namesake ran
    assert decide(*_stop_of(job, now), by_suffix, History()).rule == "protected"
    other = renamed.model_copy(update={"id": "gpu/train-12", "uid": "slurm:12@9", "labels": {"slurm.job_id": "12"}})
    assert decide(*_stop_of(other, now), by_suffix, History()).rule != "protected"

    from core.actions import Exemption

    kept = Exemption(target="gpu/train", until=now + timedelta(hours=1), by="lead", reason="demo", target_uid=None,
                     at=now - timedelta(hours=1))
    history = History(exemptions=[kept], keeps=[kept])
    assert decide(*_stop_of(renamed, now), Policy(), history).rule == "protected"
    # Once it lapses, the warning sent before it no longer licenses a stop: the keep answered it, as by its own id.
    later = now + timedelta(hours=2)
    warned = HistoryEntry(action="notify", target="gpu/train", status="executed", at=now - timedelta(hours=2),
                          finding_kind="idle", target_uid=renamed.uid, deadline=now - timedelta(hours=1))
    lapsed = History(entries=[warned], keeps=[kept])
    assert decide(*_stop_of(renamed, later, "terminate"), Policy(), lapsed).verdict == "deny"
    assert decide(*_stop_of(renamed, later, "terminate"), Policy(), History(entries=[warned])).verdict == "allow"
