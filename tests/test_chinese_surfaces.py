"""Every surface a person reads, rendered in Chinese, has no English left outside identifiers, numbers, units,
names and the technical terms in tests/zh_text.py (issue 14, item 7)."""

from __future__ import annotations

import pytest

from agent.cli.main import main
from agent.graph.report import audit_text, decision_reason, render_report
from agent.planning.policy_model import warning_message
from sim.scenario import demo_scenario_path, load_scenario
from tests.test_chat_jobs import CAROL, JOB, ask, sweep_to
from tests.test_chat_jobs import _client as chat_client
from tests.zh_text import leftovers

DEMO = load_scenario(demo_scenario_path())
# People and scenario prose are data, not UI text: user names as the cluster has them, and the demo's description.
PEOPLE = ({j.user for j in DEMO.jobs} | {j.project for j in DEMO.jobs if j.project}
          | {j.id.split("/")[0] for j in DEMO.jobs} | {"oncall", "lead", "carol", "bob", "local", "dev"})


def test_the_checker_catches_english_and_ascii_punctuation():
    assert leftovers("2 块 GPU 利用率 0%，日志自 14:20 起无进展") == []
    assert leftovers("ml-team/jupyter-carol 已执行 `steward approvals approve apr_x1`，SIGTERM 10 MB/s") == []
    assert any("'executed'" in x for x in leftovers("警告 ml-team/x 级别 1 executed"))
    assert any("ASCII '准:'" in x for x in leftovers("oncall-lead 批准: 已执行"))
    assert any("ASCII ' ('" in x or "(级" in x for x in leftovers("调整节点池 a100 (级别 4)"))


def test_sweep_report_timeline_and_warning_in_chinese(capsys):
    assert main(["sweep", "--lang", "zh", "--every", "15m"]) == 0
    out = capsys.readouterr().out.replace(DEMO.description.strip().splitlines()[0], "")
    assert "优雅停止" in out and "等待人工审批：" in out and "收到的警告：" in out
    assert leftovers(out, PEOPLE) == []


def test_report_decision_lines_and_audit_reasons_in_chinese():
    approval = {"proposal": {"action": "resize_pool", "target": "a100", "target_nodes": 2},
                "decision": {"verdict": "needs_approval", "rule": "approval", "level": 4,
                             "reason": "resize_pool is level 4, above the automatic limit 2 for the global levels; "
                                       "waiting for a human"}, "id": "a"}
    held = {"proposal": {"action": "terminate", "target": "ml/x"}, "id": "b",
            "decision": {"verdict": "deny", "rule": "denial_hold", "level": 2,
                         "reason": "lead denied terminate on job ml/x at 2026-11-02 18:00 UTC; the denial holds"}}

    class Deps:
        language, currency, _observations = "zh", "USD", {}

    text = render_report({"at": "2026-11-02T18:00:00+00:00", "decisions": [approval, held], "outcomes": []},
                         Deps())  # type: ignore[arg-type]
    assert "级别 4 高于自动执行上限 2，等待人工审批" in text and "人工已拒绝该操作" in text
    assert leftovers(text, PEOPLE) == []
    for rule in ("mode", "unknown_target", "protected", "warning_first", "reserve", "runbook_limit", "nope"):
        assert leftovers(decision_reason(rule, "english reason", "zh")) == []
    stored = "waiting for a human until 2026-11-02T20:50:00.123456+00:00"
    assert audit_text("approval", "pending", "resize_pool", "a100", stored, {}, "en") == \
        "waiting for a human until 2026-11-02 20:50 UTC"
    # The Chinese line keeps the deadline the English one gives (it said only "等待人工审批").
    assert audit_text("approval", "pending", "resize_pool", "a100", stored,
                      {"expires_at": "2026-11-02T20:50:00+00:00"}, "zh") == "等待人工审批，截至 2026-11-02 20:50（UTC）"
    for kind, status, data in (("approval", "denied", {"by": "lead"}), ("execution", "executed", {}),
                               ("finding", "idle", {"kind": "idle", "gpus": 2, "waste_gpu_hours": 1.5}),
                               ("exemption", "granted", {"until": "2026-11-02T22:00:00+00:00"}),
                               ("decision", "deny", {"rule": "duplicate"}), ("report", "sweep", {})):
        assert leftovers(audit_text(kind, status, "notify", "ml/x", "deny by lead", data, "zh"), PEOPLE) == []


@pytest.fixture
def chat(tmp_path):
    with chat_client(tmp_path) as c:
        yield c


