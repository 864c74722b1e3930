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
