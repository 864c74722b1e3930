"""Self-contained HTML pages for a trace replay (the table, reclaimed GPU-hours over time, timelines) and for
its frontier (reclaimed GPU-hours against material false kills, per policy family).

Inline SVG drawn here; no scripts, no fonts, no CDN.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np

from evals.replay import PolicyRun
from evals.replay_frontier import FAMILIES, Frontier, FrontierPoint
from evals.replay_score import ACTIVE_PCT, MATERIAL_WORK_GPU_S, Oracle, PolicyScore, judge_stop
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
            verdict = judge_stop(trace, cid, at)
            if verdict.strict:
                later = c.t[(c.t > at) & (c.util > ACTIVE_PCT)]
                colour, what = ("red", "material") if verdict.material else ("orange", "strict-only")
                for t in later[:: max(1, len(later) // 40)]:
                    parts.append(f'<circle cx="{_x(t, trace.duration_s):.1f}" cy="{y}" r="2" fill="{colour}">'
                                 f'<title>activity after the stop: {what} false kill '
                                 f'({verdict.later_work_gpu_s:.0f} GPU-s of later work)</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _pick(trace: Trace, runs: list[PolicyRun], limit: int = 5) -> list[str]:
    picked: list[str] = []
    for run in runs:  # the agent's stops first, then each baseline's false kills
        for cid, at in run.stops:
            wanted = run is runs[0] or judge_stop(trace, cid, at).strict
            if wanted and cid not in picked and len([p for p in picked if p]) < limit:
                picked.append(cid)
                break
    for cid in trace.containers:
        if len(picked) >= limit:
            break
        if cid not in picked and len(trace.containers[cid].t) > 100:
            picked.append(cid)
    return picked[:limit]


def write_html(path: Path, trace: Trace, best: Oracle, strict: Oracle, scores: list[PolicyScore],
               runs: list[PolicyRun]) -> None:
    rows = "".join(
        f"<tr><td><span style='color:{COLOURS[i % len(COLOURS)]}'>&#9632;</span> {i + 1}. {escape(s.name)}</td>"
        f"<td>{s.reclaimed_gpu_hours:.1f}</td><td>{s.share_of_oracle:.1%}</td><td>{s.material_false_kills}</td>"
        f"<td>{s.strict_false_kills}</td><td>{s.reclaimed_strict_gpu_hours:.1f}</td>"
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
<p>{_definitions(best, strict)}</p>
<table><tr><th>policy</th><th>reclaimed GPU-h</th><th>of oracle</th><th>material false kills</th>
<th>strict false kills</th><th>reclaimed GPU-h, strict</th><th>notifications</th>
<th>median to warning (min)</th><th>median to stop (min)</th></tr>{rows}</table>
<h2>Reclaimed GPU-hours over time</h2>{_curves(trace, scores)}
<h2>Container timelines</h2>
<p>Grey: GPU utilisation. Per policy row (numbered as in the table): triangles are warnings, squares are stops,
red dots are GPU activity after a stop that lost real work (a material false kill), orange dots activity
after a stop that lost less than {MATERIAL_WORK_GPU_S:g} GPU-s (strict only).</p>{timelines}
</body></html>"""
    Path(path).write_text(page, encoding="utf-8")


def _definitions(best: Oracle, strict: Oracle) -> str:
    return (f"A stop is a <b>material false kill</b> when the container later does at least {MATERIAL_WORK_GPU_S:g} "
            f"GPU-seconds of work (sum of util/100 x sample interval); it reclaims nothing. A <b>strict</b> false kill "
            f"is any later util &gt; {ACTIVE_PCT:g}%; a strict-only one reclaims its tail less the work it lost. "
            f"Oracle (final idle tails): {best.total:.1f} GPU-h after the last material work "
            f"({best.cut_off_gpu_hours:.1f} cut off by the trace end in {best.cut_off_tails} tails + "
            f"{best.ended_gpu_hours:.1f} before containers really ended in {best.ended_tails}); {strict.total:.1f} GPU-h "
            f"after the last non-zero sample ({strict.cut_off_gpu_hours:.1f} + {strict.ended_gpu_hours:.1f}).")


FAMILY_COLOURS = {"agent": "#1b7837", "naive": "#d6604d", "zero": "#4393c3", "jds": "#8073ac"}
FAMILY_NAMES = {"agent": "agent (policy knobs)", "naive": "naive: avg < N% over W -> stop",
                "zero": "all 0% for N -> stop", "jds": "JDS-style: all 0% W -> warn, W + 1 h -> cancel"}
PW, PH, PL, PB = 760, 380, 56, 44  # plot size, left and bottom margins
LEGEND_H = 56  # below the plot: two rows of families and a note


