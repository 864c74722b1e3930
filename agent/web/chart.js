// Small SVG charts drawn by hand, one unit per chart: a cumulative line over time, and horizontal bars.
import { esc, hhmm, money } from "./render.js";

const NS = "http://www.w3.org/2000/svg";

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= v);
}

// points: [{at, ...}]; value(p) -> number; fmt(v) -> axis text. One y-axis, in one unit.
export function timeChart(el, points, value, fmt, labels) {
  if (!points.length) { el.innerHTML = `<p class="empty">${esc(labels.empty)}</p>`; return; }
  const W = 560, H = 220, L = 56, R = 16, T = 14, B = 28;
  const t0 = Date.parse(points[0].at), t1 = Date.parse(points[points.length - 1].at) || t0 + 1;
  const max = niceMax(Math.max(...points.map(value)));
  const x = (p) => L + ((Date.parse(p.at) - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (v) => H - B - (v / max) * (H - T - B);
  const line = points.map((p, i) => `${i ? "L" : "M"}${x(p).toFixed(1)},${y(value(p)).toFixed(1)}`).join("");
  const area = `${line}L${x(points[points.length - 1]).toFixed(1)},${H - B}L${L},${H - B}Z`;
  const grid = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const gy = H - B - f * (H - T - B);
    return `<line x1="${L}" x2="${W - R}" y1="${gy}" y2="${gy}" class="gridline"/>`
      + `<text x="${L - 6}" y="${gy + 4}" class="axis" text-anchor="end">${esc(fmt(f * max))}</text>`;
  }).join("");
  const ticks = [0, 0.5, 1].map((f) => {
    const p = points[Math.round(f * (points.length - 1))];
    const anchor = f === 0 ? "start" : f === 1 ? "end" : "middle";
    return `<text x="${x(p)}" y="${H - 8}" class="axis" text-anchor="${anchor}">${hhmm(p.at)}</text>`;
  }).join("");
  el.innerHTML = `<svg xmlns="${NS}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(labels.title)}">
    ${grid}${ticks}<path d="${area}" class="area ${labels.cls}"/><path d="${line}" class="line ${labels.cls}"/></svg>`;
}

// rows: [{name, money, gpu_hours}] as horizontal bars of money, GPU-hours in the label.
export function barChart(el, rows, currency, labels) {
  if (!rows.length) { el.innerHTML = `<p class="empty">${esc(labels.empty)}</p>`; return; }
  const W = 560, row = 30, L = 160, R = 150, H = rows.length * row + 10;
  const max = Math.max(...rows.map((r) => r.money), 0.01);
  const bars = rows.map((r, i) => {
    const y = 6 + i * row, w = Math.max(2, (r.money / max) * (W - L - R));
    return `<text x="${L - 8}" y="${y + 17}" class="axis label" text-anchor="end">${esc(r.name)}</text>
      <rect x="${L}" y="${y + 4}" width="${w.toFixed(1)}" height="18" rx="3" class="bar"/>
      <text x="${L + w + 6}" y="${y + 17}" class="axis">${money(r.money, currency)} · ${r.gpu_hours.toFixed(1)} ${esc(labels.unit)}</text>`;
  }).join("");
  el.innerHTML = `<svg xmlns="${NS}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(labels.title)}">${bars}</svg>`;
}

// A finding's GPU utilisation over the detection window (0-100 %): the mean over its GPUs as a filled area, the
// busiest GPU as a line. A point without a reading (null) is a gap, never drawn as quiet. util: {step_s, end, max, avg}.
export function sparkline(util, title) {
  if (!util || !util.max || !util.max.length) return "";
  const W = 96, H = 24, n = util.max.length;
  const x = (i) => (n === 1 ? W / 2 : (i / (n - 1)) * W);
  const y = (v) => H - 1 - (Math.min(100, Math.max(0, v)) / 100) * (H - 2);
  const runs = (values) => {
    const out = [];
    let run = [];
    values.forEach((v, i) => {
      if (v === null || v === undefined) { if (run.length) out.push(run); run = []; } else run.push([x(i), y(v)]);
    });
    if (run.length) out.push(run);
    return out;
  };
  const pts = (run) => run.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(" ");
  const area = runs(util.avg).map((run) => `<polygon class="spark-avg" points="${run[0][0].toFixed(1)},${H} ${pts(run)} `
    + `${run[run.length - 1][0].toFixed(1)},${H}"/>`).join("");
  const line = runs(util.max).map((run) => (run.length === 1
    ? `<circle class="spark-max" cx="${run[0][0].toFixed(1)}" cy="${run[0][1].toFixed(1)}" r="1.2"/>`
    : `<polyline class="spark-max" points="${pts(run)}"/>`)).join("");
  return `<svg class="sparkline" xmlns="${NS}" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img"
    aria-label="${esc(title)}" data-points="${n}"><title>${esc(title)}</title>
    <line class="spark-base" x1="0" x2="${W}" y1="${H - 0.5}" y2="${H - 0.5}"/>${area}${line}</svg>`;
}
