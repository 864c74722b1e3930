"""`steward report`: cost per team/user/job/pool from the sweeps' usage samples, waste, savings, suggestions;
a self-contained HTML page and a markdown digest, in English and Chinese."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agent.cli.main import main
from agent.config.policy import Policy
from agent.graph.cost_report import render_html, render_markdown
from agent.planning.policy_model import PolicyModel
from agent.records.savings import compute_savings
from agent.records.usage import build_report
from agent.wiring import simulated_deps
from evals.suite import SCENARIO_DIR
from sim.scenario import load_scenario
from tests.sweeps import sweep_through


def _run(tmp_path: Path, name: str = "overprovisioned.yaml") -> object:
    scenario = load_scenario(SCENARIO_DIR / name)
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel(), data_dir=tmp_path)
    sweep_through(deps, cluster, scenario)
    return deps


def test_cost_is_gpu_hours_times_price_and_suggests_the_right_request(tmp_path: Path) -> None:
    deps = _run(tmp_path)
    audit = deps.audit  # type: ignore[attr-defined]
    until = audit.entries(kind="usage", limit=1)[0].at
    report = build_report(audit, until - timedelta(days=7), until)
    assert report.sweeps == audit.count("usage") > 0
    assert report.cost == pytest.approx(sum(t.cost for t in report.by_team), abs=0.05)
    assert report.cost == pytest.approx(report.on_demand + report.reserved, abs=0.05)
    assert report.cost == pytest.approx(sum(p.cost for p in report.by_pool), abs=0.05)
    for job in report.by_job:
        assert job.cost == pytest.approx(job.gpu_hours * (job.cost / job.gpu_hours), abs=0.01)
    over = [s for s in report.suggestions if s.kind == "overprovisioned"]
    assert over and over[0].used < over[0].gpus
    text = render_markdown(report, "en")
    assert f"used {over[0].used} of {over[0].gpus} GPUs for" in text and f"request {over[0].used}" in text
    # Savings are the savings API's own numbers when the period covers every action.
    api = compute_savings(audit, [], until, report.currency)
    assert report.saved_gpu_hours == pytest.approx(api.reclaimed_gpu_hours, abs=0.05)


def test_a_period_that_starts_mid_waste_counts_its_part_and_says_how_long_it_lasted(tmp_path: Path) -> None:
    """The report cut the hang's length at the period's start ("no progress for 1h") beside chat's "silent 3h35m":
    the cost is the period's part, the suggestion's length the job's."""
    deps = _run(tmp_path, "zombie-pinned-gpu.yaml")
    audit = deps.audit  # type: ignore[attr-defined]
    until = audit.entries(kind="usage", limit=1)[0].at
    whole = build_report(audit, until - timedelta(days=7), until)
    [hung] = [s for s in whole.suggestions if s.kind == "zombie"]
    last = audit.entries(kind="finding", limit=1)[0].at  # the hang's last sweep (it was stopped then)
    late = build_report(audit, last - timedelta(minutes=30), until)
    [cut] = [s for s in late.suggestions if s.kind == "zombie"]
    assert cut.hours == hung.hours > 0.5 and cut.cost < hung.cost


def test_html_is_self_contained_with_charts_in_both_languages(tmp_path: Path) -> None:
    deps = _run(tmp_path, "idle-notebook.yaml")
    audit = deps.audit  # type: ignore[attr-defined]
    until = audit.entries(kind="usage", limit=1)[0].at
    report = build_report(audit, until - timedelta(days=7), until)
    for lang, word in (("en", "Cost per team"), ("zh", "各团队成本")):
        page = render_html(report, lang)
        assert word in page and "<svg" in page
        assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in page
    assert "GPU 成本摘要" in render_markdown(report, "zh")
    # Chinese punctuation in Chinese text: no ASCII brackets, semicolons or commas between its words.
    for zh in (render_markdown(report, "zh"), render_html(report, "zh")):
        assert not re.search(r"[\u4e00-\u9fff\d] \(|GPU 小时[;,)]|GPU 小时, ", zh), zh
    # The span is read in the reader's zone, named: UTC by default, 北京时间 for a Beijing team.
    utc_until, bj_until = f"{until:%Y-%m-%d %H:%M}", f"{until.astimezone(ZoneInfo('Asia/Shanghai')):%Y-%m-%d %H:%M}"
    assert f"至 {utc_until}（UTC），共" in render_markdown(report, "zh")
    assert f"至 {bj_until}（北京时间），共" in render_markdown(report, "zh", zone=ZoneInfo("Asia/Shanghai"))
    assert f"to {bj_until} Asia/Shanghai," in render_html(report, "en", ZoneInfo("Asia/Shanghai"))


def test_steward_sweep_then_report_on_a_fresh_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("STEWARD_RUNBOOKS_ENABLED", "false")
    monkeypatch.setenv("STEWARD_BACKEND", "sim")
    assert main(["report", "--out", str(tmp_path / "none")]) == 2  # nothing swept yet: says what to do
    assert "run `steward sweep`" in capsys.readouterr().err
    assert main(["sweep", "--at", "1h"]) == 0
    capsys.readouterr()
    assert main(["report", "--since", "7d", "--out", str(tmp_path / "out"), "--lang", "zh"]) == 0
    printed = capsys.readouterr().out
    assert "GPU 成本摘要" in printed and "GPU 成本" in printed
    assert (tmp_path / "out" / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert (tmp_path / "out" / "digest.md").exists()
