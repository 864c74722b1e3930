"""Screenshots of the web UI (chat, approvals, savings, findings; desktop 1440x900 and phone 390x844, English and
Chinese) for docs/web-ui.md, in headless Chromium.

    .venv/bin/python -m evals.screenshots [--out docs/screenshots] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def take(out: Path, chromium: str) -> list[Path]:
    from playwright.sync_api import expect, sync_playwright

    from agent.api.build import fast_forward
    from agent.api.local_server import serve_in_thread
    from agent.config.settings import Settings
    from server import create_app
    from tests.conftest import free_port

    out.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(data_dir=Path(data_dir), leader_lock="none", sweep_every_s=300)
        app = create_app(settings, speed=0, start_s=0, run_scheduler=False)
        with serve_in_thread(app, free_port()) as base, sync_playwright() as pw:
            fast_forward(app.state.runtime, until_s=4 * 3600 + 20 * 60)  # 18:20: stops done, two approvals open
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900}, device_scale_factor=1)

            def shot(name: str, full_page: bool = False) -> None:
                page.wait_for_timeout(300)
                path = out / f"{name}.png"
                page.screenshot(path=str(path), full_page=full_page)
                shots.append(path)

            page.goto(base + "/")
            page.evaluate("localStorage.setItem('steward.lang', 'en')")
            page.reload()
            for question in ("who is wasting A100s right now?", "what did you do today?"):
                page.fill("#question", question)
                page.click("#send")
                expect(page.locator(".msg.bot.done")).to_have_count(1 + (question.startswith("what")), timeout=20_000)
            shot("chat")
            page.click("button[data-view=approvals]")
            expect(page.locator(".card").first).to_be_visible(timeout=20_000)
            shot("approvals")
            page.click("button[data-view=savings]")
            expect(page.locator("#chart-hours svg")).to_be_visible(timeout=20_000)
            shot("savings")
            page.click("button[data-view=findings]")
            expect(page.locator("#findings-table tbody tr").first).to_be_visible(timeout=20_000)
            shot("findings")
            page.click("#lang-toggle")
            page.click("button[data-view=chat]")
            page.fill("#question", "谁在浪费 GPU？")
            page.click("#send")
            expect(page.locator(".msg.bot.done")).to_have_count(3, timeout=20_000)
            shot("chat-zh")
            page.click("button[data-view=findings]")
            expect(page.locator("#findings-table tbody tr").first).to_be_visible(timeout=20_000)
            shot("findings-zh")

            phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                                     has_touch=True)
            page = phone
            for lang in ("en", "zh"):
                page.goto(base + "/#approvals")
                page.evaluate(f"localStorage.setItem('steward.lang', '{lang}')")
                page.reload()
                expect(page.locator(".card").first).to_be_visible(timeout=20_000)
                shot(f"mobile-approvals-{lang}")
                page.click("button[data-view=findings]")
                expect(page.locator("#findings-table tbody tr").first).to_be_visible(timeout=20_000)
                shot(f"mobile-findings-{lang}")
            browser.close()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    for path in take(args.out, args.chromium):
        print(path)


if __name__ == "__main__":
    main()
