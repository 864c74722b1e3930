"""Evidence in Chinese: every finding kind rendered from its numbers, English kept, and a safe fallback."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from agent.cli.main import main
from agent.config.policy import Policy
from agent.detectors.evidence import describe, describe_record, duration_zh
from agent.detectors.idle import IdleGpuDetector
from agent.detectors.node_health import NodeHealthDetector
from agent.detectors.overprovisioned import OverprovisionedDetector
from agent.detectors.pools import OversizedPoolDetector
from agent.detectors.zombie import ZombieDetector
from agent.planning.policy_model import warning_message
from core.actions import Finding
from tests.test_detectors import AT, POLICY, gpu, hung, io, job, job_gpus, observe, pool_obs, progress

# Words the English evidence is made of; none may survive in the Chinese rendering.
ENGLISH = re.compile(r"\b(util|for|coverage|holding|log|progress|since|step|busy|silent|usual|likely|hung|requested|"
                     r"working|unused|node|pool|empty|nodes|jobs|hold|keeping|reserve|could|released|net|disk|max)\b")


def _idle() -> Finding:
    obs = observe([job()], job_gpus("ml/train", [85.0] * 10 + [0.0] * 14), [io("ml/train", 24)],
                  {"ml/train": progress("ml/train", AT - timedelta(minutes=72))})
    [f] = IdleGpuDetector(POLICY).detect(obs)
    return f


def _zombie() -> Finding:
    [f] = ZombieDetector(POLICY).detect(hung(AT - timedelta(minutes=45)))
    return f


def _overprovisioned() -> Finding:
    gpus = [gpu("ml/train", [70.0] * 24, index=0)] + [gpu("ml/train", [0.0] * 24, index=i) for i in (1, 2, 3)]
    [f] = OverprovisionedDetector(POLICY).detect(observe([job()], gpus, [io("ml/train", 24, cpu=200.0)]))
    return f


def _node_health() -> Finding:
    gpus = [gpu(None, [0.0] * 12, index=0, xid_last=79, xid_at=AT - timedelta(minutes=5)),
            gpu(None, [0.0] * 12, index=1, temp_c_max=93.0)]
    [f] = NodeHealthDetector(POLICY).detect(observe([], gpus))
    return f


def _oversized() -> Finding:
    [f] = OversizedPoolDetector(POLICY).detect(pool_obs(4, nodes=8))
    return f


KINDS = {
    "idle": (_idle, ["4 块 GPU", "利用率最高 0.0%", "1 小时 10 分", "样本覆盖率 100%", "58 GB",
                     "日志自 10:48（UTC）起无进展（步数 1234）", "CPU 0.4%", "网络接收最高 0.0 MB/s"]),
    "zombie": (_zombie, ["4 块 GPU", "最低 100%", "日志自 11:15（UTC）起无进展", "已静默 45 分钟", "通常间隔 30 秒",
                         "CPU 0.5%", "疑似卡死"]),
    "overprovisioned": (_overprovisioned, ["申请 4 块 GPU", "仅 1 块在工作", "≥ 10%", "70%、0%、0%、0%",
                                           "3 块 GPU 未使用"]),
    "node_health": (_node_health, ["节点 n1", "GPU 0 出现 XID 79（GPU 已从总线掉线）", "GPU 1 温度 93°C（上限 90°C）"]),
    "oversized": (_oversized, ["按需节点池 a100", "8 个节点中有 4 个", "p-4、p-5、p-6、p-7", "建议缩至 5 个节点",
                               "可释放 24 块 GPU", "14 USD/GPU 小时"]),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_reads_in_chinese_with_its_numbers(kind):
    make, expected = KINDS[kind]
    f = make()
    assert f.kind == kind
    zh = describe(f, "zh")
    for part in expected:
        assert part in zh, (part, zh)
    assert not ENGLISH.search(zh), zh
    assert describe(f, "en") == f.evidence


def test_english_and_unknown_languages_are_the_detectors_own_words():
    f = _idle()
    assert describe(f, "en") == f.evidence and describe(f, "fr") == f.evidence
    assert describe_record(f.model_dump(mode="json"), "en") == f.evidence


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_missing_numbers_fall_back_to_the_english_evidence(kind):
    f = KINDS[kind][0]()
    assert describe(f.model_copy(update={"metrics": {}}), "zh") == f.evidence
    for key in f.metrics:  # dropping any one number never crashes
        assert describe(f.model_copy(update={"metrics": {k: v for k, v in f.metrics.items() if k != key}}), "zh")


def test_log_states_and_odd_numbers():
    f = _idle()
    assert "未检查日志" in describe(f.model_copy(update={"metrics": f.metrics | {"log_inspected": 0.0}}), "zh")
    no_progress = {k: v for k, v in f.metrics.items() if k not in ("log_progress_age_s", "log_last_step")}
    assert "最近 100 行日志无进展" in describe(f.model_copy(update={"metrics": no_progress}), "zh")
    assert "近期无日志输出" in describe(f.model_copy(update={"metrics": no_progress | {"log_lines": 0.0}}), "zh")
    assert describe(f.model_copy(update={"metrics": f.metrics | {"quiet_s": float("inf")}}), "zh") == f.evidence
    odd = Finding(kind="node_health", target="n9", target_type="node", since=AT, detected_at=AT, evidence="node n9: ?",
                  metrics={"gpu2_xid": 31.0, "affected_gpus": 1.0})
    assert describe(odd, "zh") == "节点 n9：GPU 2 出现 XID 31（硬件/驱动错误（参见 NVIDIA XID 目录））"
    assert describe_record({"kind": "nonsense", "evidence": "raw"}, "zh") == "raw"


def test_chinese_durations():
    assert [duration_zh(s) for s in (45, 1200, 3900, 7200)] == ["45 秒", "20 分钟", "1 小时 5 分", "2 小时"]


def test_zh_warning_carries_chinese_evidence():
    f = _idle().model_copy(update={"waste_gpu_hours": 4.7, "waste_cost": 9.4})
    text = warning_message(f, Policy(), AT, "zh")
    assert "原因：4 块 GPU 利用率最高 0.0%" in text and "util for" not in text and "宽限 5 分钟" in text
    # The English warning is the detector's evidence with its times in the team's zone (Beijing by default).
    en = warning_message(f, Policy(), AT, "en")
    assert f.evidence.replace("10:48 UTC", "18:48 Asia/Shanghai") in en and "UTC" not in en


def test_demo_sweep_in_chinese_warns_with_chinese_evidence(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("STEWARD_RUNBOOKS_ENABLED", "false")
    assert main(["sweep", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    warning = out[out.index("【GPU Steward】"):]
    reason = next(line for line in warning.splitlines() if "原因：" in line)
    assert "块 GPU" in reason and "样本覆盖率" in reason and "CPU" in reason
    assert "util for" not in reason and "coverage" not in reason and "holding" not in reason
    start = out.index("GPU Steward 巡检时间")
    report = out[start:out.index("规划器", start)]
    assert "各卡平均利用率" in report and "按需节点池 a100-ondemand" in report
    assert "requested" not in report and "on-demand pool" not in report and "GPU-h" not in report


def test_chat_answers_in_chinese_carry_chinese_evidence(tmp_path):
    from types import SimpleNamespace

    from agent.chatops.commands import findings_summary
    from tests.test_server_api import client_for, settings_for, sse_events, sweep_with_approval

    summary = findings_summary(SimpleNamespace(findings=lambda: [_idle(), _oversized()], deps=None), "zh")
    assert "- ml/train：空闲。4 块 GPU 利用率最高 0.0%" in summary and "- a100：节点池过大。按需节点池 a100" in summary
    assert "util for" not in summary and "on-demand pool" not in summary
    with client_for(settings_for(tmp_path)) as client:
        sweep_with_approval(client)
        zh = sse_events(client.post("/api/chat", json={"message": "谁在浪费 GPU？"}).text)[-1]["answer"]
    assert "节点池过大：按需节点池 a100-ondemand" in zh and "on-demand pool" not in zh


def test_english_evidence_reads_its_utc_times_in_the_readers_zone():
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    from agent.detectors.evidence import localised

    at = datetime(2026, 11, 2, 23, 30, tzinfo=UTC)
    text = "no log progress since 22:10 UTC; window 17:00-22:00 UTC; no stop before 2026-11-03 01:00 UTC"
    assert localised(text, at, UTC) == text
    assert localised(text, at, ZoneInfo("Asia/Shanghai")) == (
        "no log progress since 06:10 Asia/Shanghai; window 01:00-06:00 Asia/Shanghai; "
        "no stop before 2026-11-03 09:00 Asia/Shanghai")
    # A time without a date is the one nearest the detection: 00:20 UTC after a 23:30 detection is the next day's.
    assert localised("scale up at 00:20 UTC", at, ZoneInfo("Asia/Shanghai")) == "scale up at 08:20 Asia/Shanghai"


def test_why_a_stop_needs_a_person_reads_in_chinese():
    """The doubt an approver decides on (a spinning core, a sibling pod's busy CPU, a power reading where a spin and
    decoding overlap) is in the Chinese evidence too, not only the English."""
    from agent.detectors.engine import run_detectors
    from tests.test_gang import cluster

    stalled = {"ml/train": progress("ml/train", AT - timedelta(minutes=72))}
    [spin] = IdleGpuDetector(POLICY).detect(observe([job()], job_gpus("ml/train", [85.0] * 10 + [0.0] * 14),
                                                    [io("ml/train", 24, cpu=100.0)], stalled))
    zh = describe(spin, "zh")
    assert "停止需人工批准：只有 CPU 在忙（最高 100% 个核心）" in zh and "DataLoader" in zh
    assert not ENGLISH.search(zh.replace("DataLoader worker", ""))
    assert "deadlocked DataLoader" in describe(spin, "en") and spin.stop_needs_approval
    # A gang whose rank 0 shows nothing but a busy core, and a hung rank without a power reading.
    obs = cluster(100.0, master_log_at=AT - timedelta(hours=2))
    master = [g for g in obs.gpus if g.job == "llm/master-0"]
    obs.gpus[obs.gpus.index(master[0])] = gpu("llm/master-0", [0.0] * 24, node="n1", index=0)
    del obs.logs["llm/master-0"]
    obs = obs.model_copy(update={"io": [io("llm/master-0", 24, cpu=100.0) if i.job == "llm/master-0" else i
                                       for i in obs.io]})
    found = {f.target: describe(f, "zh") for f in run_detectors(obs, POLICY) if f.kind in ("idle", "zombie")}
    assert "llm/master-0 的进程 CPU 最高 100% 个核心" in found["llm/worker-1"]
    assert "没有 DCGM 性能剖析指标，也没有功耗读数" in found["llm/worker-0"]