def _marker(family: str, cx: float, cy: float, fill: str, colour: str, title: str = "") -> str:
    """A shape per family, so points that coincide stay visible: agent circle, naive square, zero diamond, JDS
    triangle."""
    tip = f"<title>{escape(title)}</title>" if title else ""
    style = f'fill="{fill}" stroke="{colour}" stroke-width="1.5"'
    if family == "naive":
        return f'<rect x="{cx - 4:.1f}" y="{cy - 4:.1f}" width="8" height="8" {style}>{tip}</rect>'
    if family == "zero":
        return f'<path d="M{cx:.1f},{cy - 6:.1f} l6,6 l-6,6 l-6,-6 z" {style}>{tip}</path>'
    if family == "jds":
        return f'<path d="M{cx:.1f},{cy - 4:.1f} l4,7 h-8 z" {style}>{tip}</path>'
    return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4.5" {style}>{tip}</circle>'


def frontier_svg(frontier: Frontier, *, standalone: bool = False) -> str:
    """Reclaimed GPU-hours (y) against material false kills (x, on a log(1 + n) scale), each family's Pareto
    frontier as a staircase, the agent's default point circled, the material oracle dashed. `standalone`: an .svg
    file of its own (with the SVG namespace), else inline in a page."""
    points = frontier.points
    top_fk = max([p.score.material_false_kills for p in points] + [1])
    top_h = max([p.score.reclaimed_gpu_hours for p in points] + [frontier.material.total, 1.0]) * 1.05
    span = np.log1p(top_fk)

    def x(fk: float) -> float:
        return PL + (PW - PL - 16) * float(np.log1p(fk)) / span

    def y(h: float) -> float:
        return PH - PB - (PH - PB - 12) * h / top_h

    xmlns = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    height = PH + LEGEND_H
    parts = [f'<svg{xmlns} width="{PW}" height="{height}" viewBox="0 0 {PW} {height}" '
             f'role="img" aria-label="reclaimed GPU-hours against material false kills" font-family="sans-serif">',
             f'<rect x="0" y="0" width="{PW}" height="{height}" fill="white"/>',
             f'<rect x="{PL}" y="12" width="{PW - PL - 16}" height="{PH - PB - 12}" fill="#fafafa" stroke="#ccc"/>']
    ticks = [t for t in (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= top_fk]
    for t in ticks:
        parts.append(f'<line x1="{x(t):.1f}" y1="12" x2="{x(t):.1f}" y2="{PH - PB}" stroke="#eee"/>'
                     f'<text x="{x(t):.1f}" y="{PH - PB + 15}" font-size="11" text-anchor="middle">{t}</text>')
    step = max(1, int(top_h // 6 // 5 * 5) or 1)
    for h in range(0, int(top_h) + 1, step):
        parts.append(f'<line x1="{PL}" y1="{y(h):.1f}" x2="{PW - 16}" y2="{y(h):.1f}" stroke="#eee"/>'
                     f'<text x="{PL - 6}" y="{y(h) + 4:.1f}" font-size="11" text-anchor="end">{h}</text>')
    parts.append(f'<text x="{(PL + PW) / 2:.0f}" y="{PH - 8}" font-size="12" text-anchor="middle">material false '
                 f'kills (log scale)</text><text x="14" y="{(PH - PB) / 2:.0f}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(PH - PB) / 2:.0f})">reclaimed GPU-hours</text>')
    oy = y(frontier.material.total)
    parts.append(f'<line x1="{PL}" y1="{oy:.1f}" x2="{PW - 16}" y2="{oy:.1f}" stroke="#888" stroke-dasharray="5,4"/>'
                 f'<text x="{PW - 20}" y="{oy - 4:.1f}" font-size="11" text-anchor="end" fill="#555">oracle '
                 f'{frontier.material.total:.1f} GPU-h</text>')
    for i, family in enumerate(FAMILIES):
        members = frontier.family(family)
        if not members:
            continue
        colour = FAMILY_COLOURS[family]
        front = sorted((p for p in members if p.on_frontier), key=lambda p: p.score.material_false_kills)
        stairs: list[str] = []
        for k, p in enumerate(front):
            px, py = x(p.score.material_false_kills), y(p.score.reclaimed_gpu_hours)
            if k:
                stairs.append(f"{px:.1f},{y(front[k - 1].score.reclaimed_gpu_hours):.1f}")
            stairs.append(f"{px:.1f},{py:.1f}")
        if front:
            stairs.append(f"{PW - 16:.1f},{y(front[-1].score.reclaimed_gpu_hours):.1f}")
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" stroke-opacity="0.7" '
                     f'points="{" ".join(stairs)}"/>')
        for p in members:
            s = p.score
            tip = (f"{FAMILY_NAMES[family]}: {p.knobs}: {s.reclaimed_gpu_hours:.1f} GPU-h, {s.material_false_kills} "
                   f"material / {s.strict_false_kills} strict false kills")
            fill = colour if p.on_frontier else "white"
            parts.append(_marker(family, x(s.material_false_kills), y(s.reclaimed_gpu_hours), fill, colour, tip))
        lx, ly = PL + (i % 2) * 340, PH + 4 + 18 * (i // 2)
        parts.append(_marker(family, lx + 6, ly, colour, colour) + f'<text x="{lx + 16}" y="{ly + 4}" font-size="12" '
                     f'fill="{colour}">{escape(FAMILY_NAMES[family])}</text>')
    d = frontier.verdict().default.score
    dx, dy = x(d.material_false_kills), y(d.reclaimed_gpu_hours)
    parts.append(f'<circle cx="{dx:.1f}" cy="{dy:.1f}" r="9" fill="none" stroke="black" stroke-width="2"/>'
                 f'<text x="{dx + 12:.1f}" y="{dy - 8:.1f}" font-size="12" font-weight="bold">agent default: '
                 f'{d.reclaimed_gpu_hours:.1f} GPU-h, {d.material_false_kills} material false kills</text>')
    parts.append(f'<text x="{PL}" y="{PH + 44}" font-size="11" fill="#555">filled: on its '
                 f'family\'s Pareto frontier (staircase); hollow: beaten by another point of its family</text></svg>')
    return "".join(parts)


def verdict_text(frontier: Frontier) -> str:
    v = frontier.verdict()
    d = v.default.score
    best = v.best_baseline
    head = (f"The agent's default reclaims {d.reclaimed_gpu_hours:.1f} GPU-h with {d.material_false_kills} material "
            f"false kills")
    if best is None:
        rival = "no baseline point has as few material false kills"
    else:
        rival = (f"the best baseline point with at most {d.material_false_kills} material false kills is "
                 f"{FAMILY_NAMES[best.family]} ({best.knobs}): {best.score.reclaimed_gpu_hours:.1f} GPU-h, "
                 f"{best.score.material_false_kills} material false kills")
    where = "on or above every baseline's frontier" if v.on_or_above else "BELOW the baselines' frontier"
    zero = "" if v.zero_material_false_kills else "; it is not free of material false kills"
    return f"{head}: {where} ({rival}){zero}. Verdict: {'PASS' if v.passed else 'FAIL'}."


def _point_row(p: FrontierPoint) -> str:
    s = p.score
    knobs = f"<b>{escape(p.knobs)}</b>" if p.default else escape(p.knobs)
    return (f"<tr><td><span style='color:{FAMILY_COLOURS[p.family]}'>&#9679;</span> {escape(p.family)}</td>"
            f"<td>{knobs}</td><td>{s.reclaimed_gpu_hours:.1f}</td><td>{s.share_of_oracle:.1%}</td>"
            f"<td>{s.material_false_kills}</td><td>{s.strict_false_kills}</td><td>{s.reclaimed_strict_gpu_hours:.1f}</td>"
            f"<td>{s.stops}</td><td>{s.notifications}</td><td>{'yes' if p.on_frontier else ''}</td></tr>")


def write_frontier_html(path: Path, trace: Trace, frontier: Frontier) -> None:
    v = frontier.verdict()
    runs = [v.default.run] + ([v.best_baseline.run] if v.best_baseline is not None else [])
    stopped_by_agent = {cid for cid, _ in v.default.run.stops}
    gap = [cid for cid, _ in runs[-1].stops if cid not in stopped_by_agent][:6]  # what the best rival took and we did not
    timelines = "".join(f"<div>{_timeline(trace, cid, runs)}</div>" for cid in gap)
    rows = "".join(_point_row(p) for p in frontier.points)
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>GPU Steward replay frontier</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:820px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:nth-child(-n+2){{text-align:left}}</style></head><body>
<h1>Trace replay frontier</h1>
<p>{escape(trace.path)}: {len(trace.containers)} containers, {trace.rows} samples every {trace.interval_s:.0f} s over
{trace.duration_s / 3600:.1f} h.</p>
<p>{_definitions(frontier.material, frontier.strict)}</p>
<p><b>{escape(verdict_text(frontier))}</b></p>
{frontier_svg(frontier)}
<h2>Every point</h2>
<table><tr><th>family</th><th>knobs</th><th>reclaimed GPU-h</th><th>of oracle</th><th>material false kills</th>
<th>strict false kills</th><th>reclaimed GPU-h, strict</th><th>stops</th><th>warnings</th><th>on frontier</th></tr>
{rows}</table>
<h2>What the best rival stopped and the default did not</h2>
<p>Row 1: the agent's default; row 2: the best baseline point named above. Triangles are warnings, squares stops,
red dots GPU activity after a stop that lost real work, orange dots activity after a strict-only stop.</p>{timelines}
</body></html>"""
    Path(path).write_text(page, encoding="utf-8")


def write_frontier_svg(path: Path, frontier: Frontier) -> None:
    Path(path).write_text(frontier_svg(frontier, standalone=True) + "\n", encoding="utf-8")
