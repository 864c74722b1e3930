"""A finding's evidence in the reader's language: Chinese rendered from its numbers, English as the detector wrote it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from core.actions import Finding
from core.text import gigabytes
from core.zones import zone_name, zone_suffix

if TYPE_CHECKING:
    from agent.detectors.signals import JobWindow
    from core.observation import LogProgress

# Finding kinds as a Chinese-speaking on-call engineer names them.
KIND_ZH: dict[str, str] = {
    "idle": "空闲",
    "zombie": "僵尸",
    "overprovisioned": "超配",
    "node_health": "节点健康",
    "oversized": "节点池过大",
    "stuck_pending": "排队无法调度",
    "doomed": "注定失败",
    "crash_loop": "崩溃循环",
    "idle_serving": "推理服务空闲",
    "pool_scale_up": "节点池计划扩容",
    "quiet_fill": "低负载窗口填充",
}

XID_MEANINGS_ZH: dict[int, str] = {
    48: "双比特 ECC 错误",
    63: "ECC 页退役/行重映射事件",
    64: "ECC 页退役/行重映射失败",
    74: "NVLink 错误",
    79: "GPU 已从总线掉线",
    92: "单比特 ECC 错误率过高",
    94: "已隔离的 ECC 错误",
    95: "未隔离的 ECC 错误",
}

_GPU_PROBLEM = re.compile(r"^gpu(\d+)_(xid|temp_c)$")
_POOL_NAMES = re.compile(r"\(([^()]*)\); jobs hold")
Metrics = dict[str, float]

# The zone the Chinese evidence being rendered states its times in (describe's `zone`); the English evidence is
# the detector's own text, in UTC and saying so, as the audit log keeps it.
_ZONE: ContextVar[tzinfo] = ContextVar("evidence_zone", default=UTC)


def zh_time(epoch: float, date: bool = False) -> str:
    """A time in Chinese evidence, in the zone it is being rendered for, the zone named."""
    zone = _ZONE.get()
    return f"{datetime.fromtimestamp(epoch, zone):{'%Y-%m-%d %H:%M' if date else '%H:%M'}}{zone_suffix(zone, 'zh')}"


def zh_span(start: float, end: float) -> str:
    """A window of hours in Chinese evidence (14:00-19:00（北京时间）)."""
    zone = _ZONE.get()
    return (f"{datetime.fromtimestamp(start, zone):%H:%M}-{datetime.fromtimestamp(end, zone):%H:%M}"
            f"{zone_suffix(zone, 'zh')}")


@contextmanager
def _rendering_in(zone: tzinfo) -> Iterator[None]:
    token = _ZONE.set(zone)
    try:
        yield
    finally:
        _ZONE.reset(token)


def log_metrics(logs: LogProgress | None, at: datetime) -> Metrics:
    """A job's log progress as metrics numbers, for the detectors to keep on their findings."""
    if logs is None:
        return {"log_inspected": 0.0}
    out = {"log_inspected": 1.0, "log_lines": float(logs.lines)}
    if logs.last_progress_at is not None:
        out["log_progress_age_s"] = (at - logs.last_progress_at).total_seconds()
        if logs.last_step is not None:
            out["log_last_step"] = logs.last_step
    if logs.ended:
        out["log_ended"] = 1.0  # a failure line after the newest progress: the log protects nothing
    return out


def io_metrics(w: JobWindow) -> Metrics:
    """A window's CPU and I/O (what its io_summary prints) as metrics numbers."""
    pairs = {"cpu_pct": w.cpu_avg, "net_max_mbps": w.net_max, "disk_max_mbps": w.disk_max,
             "disk_write_max_mbps": w.disk_write_max}
    return {k: v for k, v in pairs.items() if v is not None}


def kind_label(kind: str, language: str) -> str:
    """`idle` -> 空闲 in Chinese; the kind itself otherwise."""
    return KIND_ZH.get(kind, kind) if language == "zh" else kind


