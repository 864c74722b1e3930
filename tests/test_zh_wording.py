"""Chinese wording a Chinese-speaking SRE found wrong walking the product: a late answer's refusal in English, the
audit log's untranslated kinds and misleading statuses ("被调度器拒绝" for a keep the steward did not take, "已批准豁免"
for an owner's own keep, "答复未受理 答复未受理"), times without their zone, the web UI's raw tool statuses and its
"豁免" where chat says "保留", and ASCII punctuation inside Chinese lines. English stays as it was."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agent.cli.main import main
from agent.graph.report import audit_heading, audit_status, audit_text, render_report
from agent.records.approvals import ApprovalError, ApprovalStore
from agent.records.audit import AuditLog
from tests.zh_text import leftovers

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 2, 18, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for name in ("STEWARD_BACKEND", "STEWARD_LANGUAGE", "STEWARD_DATABASE_URL", "STEWARD_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STEWARD_DISPLAY_TZ", "Asia/Shanghai")


def _store(tmp_path: Path) -> ApprovalStore:
    return ApprovalStore(str(tmp_path / "approvals.sqlite"), AuditLog(tmp_path / "audit.sqlite"))


def _request(store: ApprovalStore, now: datetime, key: str = "a", **payload: object) -> str:
    return store.request(proposal_key=f"resize_pool:a100-ondemand:{key}", target="a100-ondemand",
                         action="resize_pool", level=4, now=now, expire_after_s=3600, payload=dict(payload),
                         run_id="r1").id


# --- 1. a late answer is refused in the reader's language ------------------------------------------------------


def test_a_late_answer_carries_its_refusal_in_chinese_too(tmp_path):
    store = _store(tmp_path)
    approval_id = _request(store, T0)
    store.answer(approval_id, decision="deny", by="wecom:lead", reason="", now=T0 + timedelta(minutes=1), run_id="r")
    with pytest.raises(ApprovalError) as late:
        store.answer(approval_id, decision="approve", by="wecom:bob", reason="", now=T0 + timedelta(minutes=2),
                     run_id="r")
    assert str(late.value) == f"approval {approval_id} cannot be answered: already denied by wecom:lead"
    assert late.value.zh == f"审批请求 {approval_id} 无法再处理：已由 wecom:lead 拒绝"
    assert late.value.text("zh") == late.value.zh and late.value.text("en") == str(late.value)
    assert leftovers(late.value.zh) == []

    expired_id = _request(store, T0, key="b")
    with pytest.raises(ApprovalError) as expired:
        store.answer(expired_id, decision="approve", by="wecom:bob", reason="", now=T0 + timedelta(hours=2),
                     run_id="r")
    assert str(expired.value).endswith("cannot be answered: expired") and expired.value.zh.endswith("：已过期")
    with pytest.raises(ApprovalError) as unknown:
        store.answer("apr_nope", decision="approve", by="wecom:bob", reason="", now=T0, run_id="r")
    assert unknown.value.zh == "没有编号为 apr_nope 的审批请求" and "no approval with id" in str(unknown.value)
    assert ApprovalError("plain English").zh == "plain English"  # one raised without Chinese still reads


# --- 2. the audit log in Chinese --------------------------------------------------------------------------------


def _audit_log(tmp_path: Path) -> datetime:
    log = AuditLog(tmp_path / "audit.sqlite")
    at = datetime.now(UTC) - timedelta(hours=3)
    log.record("decision", at=at, run_id="chatops-wecom", target="ml/x", action="keep", status="refused",
               reason="Only alice (the owner) or an approver can keep ml/x.",
               data={"by": "wecom:bob", "reason_zh": "未受理保留：只有作业所有者 alice 或审批人可以保留 ml/x。"})
    log.record("exemption", at=at, run_id="chatops-wecom", target="ml/x", status="granted", reason="明天演示",
               data={"until": (at + timedelta(hours=4)).isoformat(), "by": "wecom:alice"})
    log.record("exemption", at=at, run_id="api", target="ml/x", status="revoked", reason="revoked by an approver",
               data={"until": at.isoformat(), "by": "lead", "revokes": [2]})
    log.record("approval", at=at, run_id="r", target="ml/y", action="terminate", level=2, status="refused_answer",
               reason="answer from wecom:bob refused: already denied by wecom:lead",
               data={"approval_id": "apr_1", "decision": "approve"})
    log.record("approval", at=at, run_id="chatops-dingtalk", target="ml/y", action="terminate", level=2,
               status="refused_answer", reason="approve through dingtalk refused: its callbacks do not sign the sender",
               data={"approval_id": "apr_1", "decision": "approve"})
    log.record("finding", at=at, run_id="r", target="a100-ondemand", status="oversized", reason="pool has 5 idle nodes",
               data={"kind": "oversized", "gpus": 0, "waste_gpu_hours": 3.2})
    log.record("usage", at=at, run_id="r", data={})
    log.record("report", at=at, run_id="r", status="sweep", reason="GPU Steward sweep at ...")
    log.record("execution", at=at, run_id="r", target="a100-ondemand", action="resize_pool", level=4,
               status="refused", reason="oversized", data={"detail": "refused: 配额不足"})
    log._conn.close()
    return at


def test_the_audit_log_in_chinese_names_keeps_kinds_and_zones(tmp_path, capsys):
    at = _audit_log(tmp_path)
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--lang", "zh", "--all"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 9
    stamp = f"{at.astimezone(ZoneInfo('Asia/Shanghai')):%Y-%m-%d %H:%M}（北京时间） "
    assert all(line.startswith(stamp) for line in lines), out  # the leading time names its zone
    body = [line.removeprefix(stamp) for line in lines]
    assert body[0].startswith("保留 ml/x 未受理  ")  # not the scheduler's refusal: the steward did not take it
    until = (at + timedelta(hours=4)).astimezone(ZoneInfo("Asia/Shanghai"))
    assert body[1] == f"保留 ml/x 已保留  保留至 {until:%Y-%m-%d %H:%M}（北京时间），由 wecom:alice 设置"
    assert body[2] == "保留 ml/x 已撤销  保留已撤销，由 lead 撤销"
    assert body[3] == "优雅停止 ml/y 答复未受理  wecom:bob 的答复未受理：该请求已由 wecom:lead 拒绝"
    assert body[4] == "优雅停止 ml/y 答复未受理  通过钉钉的批准未受理：钉钉回调不对发送者签名"
    assert body[5].startswith("发现 a100-ondemand 节点池过大  ")
    assert body[6:8] == ["用量记录", "巡检报告"]
    assert body[8] == "调整节点池 a100-ondemand 被拒绝  被拒绝（配额不足）"  # a pool backend, not the scheduler
    for wrong in ("被调度器拒绝", "已批准豁免", "豁免", "答复未受理  答复未受理", " UTC", "exemption", "finding"):
        assert wrong not in out, wrong
    assert leftovers(out, {"alice", "bob", "lead"}) == []


def test_the_audit_log_in_english_is_as_recorded_with_its_zone_named(tmp_path, capsys):
    at = _audit_log(tmp_path)
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--lang", "en", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    stamp = f"{at.astimezone(ZoneInfo('Asia/Shanghai')):%Y-%m-%d %H:%M} Asia/Shanghai "
    assert all(line.startswith(stamp) for line in lines)
    body = [line.removeprefix(stamp) for line in lines]
    assert body[0] == "keep ml/x refused  Only alice (the owner) or an approver can keep ml/x."
    assert body[1] == "exemption ml/x granted  明天演示"
    assert body[3] == "terminate ml/y refused_answer  answer from wecom:bob refused: already denied by wecom:lead"
    assert body[6:8] == ["usage", "report sweep  GPU Steward sweep at ..."]


def test_audit_statuses_by_entry_kind():
    assert audit_status("decision", "refused", "keep", "zh") == "未受理"
    assert audit_status("exemption", "granted", None, "zh") == "已保留"
    assert audit_status("exemption", "revoked", None, "zh") == "已撤销"
    assert audit_status("execution", "refused", "terminate", "zh") == "被调度器拒绝"
    assert audit_status("execution", "refused", "resize_pool", "zh") == "被拒绝"
    assert audit_status("decision", "deny", "terminate", "zh") == "护栏拒绝"
    assert audit_status("finding", "oversized", None, "zh") == "节点池过大"
    for kind, status in (("decision", "refused"), ("exemption", "granted"), ("finding", "oversized")):
        assert audit_status(kind, status, "keep", "en") == status
    assert audit_heading("report", "sweep", None, None, "zh") == "巡检报告"
    assert audit_heading("usage", None, None, None, "zh") == "用量记录"
    assert audit_heading("exemption", "granted", None, "ml/x", "en") == "exemption ml/x granted"
    text = audit_text("exemption", "granted", None, "ml/x", "r",
                      {"until": "2026-11-02T22:00:00+00:00", "by": "wecom:alice"}, "zh", ZoneInfo("Asia/Shanghai"))
    assert text == "保留至 2026-11-03 06:00（北京时间），由 wecom:alice 设置"
    assert audit_text("exemption", "granted", None, "ml/x", "r", {"until": "2026-11-02T22:00:00+00:00"}, "zh") == \
        "保留至 2026-11-02 22:00（UTC）"


# --- 5. punctuation in Chinese lines ----------------------------------------------------------------------------


def test_approvals_list_in_chinese_uses_chinese_punctuation(tmp_path, capsys):
    store = _store(tmp_path)
    now = datetime.now(UTC)
    pending_id = _request(store, now, guarded_action={"proposal": {"target_nodes": 3}})
    answered_id = _request(store, now - timedelta(minutes=5), key="b")
    store.answer(answered_id, decision="approve", by="wecom:lead", reason="夜间无人使用", now=now, run_id="r")
    assert main(["approvals", "list", "--data-dir", str(tmp_path), "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"{pending_id}  调整节点池 a100-ondemand → 3 个节点（级别 4），过期时间 \d{{4}}-\d\d-\d\d \d\d:\d\d（北京时间）",
                     out), out
    assert re.search(rf"{answered_id}  调整节点池 a100-ondemand：wecom:lead 于 \d{{4}}-\d\d-\d\d \d\d:\d\d（北京时间）批准，"
                     r"理由：夜间无人使用", out), out
    assert leftovers(out, {"lead"}) == []
    assert main(["approvals", "list", "--data-dir", str(tmp_path), "--lang", "en"]) == 0
    en = capsys.readouterr().out
    assert f"{pending_id}  resize_pool a100-ondemand -> 3 nodes (level 4), expires" in en
    assert f"{answered_id}  resize_pool a100-ondemand: approved" in en and "wecom:lead: 夜间无人使用" in en
    # A second answer from the shell is refused in Chinese, not "cannot be answered: already approved by …".
    assert main(["approvals", "deny", answered_id, "--data-dir", str(tmp_path), "--lang", "zh"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"错误：未受理：审批请求 {answered_id} 无法再处理：已由 wecom:lead 批准"


def test_a_resize_decision_line_in_the_chinese_report_uses_the_arrow():
    approval = {"proposal": {"action": "resize_pool", "target": "a100", "target_nodes": 2}, "id": "a",
                "decision": {"verdict": "needs_approval", "rule": "approval", "level": 4,
                             "reason": "resize_pool is level 4, above the automatic limit 2 for the global levels"}}

    class Deps:
        language, currency, _observations = "zh", "USD", {}

    text = render_report({"at": "2026-11-02T18:00:00+00:00", "decisions": [approval], "outcomes": []},
                         Deps())  # type: ignore[arg-type]
    assert "a100 → 2 个节点（级别 4）" in text and "->" not in text
    Deps.language = "en"
    assert "a100 -> 2 nodes (level 4)" in render_report(
        {"at": "2026-11-02T18:00:00+00:00", "decisions": [approval], "outcomes": []}, Deps())  # type: ignore[arg-type]


# --- 3 and 4. the web UI's Chinese labels -----------------------------------------------------------------------


def _words() -> tuple[str, str]:
    text = (ROOT / "agent/web/i18n.js").read_text(encoding="utf-8")
    en, zh = text.split("\n  zh: {", 1)
    return en, zh.split("\n  },", 1)[0]


def _label(section: str, key: str) -> str | None:
    match = re.search(rf'"{re.escape(key)}": "([^"]*)"', section)
    return match[1] if match else None


def test_every_tool_status_the_chat_shows_has_chinese():
    api = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "agent/api").glob("*.py"))
    statuses = set(re.findall(r'"status": (?:"\w+" if [^\n]* else )?"(\w+)"', api))
    statuses |= set(re.findall(r'"status": "(\w+)"', api))
    literal = re.search(r"status: Literal\[([^\]]*)\]", (ROOT / "tools/agent_tools.py").read_text(encoding="utf-8"))
    assert literal is not None
    statuses |= set(re.findall(r'"(\w+)"', literal[1]))
    assert {"no_data", "refused", "needs_approval"} <= statuses
    en, zh = _words()
    for status in statuses:
        label = _label(zh, f"tool.{status}")
        assert label and leftovers(label) == [], status
    assert _label(zh, "tool.no_data") == "无数据" and _label(zh, "tool.refused") == "未受理"
    assert _label(en, "tool.ok") == "ok" and _label(en, "tool.no_data") is None  # English shows the status as is
    chat = (ROOT / "agent/web/chat.js").read_text(encoding="utf-8")
    assert 'tv("tool", ev.status)' in chat  # the lookup the labels are read by


def test_the_web_ui_says_keep_in_chinese_and_names_who_set_it():
    en, zh = _words()
    assert "豁免" not in zh
    assert _label(zh, "exempt.submit") == "保留" and _label(zh, "exempt.title") == "保留作业"
    assert _label(zh, "akind.exemption") == "保留" and _label(zh, "status.granted") == "已保留"
    assert _label(zh, "col.set_by") == "设置人" and _label(zh, "col.by") != "审批人"
    assert _label(en, "exempt.submit") == "Exempt" and _label(en, "col.by") == "By" and _label(en, "col.set_by") == "By"


def test_a_warning_in_chinese_has_a_chinese_subject():
    """The e-mail (and chat) subject of a Chinese warning was English: `GPU Steward: <job>`."""
    from agent.config.policy import Policy
    from agent.graph.service import SweepService
    from agent.planning.policy_model import PolicyModel
    from agent.wiring import simulated_deps
    from evals.suite import SCENARIO_DIR
    from sim.scenario import load_scenario

    deps, cluster = simulated_deps(load_scenario(SCENARIO_DIR / "slurm-idle-job.yaml"), Policy(), PolicyModel(),
                                   language="zh")
    service = SweepService(deps)
    for minute in range(5, 181, 5):
        cluster.advance_to(minute * 60)
        service.sweep()
    sent = deps.notifier.sent  # type: ignore[attr-defined]
    assert sent and all(m.subject.startswith("GPU Steward：") for m in sent), [m.subject for m in sent]


def test_a_forced_stop_request_says_first_why_it_must_be_forced():
    """The web approval card showed the finding's idle evidence and "level 3 is above the automatic limit": the reason
    a stop must be forced (SIGTERM ignored through the grace period) was on no card, in either language."""
    from agent.graph.report import approval_why

    reason = "force_terminate of ml/x is level 3, above the automatic limit 2"
    en, zh = (approval_why("force_terminate", "approval", reason, lang) for lang in ("en", "zh"))
    assert en.startswith("it did not exit within the grace period after SIGTERM") and reason in en
    assert zh.startswith("作业收到优雅停止信号（SIGTERM）后") and "级别 3 高于自动执行上限 2" in zh
    assert approval_why("resize_pool", "approval", reason, "en") == reason
