// Two small SVG charts drawn by hand: cumulative reclaim over time, and waste by team as bars.
import { esc, hhmm, money } from "./render.js";

const NS = "http://www.w3.org/2000/svg";

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= v);
}

export function timeChart(el, points, currency, labels) {
  if (!points.length) { el.innerHTML = `<p class="empty">${esc(labels.empty)}</p>`; return; }
  const W = 560, H = 240, L = 48, R = 64, T = 16, B = 28;
  const t0 = Date.parse(points[0].at), t1 = Date.parse(points[points.length - 1].at) || t0 + 1;
  const hMax = niceMax(Math.max(...points.map((p) => p.reclaimed_gpu_hours)));
  const mMax = niceMax(Math.max(...points.map((p) => p.reclaimed_money)));
  const x = (p) => L + ((Date.parse(p.at) - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const yh = (v) => H - B - (v / hMax) * (H - T - B);
  const ym = (v) => H - B - (v / mMax) * (H - T - B);
  const line = (f) => points.map((p, i) => `${i ? "L" : "M"}${x(p).toFixed(1)},${f(p).toFixed(1)}`).join("");
  const area = `${line((p) => yh(p.reclaimed_gpu_hours))}L${x(points[points.length - 1]).toFixed(1)},${H - B}L${L},${H - B}Z`;
  const grid = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const y = H - B - f * (H - T - B);
    return `<line x1="${L}" x2="${W - R}" y1="${y}" y2="${y}" class="gridline"/>`
      + `<text x="${L - 6}" y="${y + 4}" class="axis" text-anchor="end">${+(f * hMax).toFixed(1)}</text>`
      + `<text x="${W - R + 6}" y="${y + 4}" class="axis money">${money(f * mMax, currency).replace(/\.00$/, "")}</text>`;
  }).join("");
  const ticks = [0, 0.5, 1].map((f) => {
    const p = points[Math.round(f * (points.length - 1))];
    return `<text x="${x(p)}" y="${H - 8}" class="axis" text-anchor="middle">${hhmm(p.at)}</text>`;
  }).join("");
  el.innerHTML = `<svg xmlns="${NS}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(labels.title)}">
    ${grid}${ticks}
    <path d="${area}" class="area-hours"/>
    <path d="${line((p) => yh(p.reclaimed_gpu_hours))}" class="line-hours"/>
    <path d="${line((p) => ym(p.reclaimed_money))}" class="line-money"/>
  </svg>
  <div class="legend"><span class="key hours"></span>${esc(labels.hours)}<span class="key money"></span>${esc(labels.money)}</div>`;
}

export function teamChart(el, teams, currency, labels) {
  if (!teams.length) { el.innerHTML = `<p class="empty">${esc(labels.empty)}</p>`; return; }
  const W = 560, row = 30, L = 150, R = 160, H = teams.length * row + 10;
  const max = Math.max(...teams.map((t) => t.money), 0.01);
  const bars = teams.map((t, i) => {
    const y = 6 + i * row, w = Math.max(2, (t.money / max) * (W - L - R));
    return `<text x="${L - 8}" y="${y + 17}" class="axis label" text-anchor="end">${esc(t.team)}</text>
      <rect x="${L}" y="${y + 4}" width="${w.toFixed(1)}" height="18" rx="3" class="bar"/>
      <text x="${L + w + 6}" y="${y + 17}" class="axis">${money(t.money, currency)} · ${t.gpu_hours.toFixed(1)} GPU-h</text>`;
  }).join("");
  el.innerHTML = `<svg xmlns="${NS}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(labels.title)}">${bars}</svg>`;
}
