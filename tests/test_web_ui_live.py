"""The web UI on a desktop and a phone, in English and Chinese, in real headless Chromium (issue 14): no horizontal
scroll, a header that keeps its tabs and language toggle, labels that do not break per character, tables as cards
on a phone; the live sweep status (first sweep running, scenario ended), approval cards with context whose result
stays on screen after Deny, answered history with reason and outcome, and exemptions revoked from the page."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agent.config.settings import Settings
from tests.conftest import free_port, require_binary, require_module

pytestmark = pytest.mark.integration

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
DEMO_1820 = 4 * 3600 + 20 * 60  # 18:20 in the demo: stops done, a forced stop and a pool resize wait for a human


@contextmanager
def served(tmp_path: Any, start_s: float, until_s: float | None = None) -> Iterator[tuple[str, Any, Any]]:
    """(base URL, runtime, Playwright browser) for the demo cluster at `start_s`, fast-forwarded to `until_s`."""
    chromium = require_binary("chromium", "/usr/bin/chromium")
    require_module("playwright")
    from playwright.sync_api import sync_playwright

    from agent.api.build import fast_forward
    from agent.api.local_server import serve_in_thread
    from server import create_app

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300)
    app = create_app(settings, speed=0, start_s=start_s, run_scheduler=False)
    with serve_in_thread(app, free_port()) as base, sync_playwright() as pw:
        runtime = app.state.runtime
        if until_s is not None:
            fast_forward(runtime, until_s=until_s)
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield base, runtime, browser
        finally:
            browser.close()


def open_page(browser: Any, base: str, viewport: dict[str, int], lang: str, view: str, errors: list[str]) -> Any:
    page = browser.new_page(viewport=viewport, is_mobile=viewport is PHONE, has_touch=viewport is PHONE)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{base}/#{view}")
    page.evaluate(f"localStorage.setItem('steward.lang', '{lang}')")
    page.reload()
    return page


def no_horizontal_scroll(page: Any) -> None:
    width, inner = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
    assert width <= inner, f"page is {width}px wide in a {inner}px window"


def single_line(page: Any, selector: str) -> None:
    """Each element matched renders on one line (no label broken one CJK character per line)."""
    boxes = page.evaluate(f"""[...document.querySelectorAll({selector!r})].filter((e) => e.offsetParent)
        .map((e) => [e.textContent.trim(), e.getBoundingClientRect().height,
                     parseFloat(getComputedStyle(e).lineHeight) || parseFloat(getComputedStyle(e).fontSize) * 1.4])""")
    assert boxes, selector
    for text, height, line in boxes:
        assert height < 2 * line + 12, f"{selector} {text!r} wraps: {height}px for a {line}px line"


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1440x900", "390x844"])
def test_every_view_fits_desktop_and_phone_in_both_languages(tmp_path, viewport):
    from playwright.sync_api import expect

    with served(tmp_path, start_s=0, until_s=DEMO_1820) as (base, _runtime, browser):
        errors: list[str] = []
        for lang, findings_word in (("en", "Findings"), ("zh", "发现")):
            page = open_page(browser, base, viewport, lang, "findings", errors)
            expect(page.locator("#findings-table tbody tr").first).to_contain_text("cv-team/augment-worker",
                                                                                   timeout=20_000)
            expect(page.locator("button[data-view=findings]")).to_have_text(findings_word)
            for view in ("findings", "approvals", "savings", "audit", "chat"):
                page.click(f"button[data-view={view}]")
                expect(page.locator(f"#view-{view}")).to_be_visible()
                page.wait_for_timeout(400)  # the view's data has loaded and rendered
                no_horizontal_scroll(page)
                expect(page.locator("#lang-toggle")).to_be_in_viewport()
                expect(page.locator("#sweep-now")).to_be_visible()
            # The header's tabs stay reachable: each is inside the page's width (the tab row scrolls on a phone).
            for tab in page.locator(".tabs button").all():
                tab.scroll_into_view_if_needed()
                expect(tab).to_be_in_viewport()
            single_line(page, ".tabs button")
            page.click("button[data-view=findings]")
            expect(page.locator("#findings-table tbody tr").first).to_be_visible()
            single_line(page, "#findings-table .kind")
            single_line(page, "#findings-table .pill")
            page.click("button[data-view=savings]")
            expect(page.locator("#chart-hours svg")).to_be_visible(timeout=20_000)
            single_line(page, ".kpi-value")
            display = page.evaluate("getComputedStyle(document.querySelector('#findings-table tbody tr')).display")
            header = page.evaluate("getComputedStyle(document.querySelector('#findings-table thead')).display")
            if viewport is PHONE:  # one card per row, each value labelled by its column
                assert (display, header) == ("block", "none")
                label = page.evaluate("getComputedStyle(document.querySelector('#findings-table tbody td'), "
                                      "'::before').content")
                assert label.strip('"') == ("Kind" if lang == "en" else "类型")
            else:
                assert (display, header) == ("table-row", "table-header-group")
            page.close()
        assert errors == []


def test_first_sweep_running_then_findings_and_sweep_now(tmp_path):
    """While the first sweep runs the page says so (pushed over /api/events), never "No waste found"; when it
    finishes the findings appear without a reload, with each target's status; "Sweep now" runs one."""
    from playwright.sync_api import expect

    with served(tmp_path, start_s=3 * 3600 + 55 * 60) as (base, runtime, browser):
        errors: list[str] = []
        page = open_page(browser, base, DESKTOP, "en", "findings", errors)
        expect(page.locator("#sweep-state")).to_have_text("No sweep has finished yet.", timeout=20_000)
        runtime.graph_lock.acquire()  # the first sweep starts and waits, as one building the runbook index does
        sweep = threading.Thread(target=runtime.sweep_now, args=("test",))
        try:
            sweep.start()
            expect(page.locator("#sweep-state")).to_contain_text("First sweep running since", timeout=20_000)
            expect(page.locator("#findings-table tbody")).to_contain_text("The first sweep is still running",
                                                                          timeout=20_000)
            expect(page.locator("#findings-table tbody")).not_to_contain_text("No waste found")
            expect(page.locator("#sweep-now")).to_be_disabled()
        finally:
            runtime.graph_lock.release()
            sweep.join(timeout=60)
        expect(page.locator("#sweep-state")).to_contain_text("Last sweep 11-02 17:55 UTC", timeout=20_000)
        rows = page.locator("#findings-table tbody tr")
        expect(rows.first).to_contain_text("/", timeout=20_000)
        assert rows.count() == len(runtime.findings()) > 0
        warned = page.locator("#findings-table tbody tr", has_text="gpu-long/resnet-ablation")
        expect(warned.locator(".pill.warned")).to_have_text("warned 11-02 17:55")
        expect(warned.locator(".pill.due")).to_have_text("stop due 11-02 18:55")

        sweeps = runtime.sweeps_total
        page.click("#sweep-now")
        expect(page.locator("#sweep-note")).to_contain_text("Sweep finished", timeout=30_000)
        assert runtime.sweeps_total == sweeps + 1
        page.click("#lang-toggle")
        expect(page.locator("#sweep-state")).to_contain_text("上次巡检")
        assert errors == []