def duration_zh(seconds: float) -> str:
    """45 秒, 20 分钟, 1 小时 5 分, 2 小时 (the Chinese twin of format_duration)."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} 秒"
    hours, minutes = divmod(seconds // 60, 60)
    if hours == 0:
        return f"{minutes} 分钟"
    return f"{hours} 小时 {minutes} 分" if minutes else f"{hours} 小时"


def _log(f: Finding, m: Metrics) -> str:
    if not m["log_inspected"]:
        return "未检查日志"
    ended = "，随后以失败告终" if m.get("log_ended") else ""
    if "log_progress_age_s" in m:
        last = f.detected_at - timedelta(seconds=m["log_progress_age_s"])
        step = f"（步数 {m['log_last_step']:g}）" if "log_last_step" in m else ""
        return f"日志自 {zh_time(last.timestamp())}起无进展{step}{ended}"
    if m["log_lines"]:
        return f"最近 {m['log_lines']:g} 行日志无进展{ended}"
    return "近期无日志输出"


def _io(m: Metrics) -> str:
    parts = []
    if "cpu_pct" in m:
        parts.append(f"CPU {m['cpu_pct']:.1f}%")
    if "net_max_mbps" in m:
        parts.append(f"网络接收最高 {m['net_max_mbps']:.1f} MB/s")
    write = m.get("disk_write_max_mbps")
    if write is not None and ("disk_max_mbps" not in m or write > m["disk_max_mbps"]):
        parts.append(f"磁盘写入最高 {write:.1f} MB/s")
    elif "disk_max_mbps" in m:
        parts.append(f"磁盘读取最高 {m['disk_max_mbps']:.1f} MB/s")
    return "，".join(parts) if parts else "无 CPU/IO 指标"


def _idle(f: Finding, m: Metrics) -> str:
    blip = f"，其间仅有零星活动（共 {m['blip_gpu_s']:.0f} GPU·秒）" if m.get("blip_gpu_s") else ""
    grace = (f"；按该作业自身的工作节奏仍在宽限期内，{zh_time(f.stop_after.timestamp(), date=True)}前不会停止"
             if f.stop_after is not None and "grace_left_s" in m else "")
    return (
        f"{f.gpus} 块 GPU 利用率最高 {m['util_max_pct']:.1f}%，已持续{'至少' if m.get('quiet_at_least') else ''} "
        f"{duration_zh(m['quiet_s'])}{blip}"
        f"（样本覆盖率 {m['coverage']:.0%}），占用显存 {gigabytes(m['mem_gb'])} GB；{_log(f, m)}；{_io(m)}{grace}"
    )


def _activity(m: Metrics) -> str:
    """The real-activity figures (agent/detectors/activity.py GpuActivity.summary) in Chinese."""
    shown = [f"{name}最高 {m[key]:.0%}" for name, key in (("SM 活跃度", "sm_active_max"), ("张量核心", "tensor_active_max"),
                                                          ("显存带宽活跃度", "dram_active_max")) if key in m]
    parts = ["、".join(shown) if shown else "无 DCGM 性能剖析指标"]
    if "power_max_w" in m:
        board = m.get("board_power_w")
        of = f"（额定 {board:.0f} W 的 {m['power_max_w'] / board:.0%}）" if board else "（额定功率未知）"
        parts.append(f"功耗最高 {m['power_max_w']:.0f} W{of}")
    links = [f"{name} 最高 {m[key]:.1f} MB/s" for name, key in (("NVLink", "nvlink_max_mbps"), ("PCIe", "pcie_max_mbps"))
             if key in m]
    if links:
        parts.append("、".join(links))
    return "；".join(parts)


def _signals_used(m: Metrics) -> str:
    used = ["日志进度", "网络/磁盘 I/O"]
    for key, name in (("used_profiling", "DCGM 性能剖析（SM/张量/显存活跃度）"), ("used_interconnect", "NVLink/PCIe 流量"),
                      ("used_power", "功耗")):
        if m.get(key):
            used.append(name)
    return "、".join(used)


def _zombie(f: Finding, m: Metrics) -> str:
    gap = f"，通常间隔 {duration_zh(m['log_gap_s'])}" if "log_gap_s" in m else ""
    never = "（自启动以来未见进展）" if m.get("never_progressed") else ""
    return (
        f"{f.gpus} 块 GPU 在 {duration_zh(m['window_s'])}内平均利用率最低 {m['util_min_pct']:.0f}%"
        f"（样本覆盖率 {m['coverage']:.0%}），但{_log(f, m)}{never}：已静默 {duration_zh(m['log_silent_s'])}{gap}；"
        f"{_io(m)}；{_activity(m)}；判断依据：{_signals_used(m)}；疑似卡死（例如 NCCL 集合通信挂起）"
    )


def _keepalive(f: Finding, m: Metrics) -> str:
    if m["keepalive_period_s"] <= m["keepalive_burst_s"]:
        shape = f"最近 {duration_zh(m['window_s'])}内每个时间片都有低而平稳的 GPU 活动"
    else:
        shape = (f"最近 {duration_zh(m['window_s'])}内有 {m['keepalive_bursts']:g} 次短暂的 GPU 活动，"
                 f"每 {duration_zh(m['keepalive_period_s'])}一次，每次最多 {duration_zh(m['keepalive_burst_s'])}")
    return (
        f"{f.gpus} 块 GPU 看似忙碌：{shape}；平均利用率 {m['util_avg_pct']:.1f}%（最高 {m['util_max_pct']:.1f}%，"
        f"样本覆盖率 {m['coverage']:.0%}），占用显存 {gigabytes(m['mem_gb'])} GB；{_log(f, m)}；{_io(m)}；{_activity(m)}："
        f"疑似保活脚本而非真实工作；停止需经人工批准"
    )


def _overprovisioned(f: Finding, m: Metrics) -> str:
    if m.get("off_gpu_work"):
        return (f"申请 {m['gpus_requested']:g} 块 GPU，{duration_zh(m['window_s'])}内一块都未使用（显存仅够 CUDA 上下文），"
                f"而作业在 GPU 之外工作（CPU、磁盘、网络或日志）：建议把这一阶段作为不申请 GPU 的作业运行，用到 GPU 时再申请")
    utils = [m[f"gpu_util_pct_{k}"] for k in range(int(m["gpus_requested"]))]
    return (
        f"申请 {m['gpus_requested']:g} 块 GPU，仅 {m['gpus_working']:g} 块在工作（平均或任一时间片利用率 ≥ {m['working_util_pct']:g}%），"
        f"统计时长 {duration_zh(m['window_s'])}（样本覆盖率 {m['coverage']:.0%}）；"
        f"各卡平均利用率 {'、'.join(f'{v:.0f}%' for v in utils)}；{f.gpus} 块 GPU 未使用"
        + (f"，其中 {m['gpus_untouched']:g} 块从未使用（作业回溯期内没有任何工作，显存仅够 CUDA 上下文：CUDA_VISIBLE_DEVICES "
           f"或 --nproc_per_node 漏掉了这些卡时就是这样）" if m.get("gpus_untouched") else "")
        + (f"，其中 {m['gpus_released']:g} 块先前工作过、现已释放显存（卡上的任务已结束：打包在一个作业里的单卡任务先后结束时就是这样；"
           f"改用作业数组运行，每个任务结束时即释放自己的 GPU）" if m.get("gpus_released") else "")
    )


def _node_health(f: Finding, m: Metrics) -> str:
    found = [(int(match[1]), match[2], value) for key, value in m.items() if (match := _GPU_PROBLEM.match(key))]
    if not found:
        raise KeyError("gpu<n>_xid / gpu<n>_temp_c")
    problems = []
    for gpu, what, value in sorted(found, key=lambda p: (p[0], p[1] != "xid")):
        if what == "xid":
            meaning = XID_MEANINGS_ZH.get(int(value), "硬件/驱动错误（参见 NVIDIA XID 目录）")
            problems.append(f"GPU {gpu} 出现 XID {value:g}（{meaning}）")
        else:
            problems.append(f"GPU {gpu} 温度 {value:.0f}°C（上限 {m['temp_limit_c']:g}°C）")
    return f"节点 {f.target}：" + "；".join(problems)


def _oversized(f: Finding, m: Metrics) -> str:
    names = _POOL_NAMES.search(f.evidence)
    listed = f"（{names.group(1).replace(', ', '、').replace(' ...', ' 等')}）" if names else ""
    return (
        f"按需节点池 {f.target}：{m['nodes']:g} 个节点中有 {m['empty_nodes']:g} 个已空置至少 "
        f"{duration_zh(m['empty_window_s'])}{listed}；作业占用 {m['used_gpus']:g}/{m['total_gpus']:g} 块 GPU；"
        f"保留 {m['reserve_fraction']:.0%} 余量、最少 {m['min_nodes']:g} 个节点 → 建议缩至 {m['suggested_nodes']:g} 个节点；"
        f"可释放 {f.gpus} 块 GPU（单价 {m['price_per_gpu_hour']:g} {f.currency}/GPU 小时）"
        + (_forecast_zh(f, m) if m.get("forecast") else
           f"；{zh_time(m['scale_up_at'])}扩容回 {m['scale_up_nodes']:g} 个节点"
           f"（时间窗结束前预留提前量；若排队作业找不到位置则提前）" if m.get("scale_up_at") else "")
    )


_FORECAST_MODEL = re.compile(r"; forecast \(([^,]+),")


def _forecast_zh(f: Finding, m: Metrics) -> str:
    model = _FORECAST_MODEL.search(f.evidence)
    return (
        f"；负载预测（{model.group(1) if model else '默认模型'}，{m['history_hours'] // 24:g} 天历史）：低负载窗口 "
        f"{zh_span(m['window_start'], m['window_end'])}（区间上界不超过 {m['low_threshold_gpus']:.1f} 块 GPU）；"
        f"{zh_time(m['scale_up_at'])}扩容回 {m['scale_up_nodes']:g} 个节点；节省 {m['saving_gpu_hours']:.1f} GPU 小时，"
        f"{m['saving']:.2f} {f.currency}；风险：回测中 {m['forecast_risk']:.1%} 的小时负载超过预测上界"
        f"（{m['backtest_origins']:g} 天）"
    )


_ZH: dict[str, Callable[[Finding, Metrics], str]] = {
    "idle": _idle,
    "zombie": _zombie,
    "overprovisioned": _overprovisioned,
    "node_health": _node_health,
    "oversized": _oversized,
}


def _stuck_pending(f: Finding, m: Metrics) -> str:
    from agent.detectors.queue import stuck_pending_zh

    return stuck_pending_zh(f)


def _idle_serving(f: Finding, m: Metrics) -> str:
    from agent.detectors.serving import serving_zh

    return serving_zh(f, _zombie(f, m) if m.get("serving_pinned") else _idle(f, m))


def _pool_plan(f: Finding, m: Metrics) -> str:
    from agent.detectors.pools import plan_zh

    return plan_zh(f)


def _doomed(f: Finding, m: Metrics) -> str:
    from agent.detectors.doomed import doomed_zh

    return doomed_zh(f)


_FAULT_NODE = re.compile(r"GPU \d+ of (\S+) reported XID")


def _fault_zh(f: Finding) -> str:
    """The GPU fault named_gpu_faults found under an idle or hung job, in Chinese ("" when none)."""
    m = f.metrics
    if "fault_xid" not in m:
        return ""
    xid = int(m["fault_xid"])
    node = _FAULT_NODE.search(f.evidence)
    meaning = XID_MEANINGS_ZH.get(xid, "硬件/驱动错误（参见 NVIDIA XID 目录）")
    return (f"；作业运行期间{'节点 ' + node.group(1) + ' 的' if node else ''} GPU {m['fault_gpu']:g} 于{zh_time(m['fault_at'])}出现 XID {xid}（{meaning}）：可能是 GPU 故障"
            "而非作业代码导致其停止工作，节点需要检查（运行手册 gpu-xid-errors）")


def _blocked(f: Finding) -> str:
    from agent.detectors.queue import blocked_zh

    return blocked_zh(f)


def with_doubt(finding: Finding, en: str, zh: str, *, in_evidence: str | None = None) -> Finding:
    """The finding with one more reason its stop needs a person, in English and Chinese (after any earlier one);
    `in_evidence`: also appended to the English evidence."""
    update: dict[str, Any] = {
        "stop_needs_approval": "; ".join(x for x in (finding.stop_needs_approval, en) if x),
        "stop_needs_approval_zh": "；".join(x for x in (finding.stop_needs_approval_zh, zh) if x),
    }
    if in_evidence:
        update["evidence"] = f"{finding.evidence}; {in_evidence}"
    return finding.model_copy(update=update)


def _doubt_zh(f: Finding) -> str:
    return f"；停止需人工批准：{f.stop_needs_approval_zh}" if f.stop_needs_approval_zh else ""


def describe(finding: Finding, language: str, zone: tzinfo = UTC) -> str:
    """The evidence in `language`; the detector's English whenever a number it needs is missing. Chinese evidence
    states its times in `zone` (the reader's: STEWARD_DISPLAY_TZ, or the team's for an owner's warning)."""
    if language != "zh":
        return localised(finding.evidence, finding.detected_at, zone)
    render = _ZH.get(finding.kind)
    if render is _idle and "keepalive_bursts" in finding.metrics:
        render = _keepalive
    if language == "zh" and finding.kind == "stuck_pending":
        render = _stuck_pending
    if language == "zh" and finding.kind in ("doomed", "crash_loop"):
        render = _doomed
    if language == "zh" and finding.kind == "idle_serving":
        render = _idle_serving
    if language == "zh" and finding.kind in ("pool_scale_up", "quiet_fill"):
        render = _pool_plan
    if render is None:
        return finding.evidence
    # The keep-alive text says its stop needs a person already; every other doubt is spelled out.
    doubt = "" if render is _keepalive else _doubt_zh(finding)
    try:
        with _rendering_in(zone):
            return render(finding, finding.metrics) + _fault_zh(finding) + doubt + _blocked(finding)
    except (KeyError, ValueError, TypeError, OverflowError):
        return finding.evidence


_UTC_TIME = re.compile(r"(\d{4}-\d{2}-\d{2} )?(\d{1,2}):(\d{2})(?:-(\d{1,2}):(\d{2}))? UTC\b")


def localised(text: str, anchor: datetime, zone: tzinfo) -> str:
    """A detector's English evidence with its UTC times ("14:30 UTC", "17:00-22:00 UTC", "2026-11-02 14:00 UTC")
    in the reader's zone, named. A time without a date is the one nearest the finding's detection."""
    if zone_name(zone) == "UTC":
        return text

    def moment(day: str | None, hour: str, minute: str) -> datetime:
        if day:
            return datetime.fromisoformat(f"{day.strip()}T{int(hour):02d}:{minute}+00:00")
        base = anchor.astimezone(UTC).replace(hour=int(hour), minute=int(minute), second=0, microsecond=0)
        return min((base + timedelta(days=d) for d in (-1, 0, 1)), key=lambda t: abs((t - anchor).total_seconds()))

    def local(m: re.Match[str]) -> str:
        start = moment(m.group(1), m.group(2), m.group(3)).astimezone(zone)
        text = f"{start:%Y-%m-%d %H:%M}" if m.group(1) else f"{start:%H:%M}"
        if m.group(4):
            text += f"-{moment(None, m.group(4), m.group(5)).astimezone(zone):%H:%M}"
        return f"{text} {zone_name(zone)}"

    return _UTC_TIME.sub(local, text)


def describe_record(record: dict[str, Any], language: str, zone: tzinfo = UTC) -> str:
    """describe() for a finding kept in graph state as a dict."""
    if language != "zh":
        text, at = str(record.get("evidence", "")), record.get("detected_at")
        try:
            anchor = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
        except ValueError:
            return text
        return localised(text, anchor if anchor.tzinfo else anchor.replace(tzinfo=UTC), zone)
    try:
        return describe(Finding.model_validate(record), language, zone)
    except ValidationError:
        return str(record.get("evidence", ""))