def test_chat_answers_and_notifications_in_chinese(chat):
    sweep_to(chat, 100)
    for question in ("谁在浪费 GPU？", "你今天做了什么？", "节省了多少？", "有待审批的操作吗？",
                     f"为什么要停止 {JOB}？接下来会怎样？"):
        answer = ask(chat, question, CAROL, lang="zh")[1][-1]["answer"]
        assert answer and leftovers(answer, PEOPLE) == [], (question, answer)
    rt = chat.app.state.runtime
    found = rt.findings()
    assert {f.kind for f in found} >= {"idle", "overprovisioned"}
    for f in found:
        message = warning_message(f, rt.deps.policy, rt.deps.clock.now(), "zh")
        assert leftovers(message, PEOPLE) == [], message


@pytest.mark.integration
def test_every_tab_of_the_web_ui_in_chinese(tmp_path):
    """In Chromium with the Chinese UI: chat, approvals (a pending card and a denied answer), findings, savings and
    the audit log show no English outside identifiers and technical terms."""
    from tests.conftest import free_port, require_binary, require_module
    from tests.test_web_ui_browser import CHROMIUM_ARGS

    chromium = require_binary("chromium", "/usr/bin/chromium")
    require_module("playwright")
    from playwright.sync_api import expect, sync_playwright

    from agent.api.local_server import serve_in_thread
    from agent.config.settings import Settings
    from server import create_app

    app = create_app(Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300), speed=0,
                     start_s=3 * 3600 + 50 * 60, run_scheduler=False)
    with serve_in_thread(app, free_port()) as base, sync_playwright() as pw:
        runtime = app.state.runtime
        for _ in range(2):
            with runtime.graph_lock:
                runtime.sim_clock.cluster.advance(300)
            opened = runtime.sweep_now("test").approvals
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.add_init_script("localStorage.setItem('steward.lang', 'zh')")
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(base + "/")
        texts = {}
        page.fill("#question", "谁在浪费 GPU？")
        page.click("#send")
        expect(page.locator(".msg.bot.done .answer")).to_contain_text("GPU", timeout=20_000)
        texts["chat"] = page.inner_text("body")

        page.click("button[data-view=approvals]")
        expect(page.locator("#pending-list .card").first).to_be_visible(timeout=20_000)
        texts["approvals"] = page.inner_text("body")
        pending = [a for a in runtime.deps.approvals.pending()]
        assert pending, opened
        card = page.locator(f".card[data-id='{pending[0].id}']")
        card.locator(".reason").fill("今晚有批处理")
        card.locator("button.deny").click()
        expect(card.locator(".card-result.ok")).to_contain_text("已拒绝", timeout=20_000)
        texts["answered"] = page.inner_text("body")

        page.click("button[data-view=findings]")
        expect(page.locator("#findings-table tbody tr").first).to_contain_text("块 GPU", timeout=20_000)
        texts["findings"] = page.inner_text("body")
        page.click("button[data-view=savings]")
        expect(page.locator("#kpis .kpi").first).to_be_visible(timeout=20_000)
        texts["savings"] = page.inner_text("body")
        page.click("button[data-view=audit]")
        expect(page.locator("#audit-table tbody tr").first).to_be_visible(timeout=20_000)
        texts["audit"] = page.inner_text("body")
        browser.close()
    assert errors == []
    assert {tab: leftovers(text, PEOPLE) for tab, text in texts.items()} == {tab: [] for tab in texts}


def test_the_pending_approvals_answer_reads_in_chinese():
    """有哪些待审批: the action and its level in Chinese, the expiry with its date when it is another day."""
    from datetime import UTC, datetime, timedelta

    from agent.api.answerer import ChatContext, _approvals
    from agent.records.approvals import Approval
    from core.observation import Observation

    now = datetime(2026, 11, 2, 22, 0, tzinfo=UTC)
    card = Approval(id="apr_x", proposal_key="k", target="a100-ondemand", action="resize_pool", level=4,
                    requested_at=now, expires_at=now + timedelta(hours=4), status="pending")
    ctx = ChatContext(findings=[], observation=Observation(at=now, slice_s=300, lookback_s=3600), tools={},
                      audit=None, pending=[card], now=now, currency="CNY")  # type: ignore[arg-type]
    zh = _approvals(ctx, "zh")
    assert "（级别 4），2026-11-03 02:00（UTC）过期" in zh and "resize_pool" not in zh and "level" not in zh
    assert "resize_pool **a100-ondemand** (level 4), expires 2026-11-03 02:00 UTC" in _approvals(ctx, "en")
