"""A self-contained HTML page for a trace replay: the table, reclaimed GPU-hours over time, timelines.

Inline SVG drawn here; no scripts, no fonts, no CDN.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np

from evals.replay import PolicyRun
from evals.replay_score import ACTIVE_PCT, Oracle, PolicyScore, is_false_kill
from evals.trace import Trace

COLOURS = ["#1b7837", "#d6604d", "#4393c3", "#8073ac", "#e08214"]
W, H, PAD = 760, 240, 46


def _x(t: float, duration: float) -> float:
    return PAD + (W - 2 * PAD) * (t / duration if duration else 0.0)


def _curves(trace: Trace, scores: list[PolicyScore]) -> str:
    top = max([v for s in scores for _, v in s.curve] + [1.0])
    parts = [f'<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="reclaimed GPU-hours">',
             f'<rect x="{PAD}" y="10" width="{W - 2 * PAD}" height="{H - PAD - 10}" fill="#fafafa" stroke="#ccc"/>']
    for i, s in enumerate(scores):
        pts = " ".join(f"{_x(t, trace.duration_s):.1f},{H - PAD - (H - PAD - 10) * v / top:.1f}" for t, v in s.curve)
        parts.append(f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="2" points="{pts}"/>')
        parts.append(f'<text x="{PAD + 8}" y="{28 + 16 * i}" font-size="12" fill="{COLOURS[i % len(COLOURS)]}">'
                     f'{escape(s.name)}: {s.reclaimed_gpu_hours:.1f} GPU-h</text>')
    for h in range(0, int(trace.duration_s // 3600) + 1, 4):
        parts.append(f'<text x="{_x(h * 3600, trace.duration_s):.1f}" y="{H - PAD + 16}" font-size="11" '
                     f'text-anchor="middle">{h}h</text>')
    parts.append(f'<text x="{PAD - 6}" y="16" font-size="11" text-anchor="end">{top:.0f}</text>'
                 f'<text x="{PAD - 6}" y="{H - PAD}" font-size="11" text-anchor="end">0</text></svg>')
    return "".join(parts)


def _timeline(trace: Trace, cid: str, runs: list[PolicyRun]) -> str:
    c = trace.containers[cid]
    h = 70 + 14 * len(runs)
    base = 60
    step = max(1, len(c.t) // 600)
    pts = " ".join(f"{_x(t, trace.duration_s):.1f},{base - 50 * (u if u == u else 0) / 100:.1f}"
                   for t, u in zip(c.t[::step], c.util[::step], strict=True))
    parts = [f'<svg width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" aria-label="container {escape(cid)}">',
             f'<rect x="{PAD}" y="10" width="{W - 2 * PAD}" height="50" fill="#fafafa" stroke="#ccc"/>',
             f'<polyline fill="none" stroke="#555" stroke-width="1" points="{pts}"/>',
             f'<text x="{PAD}" y="8" font-size="11">{escape(cid)} GPU util (0-100%)</text>']
    for i, run in enumerate(runs):
        y = base + 14 + 14 * i
        colour = COLOURS[i % len(COLOURS)]
        parts.append(f'<text x="{W - PAD + 4}" y="{y + 4}" font-size="10" fill="{colour}">{i + 1}</text>')
        for w_cid, at in run.warnings:
            if w_cid == cid:
                parts.append(f'<path d="M{_x(at, trace.duration_s):.1f},{y - 5} l4,8 h-8 z" fill="{colour}">'
                             f'<title>{escape(run.name)}: warning at {at / 3600:.2f} h</title></path>')
        for s_cid, at in run.stops:
            if s_cid != cid:
                continue
            x = _x(at, trace.duration_s)
            parts.append(f'<rect x="{x - 4:.1f}" y="{y - 4}" width="8" height="8" fill="{colour}">'
                         f'<title>{escape(run.name)}: stop at {at / 3600:.2f} h</title></rect>')
            if is_false_kill(c, at):
                later = c.t[(c.t > at) & (c.util > ACTIVE_PCT)]
                for t in later[:: max(1, len(later) // 40)]:
                    parts.append(f'<circle cx="{_x(t, trace.duration_s):.1f}" cy="{y}" r="2" fill="red">'
                                 f'<title>activity after the stop: false kill</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _pick(trace: Trace, runs: list[PolicyRun], limit: int = 5) -> list[str]:
    picked: list[str] = []
    for run in runs:  # the agent's stops first, then each baseline's false kills
        for cid, at in run.stops:
            wanted = run is runs[0] or is_false_kill(trace.containers[cid], at)
            if wanted and cid not in picked and len([p for p in picked if p]) < limit:
                picked.append(cid)
                break
    for cid in trace.containers:
        if len(picked) >= limit:
            break
        if cid not in picked and len(trace.containers[cid].t) > 100:
            picked.append(cid)
    return picked[:limit]


def write_html(path: Path, trace: Trace, best: Oracle, scores: list[PolicyScore], runs: list[PolicyRun]) -> None:
    rows = "".join(
        f"<tr><td><span style='color:{COLOURS[i % len(COLOURS)]}'>&#9632;</span> {i + 1}. {escape(s.name)}</td>"
        f"<td>{s.reclaimed_gpu_hours:.1f}</td><td>{s.share_of_oracle:.1%}</td><td>{s.false_kills}</td>"
        f"<td>{s.notifications}</td><td>{'-' if s.median_to_warning_s is None else f'{s.median_to_warning_s / 60:.0f}'}"
        f"</td><td>{'-' if s.median_to_stop_s is None else f'{s.median_to_stop_s / 60:.0f}'}</td></tr>"
        for i, s in enumerate(scores))
    timelines = "".join(f"<div>{_timeline(trace, cid, runs)}</div>" for cid in _pick(trace, runs))
    busy = float(np.mean(np.concatenate([c.util for c in trace.containers.values()]) > ACTIVE_PCT))
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>GPU Steward trace replay</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:820px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}</style></head><body>
<h1>Trace replay</h1>
<p>{escape(trace.path)}: {len(trace.containers)} containers, {trace.rows} samples every {trace.interval_s:.0f} s over
{trace.duration_s / 3600:.1f} h; {busy:.0%} of samples show GPU activity.</p>
<p>Oracle (final idle tails): {best.total:.1f} GPU-h = {best.cut_off_gpu_hours:.1f} cut off by the trace end
({best.cut_off_tails} tails) + {best.ended_gpu_hours:.1f} before containers really ended ({best.ended_tails} tails).
A false kill is a stop after which the container shows util &gt; {ACTIVE_PCT:g}% again.</p>
<table><tr><th>policy</th><th>reclaimed GPU-h</th><th>of oracle</th><th>false kills</th><th>notifications</th>
<th>median to warning (min)</th><th>median to stop (min)</th></tr>{rows}</table>
<h2>Reclaimed GPU-hours over time</h2>{_curves(trace, scores)}
<h2>Container timelines</h2>
<p>Grey: GPU utilisation. Per policy row (numbered as in the table): triangles are warnings, squares are stops,
red dots are GPU activity after a stop (a false kill).</p>{timelines}
</body></html>"""
    Path(path).write_text(page, encoding="utf-8")
