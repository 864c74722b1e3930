"""The cost and savings report for people: a self-contained HTML page (inline SVG charts, no script, no CDN) and a
markdown digest short enough for a DingTalk or WeCom message, in English or Chinese. Numbers: agent/records/usage.py.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo

from agent.detectors.evidence import duration_zh, kind_label, zone_suffix
from agent.records.cost import money
from agent.records.usage import CostReport, CostRow, Suggestion
from core.durations import format_duration
from core.text import markdown_text

W = {
    "en": {
        "title": "GPU cost and savings", "period": "{since} to {until}{zone}, {sweeps} sweeps",
        "total": "GPU cost", "gpu_hours": "GPU-hours", "on_demand": "on-demand", "reserved": "reserved",
        "waste": "Waste found", "saved": "Saved by actions", "actions": "actions",
        "by_team": "Cost per team", "by_user": "Cost per user", "by_job": "Most expensive jobs", "by_pool": "Cost per pool",
        "capacity": "Pool capacity (every GPU, used or not)", "waste_kind": "Waste by kind",
        "savings_time": "Savings over the period (cumulative)", "queue": "Queue wait (jobs that started)",
        "suggestions": "Suggestions", "none": "none", "name": "name", "cost": "cost", "team": "team", "user": "user",
        "kind": "kind", "findings": "findings", "jobs": "jobs", "mean": "mean wait", "max": "longest wait",
        "job": "job", "digest": "GPU cost digest", "top": "Top teams",
        "footer": "Cost = GPU-hours x the pool's price; a job holds its GPUs from one sweep to the next. Savings: GPUs "
                  "executed stops and resizes freed, from then to the period's end (the audit log). Waste: what the "
                  "findings measured.",
        "s_overprovisioned": "{user}: {job} used {used} of {gpus} GPUs for {hours}: request {used}",
        "s_idle": "{user}: {job} held {gpus} GPUs idle for {hours}: stop it when done, and wait without GPUs",
        "s_zombie": "{user}: {job} held {gpus} GPUs with no progress for {hours}: check it for a hang and add a timeout",
        "s_doomed": "{user}: {job} kept failing the same way: fix the cause before resubmitting",
        "s_crash_loop": "{user}: {job} is a crash loop: fix the cause before resubmitting",
        "s_stuck_pending": "{user}: {job} could never be scheduled as asked: change its request",
        "credits": "Credits for reclaimed jobs",
        "credit_line": "{owner}: {stops} stop(s), {gpus} GPUs reclaimed, credit {gpu_hours} GPU-hours ({grant})",
        "c_priority": "priority +{bump}", "c_quota_grace": "quota grace",
        "credit_note": "recorded by the steward; the scheduler applies the grant (PriorityClass, QOS or quota)",
    },
    "zh": {
        "title": "GPU 成本与节省", "period": "{since} 至 {until}{zone}，共 {sweeps} 次巡检",
        "total": "GPU 成本", "gpu_hours": "GPU 小时", "on_demand": "按需", "reserved": "预留",
        "waste": "发现的浪费", "saved": "操作节省", "actions": "次操作",
        "by_team": "各团队成本", "by_user": "各用户成本", "by_job": "成本最高的作业", "by_pool": "各节点池成本",
        "capacity": "节点池容量（全部 GPU，无论是否使用）", "waste_kind": "按类型的浪费",
        "savings_time": "本期累计节省", "queue": "排队等待（已启动的作业）",
        "suggestions": "建议", "none": "无", "name": "名称", "cost": "成本", "team": "团队", "user": "用户",
        "kind": "类型", "findings": "发现数", "jobs": "作业数", "mean": "平均等待", "max": "最长等待",
        "job": "作业", "digest": "GPU 成本摘要", "top": "成本最高的团队",
        "footer": "成本 = GPU 小时 × 节点池单价；作业从一次巡检到下一次巡检占用其 GPU。节省：已执行的停止与缩容"
                  "释放的 GPU，从释放起算到本期结束（来自审计日志）。浪费：各项发现测得的数值。",
        "s_overprovisioned": "{user}：{job} 申请 {gpus} 块 GPU，{hours}内只用了 {used} 块：请申请 {used} 块",
        "s_idle": "{user}：{job} 占用 {gpus} 块 GPU 空闲了 {hours}：用完请及时停止，等待时不必占用 GPU",
        "s_zombie": "{user}：{job} 占用 {gpus} 块 GPU {hours}无进展：请检查是否卡死并设置超时",
        "s_doomed": "{user}：{job} 反复以同样方式失败：请先修复原因再重新提交",
        "s_crash_loop": "{user}：{job} 处于崩溃循环：请先修复原因再重新提交",
        "s_stuck_pending": "{user}：{job} 按当前申请永远无法调度：请修改申请",
        "credits": "被回收作业的资源补偿",
        "credit_line": "{owner}：{stops} 次停止，回收 {gpus} 块 GPU，补偿 {gpu_hours} GPU 小时（{grant}）",
        "c_priority": "优先级 +{bump}", "c_quota_grace": "配额宽限",
        "credit_note": "由 GPU Steward 记录；补偿由调度器按策略落实（PriorityClass、QOS 或配额）",
    },
}


def _w(lang: str) -> dict[str, str]:
    return W.get(lang, W["en"])


def _dur(seconds: float, lang: str) -> str:
    return duration_zh(seconds) if lang == "zh" else format_duration(seconds)


def _as_is(text: str) -> str:
    return text


def suggestion_text(s: Suggestion, lang: str, shown: Callable[[str], str] = _as_is) -> str:
    """`shown`: how the cluster's text (the user, the job) is written: markdown_text in a chat message."""
    text = _w(lang)[f"s_{s.kind}"].format(user=shown(s.user), job=shown(s.job), used=s.used, gpus=s.gpus,
                                          hours=_dur(s.hours * 3600.0, lang))
    return text.replace(" 1 GPUs", " 1 GPU") if lang == "en" else text


