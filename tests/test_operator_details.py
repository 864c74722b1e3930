"""Issue 14, the last details: utilisation sparklines on findings, a pending resize whose size the latest sweep no
longer suggests, the sweep report in the display time zone, outcome details and ChatOps cards in Chinese."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agent.api.routes import _resize_sizes, resize_note
from agent.api.schemas import ApprovalView
from agent.api.sparkline import MAX_POINTS, _fold
from agent.chatops.cards import approval_card_listener, card_text
from agent.chatops.links import ApprovalLinks
from agent.chatops.notifier import Route
from agent.graph.report import audit_text, outcome_text, render_report, report_for_people, rule_of_reason
from agent.records.approvals import Approval
from core.actions import Finding
from tests.test_approval_expiry import _Robot
from tests.test_chinese_surfaces import PEOPLE
from tests.test_server_api import START, advance, client_for, settings_for, sweep_with_approval
from tests.zh_text import leftovers

AT = datetime(2026, 11, 2, 17, 55, tzinfo=UTC)


@pytest.fixture
def client(tmp_path):
    with client_for(settings_for(tmp_path, display_tz="Asia/Shanghai"), start_s=START) as c:
        yield c


# --- 1. sparklines --------------------------------------------------------------------------------------------


def test_findings_carry_their_utilisation_over_the_window_from_the_sweeps_own_reading(client):
    sweep_with_approval(client)
    rt = client.app.state.runtime
    calls: list[int] = []
    real = rt.deps.observe

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    rt.deps.observe = counted
    found = client.get("/api/findings").json()["findings"]
    assert calls == []  # read from the sweep's reading held in memory: no backend query per request
    jobs = [f for f in found if f["target_type"] == "job"]
    assert jobs and all(f["util"] is not None for f in jobs)
    for f in jobs:
        util = f["util"]
        assert 1 <= len(util["max"]) == len(util["avg"]) <= MAX_POINTS
        assert all(v is None or 0.0 <= v <= 100.0 for v in util["max"] + util["avg"])
        assert all(a is None or m is None or a <= m + 1e-6 for m, a in zip(util["max"], util["avg"], strict=True))
        assert util["end"].startswith(rt.latest.state["at"][:16])
        # The window covers the detectors' fine span: the points times their step reach back that far.
        assert util["step_s"] * len(util["max"]) >= rt.deps.lookback_s() - util["step_s"]
    idle = next(f for f in jobs if f["kind"] in ("idle", "zombie"))
    assert max(v for v in idle["util"]["max"][-3:] if v is not None) <= 5.0  # quiet at the end, as the finding says
    assert all(f["util"] is None for f in found if f["target_type"] == "pool")
    # The CSV export stays as it was: the series is for the page, not a column.
    assert "util" not in client.get("/api/findings/export?format=csv").text.splitlines()[0].split(",")


def test_folding_keeps_peaks_and_gaps_and_aligns_to_the_newest_slice():
    assert _fold([1.0, 5.0, 2.0, None, None, 3.0, 0.0], 2, "max") == [1.0, 5.0, None, 3.0]
    assert _fold([1.0, 5.0, 2.0, None, None, 3.0, 0.0], 2, "avg") == [1.0, 3.5, None, 1.5]
    assert len(_fold([0.0] * 300, 7, "max")) == 43


# --- 2. a pending resize and the latest finding's size ----------------------------------------------------------


def _resize(nodes: int, status: str = "pending") -> Approval:
    proposal = {"action": "resize_pool", "target": "a100", "target_nodes": nodes, "finding_kind": "oversized"}
    return Approval(id="apr_x", proposal_key="k", target="a100", action="resize_pool", level=4, requested_at=AT,
                    expires_at=AT + timedelta(hours=2), status=status,  # type: ignore[arg-type]
                    payload={"guarded_action": {"proposal": proposal, "decision": {}}})


def _oversized(suggested: int) -> Finding:
    return Finding(kind="oversized", target="a100", target_type="pool", since=AT, detected_at=AT,
                   evidence="pool a100: 4 nodes, 1 busy", metrics={"suggested_nodes": suggested}, gpus=16)


def test_a_pending_resize_names_its_own_size_and_says_when_the_latest_sweep_suggests_another():
    a = _resize(2)
    same = _resize_sizes(ApprovalView(**a.model_dump()), a, _oversized(2), "en")
    assert (same.target_nodes, same.suggested_nodes, same.size_note) == (2, 2, None)
    other = _resize_sizes(ApprovalView(**a.model_dump()), a, _oversized(3), "en")
    assert (other.target_nodes, other.suggested_nodes) == (2, 3)
    assert other.size_note == ("This request is to resize a100 to 2 nodes; the latest sweep suggests 3 nodes. "
                               "Approving resizes to 2 nodes (the guardrail re-checks it on fresh state first).")
    zh = _resize_sizes(ApprovalView(**a.model_dump()), a, _oversized(3), "zh").size_note
    assert zh is not None and "缩容到 2 个节点" in zh and "建议缩容到 3 个节点" in zh and leftovers(zh) == []
    gone = _resize_sizes(ApprovalView(**a.model_dump()), a, None, "zh").size_note
    assert gone == resize_note("a100", 2, None, "zh") and "已不再认为 a100 过大" in gone
    answered = _resize_sizes(ApprovalView(**_resize(2, "approved").model_dump()), _resize(2, "approved"),
                             _oversized(3), "en")
    assert answered.target_nodes == 2 and answered.size_note is None  # history shows what was asked, no warning


def test_the_approvals_api_shows_the_requests_size_and_the_latest_findings(client):
    sweep_with_approval(client)
    pending = client.get("/api/approvals").json()["pending"][0]
    assert pending["action"] == "resize_pool" and pending["target_nodes"] is not None
    assert pending["suggested_nodes"] == pending["target_nodes"] and pending["size_note"] is None
    # A later sweep suggests another size while the request waits (it is not re-asked while pending).
    rt = client.app.state.runtime
    for f in rt.latest.state["findings"]:
        if f["kind"] == "oversized" and f["target"] == pending["target"]:
            f["metrics"]["suggested_nodes"] = pending["target_nodes"] + 1
    again = client.get("/api/approvals?lang=zh").json()["pending"][0]
    assert again["target_nodes"] == pending["target_nodes"]
    assert again["suggested_nodes"] == pending["target_nodes"] + 1
    assert f"建议缩容到 {pending['target_nodes'] + 1} 个节点" in again["size_note"]


# --- 3. the sweep report in the display time zone ---------------------------------------------------------------


class _Deps:
    language, currency = "en", "USD"
    _observations: dict[str, object] = {}


FINDING = {"kind": "idle", "target": "ml/x", "target_type": "job", "since": "2026-11-02T15:40:00+00:00",
           "detected_at": "2026-11-02T17:55:00+00:00", "evidence": "2 GPUs at 0% for 2h15m", "gpus": 2,
           "waste_gpu_hours": 4.5, "waste_cost": 9.0, "currency": "USD"}


def test_the_report_people_read_is_in_the_display_zone_and_the_audited_one_in_utc():
    state = {"at": "2026-11-02T17:55:00+00:00", "findings": [FINDING], "decisions": [], "outcomes": []}
    audited = render_report(state, _Deps())  # type: ignore[arg-type]
    assert audited.startswith("GPU Steward sweep at 2026-11-02 17:55 UTC:") and "since 15:40" in audited
    shown = report_for_people(audited, state, _Deps(), ZoneInfo("Asia/Shanghai"))  # type: ignore[arg-type]
    assert shown.startswith("GPU Steward sweep at 2026-11-03 01:55 Asia/Shanghai:")
    assert "since 11-02 23:40" in shown and "UTC" not in shown  # the day boundary crossed: the date shows
    zh = _Deps()
    zh.language = "zh"
    text = report_for_people("", state, zh, ZoneInfo("Asia/Shanghai"))  # type: ignore[arg-type]
    assert text.startswith("GPU Steward 巡检时间 2026-11-03 01:55（北京时间）：") and "开始于 11-02 23:40" in text
    assert report_for_people("as audited", state, _Deps(), UTC) == "as audited"  # type: ignore[arg-type]


def test_the_sweep_now_api_and_the_audit_log_keep_their_zones(client):
    advance(client, 300)
    body = client.post("/api/sweeps").json()
    assert " Asia/Shanghai" in body["report"].splitlines()[0] and " UTC" not in body["report"].splitlines()[0]
    audited = client.app.state.runtime.deps.audit.entries(kind="report", limit=1)[0].reason or ""
    assert " UTC" in audited.splitlines()[0]


# --- 4. outcome details in Chinese ------------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "status", "detail", "reason", "zh"), [
    ("force_terminate", "executed", "stopped: killed", "idle", "已停止（已强制结束）"),
    ("terminate", "executed", "stopping: SIGTERM sent; the job has not exited", "idle", "已发送 SIGTERM，作业尚未退出"),
    ("force_terminate", "executed", "stopping: slurm job 8 cancelled; still completing", "idle",
     "已强制结束，作业尚未退出（slurm job 8 cancelled; still completing）"),
    ("terminate", "refused", "refused: ml/x is another job now (uid u2, not u1)", "idle",
     "被拒绝（ml/x is another job now (uid u2, not u1)）"),
    ("notify", "executed", "inbox to alice: sent", "idle", "通过站内信发给 alice：已发送"),
    ("notify", "executed", "pager to alice: sent", "idle", "通过 pager 发给 alice：已发送"),
    ("notify", "executed", "dingtalk+wecom to alice: sent", "idle", "通过钉钉、企业微信发给 alice：已发送"),
    ("notify", "skipped", "chatops to bob: deferred (outside working hours; sent at the next sweep within them)",
     "idle", "通过群聊机器人发给 bob：非工作时间，推迟发送（将在工作时间内的下一次巡检时发送）"),
    ("notify", "skipped", "chatops to bob: deferred (outside working hours)", "idle",
     "通过群聊机器人发给 bob：非工作时间，推迟发送（outside working hours）"),
    ("resize_pool", "executed", "4->2", "oversized", "4 → 2 个节点"),
    ("terminate", "blocked", "", "re-checked before acting: job ml/x is protected: label keep=true; no terminate",
     "执行前复核未通过：作业受保护策略保护"),
    ("terminate", "blocked", "", "re-checked before acting: lead denied terminate on ml/x at 2026-11-02 18:00 UTC; "
     "the denial holds for 12h, until 2026-11-03 06:00 UTC", "执行前复核未通过：人工已拒绝该操作，在拒绝有效期内不再执行或询问"),
    ("resize_pool", "blocked", "", "re-checked before acting: 2 nodes of pool a100 run jobs; 1 nodes would remove a "
     "busy node", "执行前复核未通过：需为资源池保留空闲 GPU 余量"),
    ("terminate", "failed", "", "terminate failed: TimeoutError: read timed out", "优雅停止失败：TimeoutError: read timed out"),
    ("terminate", "dry_run", "", "dry run: would terminate ml/x", "演练：未实际优雅停止"),
    ("terminate", "denied_by_human", "", "denied_by_human", ""),
])
def test_outcome_details_are_translated_keeping_identifiers_and_numbers(action, status, detail, reason, zh):
    assert outcome_text(action, status, detail, reason, "zh") == zh
    assert outcome_text(action, status, detail, reason, "en") == ("" if reason == status else detail or reason)


def test_every_guardrail_rule_is_read_back_from_its_reason():
    assert rule_of_reason("job ml/x is pending; only running or stopping jobs are stopped") == "not_running"
    assert rule_of_reason("the owner of job ml/x has not been warned; a stop needs a delivered warning") == \
        "warning_first"
    assert rule_of_reason("3 stops in the last hour reach the limit of 3 per hour") == "rate_limit"
    assert rule_of_reason("something a backend said") is None
    text = audit_text("execution", "executed", "force_terminate", "ml/x", "idle", {"detail": "stopped: killed"}, "zh")
    assert text == "强制停止：已执行（已停止（已强制结束））" and leftovers(text) == []


def test_answered_approvals_show_their_outcome_in_chinese(client):
    approval_id = sweep_with_approval(client)
    answered = client.post(f"/api/approvals/{approval_id}?lang=zh", json={"decision": "approve"}).json()
    assert [o["text"] for o in answered["outcomes"]] and all(leftovers(o["text"]) == [] for o in answered["outcomes"])
    assert "个节点" in answered["outcomes"][0]["text"]
    recent = client.get("/api/approvals?lang=zh").json()["recent"][0]
    assert recent["outcome"] == "executed" and "个节点" in recent["outcome_detail"]
    assert leftovers(recent["outcome_detail"]) == []
    english = client.get("/api/approvals").json()["recent"][0]
    assert "->" in english["outcome_detail"]


# --- 5. ChatOps cards in Chinese -------------------------------------------------------------------------------


def _stop_request(finding: Finding) -> Approval:
    proposal = {"action": "force_terminate", "target": finding.target, "finding_kind": finding.kind,
                "reason": finding.evidence}
    decision = {"verdict": "needs_approval", "rule": "approval", "level": 3,
                "reason": "force_terminate is level 3, above the automatic limit 2 for the global levels; waiting"}
    return Approval(id="apr_abc123", proposal_key="k", target=finding.target, action="force_terminate", level=3,
                    requested_at=AT, expires_at=AT + timedelta(hours=2), status="pending",
                    payload={"guarded_action": {"proposal": proposal, "decision": decision},
                             "approvers": ["head-b", "head-c"], "round": 2})


def test_dingtalk_and_wecom_cards_are_all_chinese_in_zh(client):
    sweep_with_approval(client)
    finding = next(f for f in client.app.state.runtime.findings() if f.kind == "idle")
    approval = _stop_request(finding)
    title, text = card_text(approval, "zh", finding, ZoneInfo("Asia/Shanghai"))
    assert title == f"待审批：强制停止 {finding.target}"
    assert "级别 3 高于自动执行上限 2" in text and "截止：2026-11-03 03:55（北京时间）" in text
    assert "依据：" in text and "force_terminate" not in text
    ding, wecom = _Robot(), _Robot()
    listener = approval_card_listener(Route(dingtalk=ding, wecom=wecom),  # type: ignore[arg-type]
                                      ApprovalLinks("0123456789abcdef-secret", "https://steward.example"),
                                      language="zh", now_s=lambda: 0.0, zone=ZoneInfo("Asia/Shanghai"))
    result = type("Result", (), {"state": {"findings": [finding.model_dump(mode="json")]}})()
    listener(type("Event", (), {"kind": "approval_requested", "approval": approval, "result": result})())
    card, ping = ding.messages
    shown = [card["actionCard"]["title"], card["actionCard"]["text"], *(b["title"] for b in card["actionCard"]["btns"]),
             ping["markdown"]["title"], ping["markdown"]["text"]]
    wcard, wping = wecom.messages
    tc = wcard["template_card"]
    shown += [tc["main_title"]["title"], tc["main_title"]["desc"], tc["sub_title_text"],
              *(j["title"] for j in tc["jump_list"]), wping["markdown"]["content"]]
    assert [b["title"] for b in card["actionCard"]["btns"]] == ["批准", "拒绝"]
    assert {s: leftovers(s, PEOPLE) for s in shown} == {s: [] for s in shown}
    resize = _resize(2)
    title, text = card_text(resize, "zh")
    assert title == "待审批：调整节点池 a100 → 2 个节点" and leftovers(text) == []
    assert card_text(resize, "en")[0] == "Approval needed: resize of pool a100 -> 2 nodes"
    # The forced stop's own reason (the English card's "ignored SIGTERM; ...") is on the Chinese card too, and
    # WeCom's 400-character text keeps the way to answer: the evidence is what is cut.
    assert "宽限期内仍未退出，只能强制停止" in card_text(approval, "zh", finding)[1]
    assert tc["sub_title_text"].startswith(f"也可回复 `approve {approval.id}` 或 `deny {approval.id}`")
    assert len(tc["sub_title_text"]) <= 400


def test_a_card_shows_text_from_a_job_or_a_model_without_links():
    """A reason the model wrote after reading a log, or a job's name, must not become a link an approver taps."""
    approval = _resize(2)
    ga = approval.payload["guarded_action"]
    ga["proposal"]["reason"] = "idle; [Approve here](https://evil.example/approve) <img src=x>"
    for lang in ("en", "zh"):
        _, text = card_text(approval, lang)
        assert "](https://" not in text and "<img" not in text, text
    # the brackets as look-alikes, the URL scheme defused (core.text.markdown_text): text to read, nothing to tap
    assert "［Approve here］(https：//evil.example/approve)" in card_text(approval, "en")[1]


