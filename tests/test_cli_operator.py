"""The operator's command line: approvals answered from a shell on serve's data dir, the eval's exit status,
--version and --help, and a one-paragraph error (no traceback) for each configuration mistake."""

from __future__ import annotations

import getpass
import re
from pathlib import Path

import pytest

from agent.cli.main import main, meets_answer_key
from tests.test_server_api import client_for, settings_for, sweep_with_approval

SCENARIOS = Path(__file__).resolve().parent.parent / "evals" / "scenarios"


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("STEWARD_RUNBOOKS_ENABLED", "false")
    for name in ("STEWARD_BACKEND", "STEWARD_LANGUAGE", "STEWARD_PROMETHEUS_URL", "STEWARD_KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)


def one_paragraph_error(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


def test_approve_from_the_shell_is_carried_out_by_the_server_once(tmp_path, capsys):
    settings = settings_for(tmp_path)
    with client_for(settings) as c:  # `steward serve` on the demo, in this data dir
        approval_id = sweep_with_approval(c)
        nodes_before = {p.name: p.nodes for p in c.app.state.runtime.deps.pools.list_pools()}["a100-ondemand"]
    assert main(["approvals", "list"]) == 0
    out = capsys.readouterr().out
    assert f"{approval_id}  resize_pool a100-ondemand -> 3 nodes (level 4)" in out and "steward approvals approve" in out

    assert main(["approvals", "approve", approval_id, "--reason", "night, pool unused"]) == 0
    assert f"{approval_id}: approved by cli:{getpass.getuser()}" in capsys.readouterr().out
    assert main(["approvals", "deny", approval_id]) == 1  # answered once: the second is refused, and audited
    assert "already approved" in capsys.readouterr().err

    with client_for(settings) as c:  # the server completes the recorded answer before its next sweep
        rt = c.app.state.runtime
        assert rt.deps.audit.entries(kind="execution", target="a100-ondemand") == []  # the shell did not act
        assert c.post("/api/sweeps").status_code == 200
        pool = next(p for p in rt.deps.pools.list_pools() if p.name == "a100-ondemand")
        assert pool.nodes < nodes_before
        executions = rt.deps.audit.entries(kind="execution", target="a100-ondemand")
        assert [(e.action, e.status) for e in executions] == [("resize_pool", "executed")]
        approved = rt.deps.audit.entries(kind="approval", status="approved")
        assert len(approved) == 1 and approved[0].data["by"] == f"cli:{getpass.getuser()}"
        assert "night, pool unused" in approved[0].reason
        assert rt.deps.audit.entries(kind="approval", status="refused_answer")
    assert main(["approvals", "list", "--lang", "zh"]) == 0
    zh = capsys.readouterr().out
    assert "最近的处理" in zh and f"{approval_id}  调整节点池 a100-ondemand：cli:" in zh
    # Times are read in the team's zone, the zone named (STEWARD_DISPLAY_TZ).
    assert re.search(r"：cli:\S+ 于 \d{4}-\d\d-\d\d \d\d:\d\d（UTC）批准，理由：night, pool unused", zh)


def test_approvals_without_a_store_and_unknown_ids_are_clear_errors(tmp_path, capsys):
    assert main(["approvals", "list", "--data-dir", str(tmp_path / "nowhere")]) == 2
    assert "no approval store in" in capsys.readouterr().err
    with client_for(settings_for(tmp_path)):
        pass
    assert main(["approvals", "approve", "apr_nope"]) == 1
    assert "no approval with id 'apr_nope'" in capsys.readouterr().err


def test_eval_exits_0_on_the_answer_key_and_known_misses_are_strict(capsys, monkeypatch):
    assert main(["eval", str(SCENARIOS / "idle-notebook.yaml")]) == 0
    doc = {"name": "fake-activity-blips", "passed": False}
    monkeypatch.setattr("evals.suite.KNOWN_MISSES", {"fake-activity-blips": "reported idle"})
    assert meets_answer_key({"policy-model": [doc, {"name": "x", "passed": True}]})
    assert "expected miss" in capsys.readouterr().err
    assert not meets_answer_key({"policy-model": [{**doc, "passed": True}]})  # fixed: take it off the list
    assert not meets_answer_key({"policy-model": [{"name": "x", "passed": False}]})


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("steward 0.")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "address to listen on" in out and "TCP port" in out and "STEWARD_DATA_DIR" in out


def test_configuration_mistakes_are_one_paragraph(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("STEWARD_BACKEND", "kubernetes")
    monkeypatch.setenv("STEWARD_PROMETHEUS_URL", "http://127.0.0.1:9")
    err = one_paragraph_error(capsys, "sweep")
    assert "STEWARD_BACKEND=kubernetes needs access to the cluster" in err and "STEWARD_KUBECONFIG" in err
    monkeypatch.setenv("STEWARD_KUBECONFIG", str(tmp_path / "missing"))
    assert f"STEWARD_KUBECONFIG={tmp_path / 'missing'} does not exist" in one_paragraph_error(capsys, "serve")

    monkeypatch.setenv("STEWARD_BACKEND", "slurm")
    monkeypatch.delenv("STEWARD_PROMETHEUS_URL")
    assert "STEWARD_PROMETHEUS_URL is not set" in one_paragraph_error(capsys, "sweep")
    monkeypatch.setenv("STEWARD_BACKEND", "sim")

    monkeypatch.setenv("STEWARD_LANGUAGE", "fr")
    err = one_paragraph_error(capsys, "sweep")
    assert "STEWARD_LANGUAGE='fr' is not a language" in err and "en (English) or zh" in err
    monkeypatch.delenv("STEWARD_LANGUAGE")

    monkeypatch.setenv("STEWARD_DIGEST_CRON", "mondays at 9")
    err = one_paragraph_error(capsys, "serve")
    assert "STEWARD_DIGEST_CRON='mondays at 9' is not a cron expression" in err and "'0 9 * * 1'" in err
    monkeypatch.delenv("STEWARD_DIGEST_CRON")

    err = one_paragraph_error(capsys, "sweep", "--at", "99h")
    assert "--at 99h is past the end of scenario 'demo-cluster', which lasts 6h (14:00 to 20:00 UTC)" in err


def test_policy_typos_get_did_you_mean_and_yaml_errors_name_the_file(tmp_path, capsys):
    typo = tmp_path / "policy.yaml"
    typo.write_text("version: 1\nlevels: {max_autoo: 2}\nwarnings: {min_notice: 10m}\n")
    assert main(["policy", "check", str(typo)]) == 2
    err = capsys.readouterr().err
    assert f"{typo}: levels.max_autoo: unknown key; did you mean 'max_auto'?" in err
    assert f"{typo}: warnings: unknown key; did you mean 'warning'?" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\nlevels: {max_auto: 2\nwarning: [\n")
    err = one_paragraph_error(capsys, "policy", "check", str(broken))
    assert f"{broken}: not valid YAML at line 3, column 8:" in err and "<unicode string>" not in err


def test_eval_with_a_model_and_no_endpoint_is_an_error_not_the_builtin_under_its_name(capsys, monkeypatch):
    """Without STEWARD_LLM_BASE_URL the client tried OpenAI's public endpoint, failed, and the built-in planner's
    results were printed as the model's."""
    for name in ("STEWARD_LLM_BASE_URL", "STEWARD_LLM_API_KEY", "STEWARD_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["eval", "evals/scenarios/idle-notebook.yaml", "--model", "qwen"]) == 2
    err = capsys.readouterr().err
    assert "model 'qwen' needs an endpoint" in err and "STEWARD_LLM_BASE_URL" in err


def test_a_path_variable_set_empty_means_unset(monkeypatch):
    """`STEWARD_POLICY_FILE=` was read as the current directory: "Error: .: cannot read: Is a directory"."""
    from agent.config.settings import Settings

    monkeypatch.setenv("STEWARD_POLICY_FILE", "")
    monkeypatch.setenv("STEWARD_KUBECONFIG", "  ")
    settings = Settings()
    assert settings.policy_file is None and settings.kubeconfig is None


def test_audit_log_reads_what_was_done_oldest_first(tmp_path, capsys):
    """An operator without the web UI reads what the steward did (a probe opened audit.sqlite by hand): executions,
    decisions and approvals, oldest first, in the display zone; each sweep's findings only when asked."""
    from datetime import UTC, datetime, timedelta

    from agent.records.audit import AuditLog

    log = AuditLog(tmp_path / "audit.sqlite")
    at = datetime.now(UTC) - timedelta(hours=2)
    log.record("execution", at=at, run_id="r", target="gpu/idle1", action="notify", level=1, status="executed",
               reason="1 GPU idle")
    log.record("execution", at=at + timedelta(hours=1), run_id="r", target="gpu/idle1", action="terminate", level=2,
               status="executed", reason="1 GPU idle for 2h")
    for k in range(700):  # many sweeps' findings since the stop: paged past, not mistaken for "nothing"
        log.record("finding", at=at + timedelta(hours=1, seconds=k), run_id="r", target="gpu/idle1", status="idle",
                   reason="1 GPU at max 0.0% util")
    log._conn.close()
    assert main(["audit", "log", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "notify gpu/idle1 executed" in out[0] and "terminate gpu/idle1 executed" in out[1]
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--kind", "finding", "--limit", "3", "--json"]) == 0
    import json

    assert len(json.loads(capsys.readouterr().out)) == 3
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--target", "gpu/other"]) == 0
    assert "(no entries)" in capsys.readouterr().out
    # An error keeps its reason in Chinese too (it read "error observe_failed observe_failed").
    log = AuditLog(tmp_path / "audit.sqlite")
    log.record("error", at=at + timedelta(hours=2), run_id="r", status="observe_failed",
               reason="cluster not read: scheduler unavailable: Unable to contact slurm controller")
    log._conn.close()
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--lang", "zh"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert "读取集群失败" in last and "未能读取集群" in last and "Unable to contact slurm controller" in last


def test_a_sweep_returns_and_shows_what_it_carried_out_on_answers_given_since_the_last():
    """Approved from the shell between two cron sweeps: the next sweep forced the stop, and its report showed only
    its own planner's duplicate proposal, refused as already done."""
    from agent.cli.sweep import _answered_lines
    from agent.config.policy import Policy
    from agent.graph.service import SweepService
    from agent.planning.policy_model import PolicyModel
    from agent.wiring import simulated_deps
    from evals.suite import SCENARIO_DIR
    from sim.scenario import load_scenario

    scenario = load_scenario(SCENARIO_DIR / "sigterm-ignores-needs-approved-force-kill.yaml")
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel())
    service = SweepService(deps)
    t = 300.0
    while not deps.approvals.pending() and t < scenario.duration:
        cluster.advance_to(t)
        service.sweep()
        t += 300.0
    [pending] = deps.approvals.pending()
    deps.approvals.answer(pending.id, decision="approve", by="cli:lead", reason="stuck", now=cluster.now(),
                          run_id="cli")
    cluster.advance_to(t)
    result = service.sweep()
    [done] = result.answered
    assert [(o["action"], o["status"]) for o in done.state["outcomes"]] == [("force_terminate", "executed")]
    assert _answered_lines(result.answered, "en")[0] == (
        f"answered (approve by cli:lead): force_terminate {pending.target} executed")
    assert _answered_lines(result.answered, "zh")[0].startswith(f"已按审批执行（批准，cli:lead）：强制停止 {pending.target} 已执行")


def test_a_real_cluster_sweep_says_by_its_exit_status_what_went_wrong():
    """Cron sees 3 for a cluster not read whole, 4 for an action that failed (a warning the mail server refused sat
    behind exit 0), 0 for a clean sweep."""
    from agent.cli.sweep import sweep_exit

    failed = {"outcomes": [{"action": "notify", "status": "failed"}, {"action": "terminate", "status": "executed"}]}
    assert sweep_exit(failed) == 4
    assert sweep_exit({**failed, "observed": {"degraded": ["GPU metrics stale"]}}) == 3
    assert sweep_exit({"outcomes": [{"status": "executed"}, {"status": "refused"}], "observed": {"degraded": []}}) == 0


def test_after_the_quick_start_audit_and_approvals_name_the_demo_sweeps_folder(tmp_path, capsys, monkeypatch):
    """A newcomer's `steward audit verify` after the quick start said "no audit log at ~/.local/share/..." and the
    approvals hint said "run a sweep there first": a demo sweep writes its own folder under runs/, so that sent them
    in a circle. The message names the newest run's folder and the --data-dir that reads it."""
    run = tmp_path / "runs" / "demo-cluster-20261103"
    run.mkdir(parents=True)
    (run / "audit.sqlite").touch()
    (run / "approvals.sqlite").touch()
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    assert main(["audit", "verify"]) == 2
    assert f"add --data-dir {run}" in capsys.readouterr().err
    assert main(["approvals", "list"]) == 2
    err = capsys.readouterr().err
    assert "run `steward serve` or a sweep there first" not in err and f"add --data-dir {run}" in err


def test_audit_log_since_a_period_with_nothing_says_when_the_newest_entry_is(tmp_path, capsys):
    """`--since 1d` on a demo run's log (its entries on the simulated day) printed only "(no entries)", as if the
    steward had done nothing: it says when the newest entry is, in the reader's language."""
    from datetime import UTC, datetime

    from agent.records.audit import AuditLog

    log = AuditLog(tmp_path / "audit.sqlite")
    log.record("execution", at=datetime(2026, 11, 2, 15, 5, tzinfo=UTC), run_id="r", target="gpu/idle1",
               action="terminate", level=2, status="executed", reason="1 GPU idle for 2h")
    log._conn.close()
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--since", "1d"]) == 0
    out = capsys.readouterr().out
    assert "(no entries)" in out and "the newest entry is from 2026-11-02" in out
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--since", "1d", "--lang", "zh"]) == 0
    assert "最新一条记录在 2026-11-02" in capsys.readouterr().out
    assert main(["audit", "log", "--data-dir", str(tmp_path)]) == 0  # no --since: the entry, no hint
    out = capsys.readouterr().out
    assert "terminate gpu/idle1 executed" in out and "newest" not in out