def credit_lines(r: CostReport, lang: str, shown: Callable[[str], str] = _as_is) -> list[str]:
    """One line per owner credited for jobs the steward stopped (policy `credit`)."""
    w = _w(lang)
    return [w["credit_line"].format(owner=shown(c.owner), stops=c.stops, gpus=c.gpus, gpu_hours=f"{c.gpu_hours:,.1f}",
                                    grant=w.get(f"c_{c.kind}", c.kind).format(bump=c.priority_bump))
            for c in r.credits]


def _bars(rows: list[tuple[str, float]], label: str, currency: str | None, width: int = 640) -> str:
    """A horizontal bar chart as inline SVG."""
    rows = [r for r in rows if r[1] > 0][:12]
    if not rows:
        return ""
    top = max(v for _, v in rows)
    bar_h, left, right = 22, 190, 110
    height = bar_h * len(rows) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(label)}" font-family="sans-serif" font-size="12">']
    for i, (name, value) in enumerate(rows):
        y = 5 + i * bar_h
        w = max(1.0, (width - left - right) * value / top)
        shown = money(value, currency) if currency else f"{value:,.1f}"
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{html.escape(name[:28])}</text>'
                     f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{bar_h - 6}" fill="#4c78a8"/>'
                     f'<text x="{left + w + 6:.1f}" y="{y + 15}">{html.escape(shown)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _line(points: list[tuple[datetime, float]], label: str, currency: str, width: int = 640, height: int = 180) -> str:
    """A cumulative line chart as inline SVG."""
    if len(points) < 2 or max(v for _, v in points) <= 0:
        return ""
    left, bottom, top_pad = 70, 25, 10
    t0, t1 = points[0][0], points[-1][0]
    span = max(1.0, (t1 - t0).total_seconds())
    top = max(v for _, v in points)

    def xy(t: datetime, v: float) -> str:
        x = left + (width - left - 10) * (t - t0).total_seconds() / span
        y = top_pad + (height - top_pad - bottom) * (1 - v / top)
        return f"{x:.1f},{y:.1f}"

    path = " ".join(xy(t, v) for t, v in points)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{html.escape(label)}" font-family="sans-serif" font-size="12">'
            f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" y2="{height - bottom}" stroke="#999"/>'
            f'<line x1="{left}" y1="{top_pad}" x2="{left}" y2="{height - bottom}" stroke="#999"/>'
            f'<polyline fill="none" stroke="#54a24b" stroke-width="2" points="{path}"/>'
            f'<text x="{left - 6}" y="{top_pad + 10}" text-anchor="end">{html.escape(money(top, currency))}</text>'
            f'<text x="{left - 6}" y="{height - bottom}" text-anchor="end">0</text>'
            f'<text x="{left}" y="{height - 8}">{t0:%m-%d %H:%M}</text>'
            f'<text x="{width - 10}" y="{height - 8}" text-anchor="end">{t1:%m-%d %H:%M}</text></svg>')