@pytest.mark.integration
def test_sparklines_render_in_the_table_and_the_phone_cards_and_a_resize_card_names_its_size(tmp_path):
    from tests.conftest import free_port, require_binary, require_module
    from tests.test_web_ui_browser import CHROMIUM_ARGS

    chromium = require_binary("chromium", "/usr/bin/chromium")
    require_module("playwright")
    from playwright.sync_api import expect, sync_playwright

    from agent.api.local_server import serve_in_thread
    from server import create_app

    app = create_app(settings_for(tmp_path), speed=0, start_s=START, run_scheduler=False)
    with serve_in_thread(app, free_port()) as base, sync_playwright() as pw:
        runtime = app.state.runtime
        with runtime.graph_lock:
            runtime.sim_clock.cluster.advance(300)
        runtime.sweep_now("test")
        jobs = [f.target for f in runtime.findings() if f.target_type == "job"]
        pending = runtime.deps.approvals.pending()[0]
        for f in runtime.latest.state["findings"]:  # the latest sweep suggests another size than the request's
            if f["kind"] == "oversized" and f["target"] == pending.target:
                f["metrics"]["suggested_nodes"] = int(f["metrics"]["suggested_nodes"]) + 1
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        errors: list[str] = []
        for lang, width, height in (("en", 1440, 900), ("zh", 390, 844)):
            page = browser.new_page(viewport={"width": width, "height": height})
            page.add_init_script(f"localStorage.setItem('steward.lang', '{lang}')")
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(base + "/#findings")
            row = page.locator(f"#findings-table tbody tr[data-target='{jobs[0]}']")
            spark = row.locator("td.spark-cell svg.sparkline")
            expect(spark).to_be_visible(timeout=20_000)
            assert int(spark.get_attribute("data-points") or 0) >= 2
            assert spark.locator("polyline.spark-max, circle.spark-max").count() >= 1
            box = spark.bounding_box()
            assert box is not None and box["width"] >= 60 and box["height"] >= 16
            expect(row.locator(".spark-note")).to_contain_text("平均" if lang == "zh" else "mean")
            assert page.locator("#findings-table svg.sparkline").count() == len(jobs)
            if width < 700:  # a card: the cell is labelled, and nothing scrolls sideways
                label = page.evaluate("getComputedStyle(document.querySelector('#findings-table td.spark-cell'), "
                                      "'::before').content")
                assert "GPU 利用率" in label
                assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.click("button[data-view=approvals]")
            card = page.locator(f".card[data-id='{pending.id}']")
            expect(card.locator(".size-note")).to_be_visible(timeout=20_000)
            expect(card.locator(".size")).to_contain_text("缩容到" if lang == "zh" else "Resize to")
            expect(card.locator(".size-note")).to_contain_text("批准将按本请求缩容" if lang == "zh"
                                                               else "Approving resizes to")
            page.close()
        browser.close()
    assert errors == []


def test_a_persons_words_stay_and_a_detectors_english_evidence_is_not_repeated_in_chinese():
    assert outcome_text("terminate", "denied_by_human", "", "今晚有批处理", "zh") == "今晚有批处理"
    assert outcome_text("notify", "executed", "", "2 GPUs at 0% util for 3h", "zh") == ""
    assert outcome_text("notify", "executed", "", "2 GPUs at 0% util for 3h", "en") == "2 GPUs at 0% util for 3h"
