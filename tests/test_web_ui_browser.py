"""The web UI in real headless Chromium: ask a question, watch the streamed answer, approve, see the audit entry."""

from __future__ import annotations

import pytest

from agent.config.settings import Settings
from tests.conftest import free_port, require_binary, require_module

pytestmark = pytest.mark.integration

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_chat_approve_and_audit_in_a_browser(tmp_path):
    chromium = require_binary("chromium", "/usr/bin/chromium")
    require_module("playwright")
    from playwright.sync_api import expect, sync_playwright

    from agent.api.local_server import serve_in_thread
    from server import create_app

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300)
    app = create_app(settings, speed=0, start_s=3 * 3600 + 50 * 60, run_scheduler=False)
    with serve_in_thread(app, free_port()) as base, sync_playwright() as pw:
        runtime = app.state.runtime
        with runtime.graph_lock:
            runtime.sim_clock.cluster.advance(300)
        approval = runtime.sweep_now("test").approvals[0]

        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(base + "/")

        page.fill("#question", "who is wasting A100s right now?")
        page.click("#send")
        answer = page.locator(".msg.bot.done .answer")
        expect(answer).to_contain_text("a100-ondemand", timeout=20_000)
        expect(page.locator(".msg.bot.done .tool-name").first).to_have_text("list_jobs")

        page.click("button[data-view=approvals]")
        card = page.locator(f".card[data-id='{approval.id}']")
        expect(card).to_contain_text("a100-ondemand", timeout=20_000)
        card.locator(".reason").fill("quiet night")
        card.locator("button.approve").click()
        expect(card.locator(".card-result.ok")).to_contain_text("executed", timeout=20_000)

        page.click("button[data-view=audit]")
        page.select_option("#audit-filter select[name=kind]", "execution")
        page.click("#audit-filter button[type=submit]")
        expect(page.locator("#audit-table tbody")).to_contain_text("resize pool", timeout=20_000)
        expect(page.locator("#audit-table tbody")).to_contain_text("executed")
        # The cells hold times without a zone: the column names it, in either language.
        expect(page.locator("#audit-table thead")).to_contain_text("When (UTC)")

        page.click("#lang-toggle")
        expect(page.locator("button[data-view=audit]")).to_have_text("审计")
        expect(page.locator("#audit-table thead")).to_contain_text("(UTC)")
        browser.close()
        assert errors == []
    stored = runtime.deps.approvals.get(approval.id)
    assert stored is not None and stored.status == "approved" and stored.answered_by == "local-dev"


def test_degraded_banner_in_a_browser(tmp_path):
    """Issue 13, finding 7: a degradation /healthz reports (503) shows as a banner, in the reader's language."""
    chromium = require_binary("chromium", "/usr/bin/chromium")
    require_module("playwright")
    from playwright.sync_api import expect, sync_playwright

    from agent.api.local_server import serve_in_thread
    from server import create_app
    from tools.prometheus import PrometheusMetrics

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300)
    app = create_app(settings, speed=0, start_s=3 * 3600 + 50 * 60, run_scheduler=False)
    with serve_in_thread(app, free_port()) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(base + "/")
        expect(page.locator("#clock")).not_to_have_text("--:--", timeout=20_000)
        expect(page.locator("#degraded")).to_be_hidden()

        runtime = app.state.runtime
        runtime.deps.metrics = PrometheusMetrics(f"http://127.0.0.1:{free_port()}")  # nothing listens there
        runtime.sweep_now("test")
        banner = page.locator("#degraded")
        expect(banner).to_contain_text("Cluster data is incomplete", timeout=20_000)
        expect(banner.locator(".reason.backend_unavailable")).to_have_attribute("title", "latest sweep: " +
                                                                               runtime.latest.state["observed"]
                                                                               ["degraded"][0])
        page.click("#lang-toggle")
        expect(banner).to_contain_text("集群数据不完整", timeout=20_000)
        browser.close()
        assert errors == []