def _table(head: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return ""
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _cost_rows(rows: list[CostRow], r: CostReport, w: dict[str, str], extra: str = "") -> list[list[str]]:
    out = []
    for row in rows:
        first = [row.name] + ([getattr(row, extra)] if extra else [])
        out.append(first + [f"{row.gpu_hours:,.1f}", money(row.cost, r.currency), money(row.on_demand, r.currency),
                            money(row.reserved, r.currency)])
    return out


def _period(r: CostReport, lang: str, zone: tzinfo) -> str:
    """The report's span in the reader's zone (STEWARD_DISPLAY_TZ), the zone named."""
    return _w(lang)["period"].format(since=f"{r.since.astimezone(zone):%Y-%m-%d %H:%M}",
                                     until=f"{r.until.astimezone(zone):%Y-%m-%d %H:%M}",
                                     zone=zone_suffix(zone, lang), sweeps=r.sweeps)


def render_html(r: CostReport, lang: str = "en", zone: tzinfo = UTC) -> str:
    w = _w(lang)
    cur = r.currency
    lp, rp, semi, comma = _marks(lang)
    head = [w["name"], w["gpu_hours"], w["cost"], w["on_demand"], w["reserved"]]
    period = _period(r, lang, zone)
    sections = [
        f"<h1>{html.escape(w['title'])}</h1><p>{html.escape(period)}</p>",
        '<div class="cards">'
        f"<div><b>{money(r.cost, cur)}</b><br>{w['total']}{lp}{r.gpu_hours:,.1f} {w['gpu_hours']}{semi}"
        f"{w['on_demand']} {money(r.on_demand, cur)}{comma}{w['reserved']} {money(r.reserved, cur)}{rp}</div>"
        f"<div><b>{money(r.waste_cost, cur)}</b><br>{w['waste']}{lp}{r.waste_gpu_hours:,.1f} {w['gpu_hours']}{rp}</div>"
        f"<div><b>{money(r.saved_cost, cur)}</b><br>{w['saved']}{lp}{r.saved_gpu_hours:,.1f} {w['gpu_hours']}{comma}"
        f"{r.saving_actions} {w['actions']}{rp}</div></div>",
        f"<h2>{w['by_team']}</h2>" + _bars([(x.name, x.cost) for x in r.by_team], w["by_team"], cur)
        + _table(head, _cost_rows(r.by_team, r, w)),
        f"<h2>{w['waste_kind']}</h2>" + _bars([(kind_label(x.kind, lang), x.cost) for x in r.waste], w["waste_kind"], cur)
        + _table([w["kind"], w["findings"], w["gpu_hours"], w["cost"]],
                 [[kind_label(x.kind, lang), str(x.findings), f"{x.gpu_hours:,.1f}", money(x.cost, cur)] for x in r.waste]),
        f"<h2>{w['savings_time']}</h2>" + (_line(r.savings_timeline, w["savings_time"], cur) or f"<p>{w['none']}</p>"),
        f"<h2>{w['by_pool']}</h2>" + _table(head, _cost_rows(r.by_pool, r, w)),
        f"<h2>{w['capacity']}</h2>" + _table(head, _cost_rows(r.pool_capacity, r, w)),
        f"<h2>{w['by_user']}</h2>" + _bars([(x.name, x.cost) for x in r.by_user], w["by_user"], cur)
        + _table([w["name"], w["team"]] + head[1:], _cost_rows(r.by_user, r, w, "team")),
        f"<h2>{w['by_job']}</h2>" + _table([w["job"], w["user"]] + head[1:], _cost_rows(r.by_job[:20], r, w, "user")),
        f"<h2>{w['queue']}</h2>" + (_table([w["team"], w["jobs"], w["mean"], w["max"]],
                                           [[q.team, str(q.jobs), _dur(q.mean_wait_s, lang), _dur(q.max_wait_s, lang)]
                                            for q in r.queue]) or f"<p>{w['none']}</p>"),
        f"<h2>{w['suggestions']}</h2>" + ("<ul>" + "".join(f"<li>{html.escape(suggestion_text(s, lang))}</li>"
                                                          for s in r.suggestions) + "</ul>"
                                         if r.suggestions else f"<p>{w['none']}</p>"),
        *([f"<h2>{w['credits']}</h2><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in credit_lines(r, lang))
           + f"</ul><p class=\"note\">{html.escape(w['credit_note'])}</p>"] if r.credits else []),
        f"<p class=\"note\">{html.escape(w['footer'])}</p>",
    ]
    style = ("body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ddd;padding:3px 8px;"
             "text-align:left}th{background:#f4f4f4}.cards{display:flex;gap:1em}.cards div{border:1px solid #ddd;"
             "padding:.6em 1em;flex:1}.cards b{font-size:1.4em}.note{color:#666;font-size:.9em}")
    return (f'<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"><title>{html.escape(w["title"])}</title>'
            f"<style>{style}</style></head><body>{''.join(sections)}</body></html>\n")


def _marks(lang: str) -> tuple[str, str, str, str]:
    """Brackets, semicolon and comma as the language writes them (full-width in Chinese)."""
    return ("（", "）", "；", "，") if lang == "zh" else (" (", ")", "; ", ", ")


def render_markdown(r: CostReport, lang: str = "en", limit: int = 5, zone: tzinfo = UTC) -> str:
    """A digest for DingTalk / WeCom markdown messages: headline numbers, top teams, waste, suggestions. A team,
    user or job name is the cluster's text, written as text (markdown_text): never a link, a mention or a line."""
    w = _w(lang)
    cur = r.currency
    lp, rp, semi, comma = _marks(lang)
    sep = "：" if lang == "zh" else ": "
    lines = [f"### {w['digest']}",
             _period(r, lang, zone),
             "",
             f"- **{w['total']}**{sep}{money(r.cost, cur)}{lp}{r.gpu_hours:,.1f} {w['gpu_hours']}{semi}"
             f"{w['on_demand']} {money(r.on_demand, cur)}{comma}{w['reserved']} {money(r.reserved, cur)}{rp}",
             f"- **{w['waste']}**{sep}{money(r.waste_cost, cur)}{lp}{r.waste_gpu_hours:,.1f} {w['gpu_hours']}{rp}",
             f"- **{w['saved']}**{sep}{money(r.saved_cost, cur)}{lp}{r.saved_gpu_hours:,.1f} {w['gpu_hours']}{comma}"
             f"{r.saving_actions} {w['actions']}{rp}", ""]
    if r.by_team:
        lines.append(f"**{w['top']}**")
        lines += [f"- {markdown_text(t.name)}{sep}{money(t.cost, cur)}{lp}{t.gpu_hours:,.1f} {w['gpu_hours']}{rp}" for t in r.by_team[:limit]]
        lines.append("")
    if r.waste:
        lines.append(f"**{w['waste_kind']}**")
        lines += [f"- {kind_label(x.kind, lang)}{sep}{money(x.cost, cur)}"
                  + (f"（{x.findings} 项发现）" if lang == "zh" else f" ({x.findings} finding{'' if x.findings == 1 else 's'})")
                  for x in r.waste[:limit]]
        lines.append("")
    if r.queue:
        q = r.queue[0]
        lines += [f"**{w['queue']}**", f"- {markdown_text(q.team)}{sep}{w['max']} {_dur(q.max_wait_s, lang)}", ""]
    if r.suggestions:
        lines.append(f"**{w['suggestions']}**")
        lines += [f"- {suggestion_text(s, lang, markdown_text)}" for s in r.suggestions[:limit]]
        lines.append("")
    if r.credits:
        lines.append(f"**{w['credits']}**")
        lines += [f"- {x}" for x in credit_lines(r, lang, markdown_text)[:limit]]
    return "\n".join(lines).rstrip() + "\n"