def test_ended_scenario_shows_a_banner(tmp_path):
    from playwright.sync_api import expect

    from sim.scenario import demo_scenario_path, load_scenario

    duration = load_scenario(demo_scenario_path()).duration
    with served(tmp_path, start_s=duration) as (base, _runtime, browser):
        errors: list[str] = []
        page = open_page(browser, base, PHONE, "zh", "chat", errors)
        expect(page.locator("#ended")).to_be_visible(timeout=20_000)
        expect(page.locator("#ended")).to_contain_text("演示场景已结束")
        no_horizontal_scroll(page)
        page.click("#lang-toggle")
        expect(page.locator("#ended")).to_contain_text("The demo scenario has ended")
        assert errors == []


def test_deny_keeps_the_result_and_history_shows_reason_and_outcome(tmp_path):
    from playwright.sync_api import expect

    with served(tmp_path, start_s=0, until_s=DEMO_1820) as (base, runtime, browser):
        errors: list[str] = []
        pending = {a.action: a for a in runtime.deps.approvals.pending()}
        page = open_page(browser, base, PHONE, "en", "approvals", errors)
        resize = page.locator(f".card[data-id='{pending['resize_pool'].id}']")
        expect(resize).to_contain_text("8 GPU", timeout=20_000)
        expect(resize.locator(".context")).to_contain_text("$32.80/hour")
        stop = page.locator(f".card[data-id='{pending['force_terminate'].id}']")
        expect(stop.locator(".context")).to_contain_text("Owner: erin")
        expect(stop.locator(".context")).to_contain_text("2 GPU")
        expect(stop.locator(".evidence")).to_contain_text("util")

        resize.locator(".reason").fill("month-end batch tonight")
        resize.locator("button.deny").click()
        expect(resize.locator(".card-result .verdict")).to_contain_text("denied", timeout=20_000)
        expect(resize.locator(".card-result")).to_contain_text("month-end batch tonight")
        page.wait_for_timeout(4000)  # past a refresh cycle or two: the answered card stays until closed
        expect(resize).to_be_visible()
        recent = page.locator("#recent-table tbody")
        expect(recent).to_contain_text("month-end batch tonight")
        expect(recent).to_contain_text("11-02 18:20")

        stop.locator("button.approve").click()
        expect(stop.locator(".card-result .verdict")).to_contain_text("approved", timeout=20_000)
        expect(stop.locator(".card-result")).to_contain_text("executed")
        row = recent.locator("tr", has_text="cv-team/augment-worker")
        expect(row).to_contain_text("executed", timeout=20_000)
        expect(row).to_contain_text("stopped: killed")
        no_horizontal_scroll(page)
        resize.locator("button.dismiss").click()
        expect(resize).to_have_count(0)
        assert errors == []


