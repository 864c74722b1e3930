"""Chat and planner log tools read only managed GPU jobs, and secrets never leave the log analysis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.cluster import JobInfo, LogLine
from core.observation import Observation
from tools.agent_tools import ToolContext, make_tools
from tools.log_progress import analyse_log

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SECRET = "ghp_0123456789abcdefghijABCDEFGHIJ012345"


class Logs:
    def __init__(self, lines: dict[str, list[str]]) -> None:
        self.lines, self.asked = lines, []

    def tail(self, job_id, since, until, limit=200):
        self.asked.append(job_id)
        return [LogLine(at=NOW - timedelta(minutes=len(self.lines[job_id]) - i), text=t)
                for i, t in enumerate(self.lines.get(job_id, []))]


def _tools(logs: Logs):
    job = JobInfo(id="ml/train", uid="u1", scheduler="kubernetes", namespace="ml", name="train", user="a", gpus=1)
    obs = Observation(at=NOW, slice_s=300, lookback_s=3600, jobs=[job])
    ctx = ToolContext(observation=obs, findings=[], scheduler=None, logs=logs)  # type: ignore[arg-type]
    return {t.name: t for t in make_tools(ctx)}


def test_a_pod_the_steward_does_not_manage_is_never_read():
    logs = Logs({"kube-system/vault-agent": [f"token={SECRET}"]})
    out = _tools(logs)["inspect_job_logs"].invoke({"job": "kube-system/vault-agent"})
    assert out["status"] == "error" and "not a GPU job" in out["message"]
    assert logs.asked == []  # not even fetched


def test_secrets_in_a_managed_jobs_log_are_redacted_before_the_model_sees_them():
    logs = Logs({"ml/train": ["step 1 loss 0.9", f"export GITHUB_TOKEN={SECRET}", "password: hunter2",
                              "Authorization: Bearer abc.def.ghi", "step 2 loss 0.8"]})
    out = _tools(logs)["inspect_job_logs"].invoke({"job": "ml/train"})
    text = str(out)
    assert out["status"] == "ok"
    assert SECRET not in text and "hunter2" not in text and "abc.def.ghi" not in text
    assert "[REDACTED:" in text and "step 2 loss 0.8" in text


def test_the_sweeps_log_analysis_keeps_only_redacted_text():
    lines = [LogLine(at=NOW, text="aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY step 3")]
    progress = analyse_log("ml/train", lines, NOW)
    assert "wJalrXUtnFEMI" not in " ".join(progress.tail)


def test_the_policy_adds_and_disables_redaction_patterns(tmp_path):
    import pytest

    from agent.config.policy import PolicyError, load_policy, parse_policy

    policy = parse_policy({"redaction": {"extra": [{"name": "ticket", "regex": r"TCK-\d{6}"}], "disable": ["email"]}})
    line = [LogLine(at=NOW, text="opened TCK-123456 for alice@example.org step 3")]
    tail = analyse_log("ml/train", line, NOW, policy.redaction.redactor()).tail[0]
    assert "TCK-123456" not in tail and "alice@example.org" in tail
    bad = tmp_path / "policy.yaml"
    bad.write_text("redaction:\n  extra:\n    - {name: broken, regex: '(unclosed'}\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="redaction") as err:
        load_policy(bad)
    assert "broken" in str(err.value) and str(bad) in str(err.value)
