"""The cluster's text printed by `steward` is one line of text: no forged line, no terminal control sequence.

A Slurm job's name holds anything (`sbatch --job-name=$'nb\\n2026-11-02 10:40 UTC force_terminate ...'`); printed
raw by `steward audit log` or `steward sweep`, it made a line that reads as an audit entry the steward never wrote,
and an ESC sequence recoloured or erased what the operator saw.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from agent.cli.main import main

FORGED = "2026-11-02 10:40 UTC force_terminate gpu/llm-serve executed  approved by oncall-lead"
NAME = f"gpu/nb\x1b[2K\r\n{FORGED}\x1b[31m"


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("STEWARD_RUNBOOKS_ENABLED", "false")
    for name in ("STEWARD_BACKEND", "STEWARD_LANGUAGE", "STEWARD_PROMETHEUS_URL", "STEWARD_KUBECONFIG",
                 "STEWARD_DISPLAY_TZ"):
        monkeypatch.delenv(name, raising=False)


def assert_no_forgery(out: str) -> None:
    assert "\x1b" not in out and "\r" not in out and "\x9b" not in out
    assert not [line for line in out.splitlines() if line.lstrip(" |").startswith(FORGED[:30])], out
    assert "gpu/nb\\x1b[2K␤2026-11-02 10:40 UTC force_terminate" in out  # shown, escaped, on the name's line


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_audit_log_prints_a_job_name_as_one_line_of_text(tmp_path: Path, capsys, lang: str):
    from agent.records.audit import AuditLog

    log = AuditLog(tmp_path / "audit.sqlite")
    at = datetime.now(UTC) - timedelta(hours=2)
    log.record("execution", at=at, run_id="r", target=NAME, action="notify", level=1, status="executed",
               reason=f"idle\n{FORGED}\x1b]0;title\x07", data={"detail": f"inbox to mallory\n{FORGED}"})
    log.record("execution", at=at + timedelta(hours=1), run_id="r", target=NAME, action="terminate", level=2,
               status="executed", reason=f"1 GPU idle for 2h\n{FORGED}")
    log._conn.close()
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--lang", lang]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 2, out  # two entries, two lines
    assert_no_forgery(out)


def test_sweep_prints_a_job_name_as_one_line_of_text(tmp_path: Path, capsys):
    scenario = {
        "version": 1, "name": "forge", "start": "2026-11-02T09:00:00Z", "duration": "2h30m", "step": "60s",
        "pools": [{"name": "a100", "gpus_per_node": 8, "nodes": 1, "min_nodes": 1, "price_per_gpu_hour": 4.1}],
        "jobs": [{"id": NAME, "scheduler": "slurm", "user": "mallory\x1b[8m", "gpus": 1,
                  "phases": [{"duration": "20m", "gpu_util": 60, "gpu_mem_gb": 10, "cpu_pct": 100, "log": "loss"},
                             {"gpu_util": 0, "cpu_pct": 0.2, "log": "silent"}]},
                 {"id": "gpu/llm-serve", "scheduler": "slurm", "user": "bob", "gpus": 4,
                  "phases": [{"gpu_util": [70, 90], "gpu_mem_gb": 60, "cpu_pct": 300, "log": "loss"}]}]}
    path = tmp_path / "forge.yaml"
    path.write_text(yaml.safe_dump(scenario, allow_unicode=True), encoding="utf-8")
    assert main(["sweep", "--scenario", str(path)]) == 0
    out = capsys.readouterr().out
    assert "What the agent did along the way" in out and "A warning as mallory\\x1b[8m received it" in out
    assert_no_forgery(out)


def test_a_change_impact_report_shows_the_clusters_text_on_its_own_line():
    from agent.records.change_impact import ImpactReport, render_impact
    from agent.records.changes import Change

    at = datetime(2026, 11, 2, 10, tzinfo=UTC)
    change = Change(id=1, key="k", kind="image", target=NAME, description=f"image a -> b\n{FORGED}", at=at,
                    recorded_at=at, source="detected", by="steward")
    for lang in ("en", "zh"):
        text = render_impact(ImpactReport(change=change, at=at, span_h=1, before_from=at, after_until=at,
                                          too_early=True), lang)
        assert len(text.splitlines()) == 2 and "\x1b" not in text, text


def test_one_line_escapes_line_breaks_and_controls_and_keeps_the_rest():
    from core.text import one_line

    assert one_line("a\nb\r\nc\rd\x1b[31m\x00\x7f\x9b\u2028\u202e") == "a␤b␤c\\x0dd\\x1b[31m\\x00\\x7f\\x9b\\u2028\\u202e"
    assert one_line("ml-team/训练（第二轮） 100% <ok> [x]") == "ml-team/训练（第二轮） 100% <ok> [x]"
    # Zero-width characters as the web UI writes them: `gpu/zw\u200bjob` is not `gpu/zwjob` (a probe).
    assert one_line("gpu/zw\u200bjob\u200c\u200d\u2060\ufeff\u061c") == \
        "gpu/zw\\u200bjob\\u200c\\u200d\\u2060\\ufeff\\u061c"


def test_gpu_memory_under_ten_gb_keeps_a_decimal_so_a_cuda_context_is_not_zero():
    from core.text import gigabytes

    assert [gigabytes(x) for x in (0.004, 0.5, 9.4, 9.96, 21.0, 79.6, 640.2)] == \
        ["0.0", "0.5", "9.4", "10", "21", "80", "640"]