def test_exempt_list_and_revoke_from_the_page(tmp_path):
    from playwright.sync_api import expect

    with served(tmp_path, start_s=0, until_s=DEMO_1820) as (base, runtime, browser):
        errors: list[str] = []
        page = open_page(browser, base, DESKTOP, "zh", "approvals", errors)
        form = page.locator("#exempt-form")
        form.locator("input[name=job]").fill("ml-team/no-such-job")
        form.locator("button[type=submit]").click()
        expect(page.locator("#exempt-note.error")).to_contain_text("ml-team/no-such-job", timeout=20_000)
        form.locator("input[name=job]").fill("research/lr-sweep")
        form.locator("input[name=reason]").fill("deadline Friday")
        form.locator("button[type=submit]").click()
        expect(page.locator("#exempt-note.ok")).to_contain_text("保留至 11-02 22:20 UTC", timeout=20_000)
        row = page.locator("#exempt-table tbody tr", has_text="research/lr-sweep")
        expect(row).to_contain_text("11-02 22:20")
        expect(row).to_contain_text("deadline Friday")
        assert [e.target for e in runtime.deps.audit.history(runtime.deps.clock.now()).exemptions] == \
            ["research/lr-sweep"]
        row.locator("button.revoke").click()
        expect(page.locator("#exempt-table tbody")).to_contain_text("目前没有生效的保留", timeout=20_000)
        assert runtime.deps.audit.history(runtime.deps.clock.now()).exemptions == []
        revoked = runtime.deps.audit.entries(kind="exemption", status="revoked")
        assert [(e.target, e.data["by"]) for e in revoked] == [("research/lr-sweep", "local-dev")]
        assert errors == []
