// Safe text rendering: escape first, then a little markdown (bold, code, bullets) and runbook links.
import { lang } from "./i18n.js";

export const state = { runbooksRoute: false, tz: "UTC" };

// Text from the cluster or a model (a Slurm job's name holds anything) may carry characters that show nothing
// themselves but change how the text around them reads: bidirectional overrides and isolates (U+202A-202E,
// U+2066-2069), direction marks, zero-width and other format characters (Unicode Cf), controls, line and paragraph
// separators. shown() writes each as its escape (\u202e), as the terminal and the chat do (core.text.one_line), so
// "gpu/\u202egnivres-dorp" cannot read as "gpu/prod-serving". Line breaks and tabs are kept.
const HIDDEN = /[\0-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\p{Cf}]/gu;

export function shown(text) {
  return String(text ?? "").replace(HIDDEN, (c) => {
    const code = c.codePointAt(0);
    if (code < 0x100) return `\\x${code.toString(16).padStart(2, "0")}`;
    return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

// HTML-escaped as is: for an attribute the page reads back and sends (a data-target, an option's value).
export function attr(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// Text as the page shows it: hidden characters written as escapes (shown), then HTML-escaped.
export function esc(text) {
  return attr(shown(text));
}

export function inline(text) {
  return esc(text)
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\[rb:([a-z0-9][a-z0-9._-]*)\]/gi, (_, id) => state.runbooksRoute
      ? `<a class="rb" href="/runbooks/${encodeURIComponent(id)}?lang=${lang}" target="_blank" rel="noopener">${id}</a>`
      : `<span class="rb">${id}</span>`);
}

export function markdown(text) {
  const out = [];
  let list = false;
  for (const line of String(text).split("\n")) {
    if (line.startsWith("- ")) {
      if (!list) { out.push("<ul>"); list = true; }
      out.push(`<li>${inline(line.slice(2))}</li>`);
    } else {
      if (list) { out.push("</ul>"); list = false; }
      if (line.trim()) out.push(`<p>${inline(line)}</p>`);
    }
  }
  if (list) out.push("</ul>");
  return out.join("");
}

// Times show in the configured display time zone (STEWARD_DISPLAY_TZ, default UTC), named after each time.
const formats = new Map();
function parts(iso) {
  const tz = state.tz || "UTC";
  if (!formats.has(tz)) {
    formats.set(tz, new Intl.DateTimeFormat("en-GB", { timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", hourCycle: "h23" }));
  }
  return Object.fromEntries(formats.get(tz).formatToParts(new Date(iso)).map((p) => [p.type, p.value]));
}

export function zone() {
  return state.tz || "UTC";
}

export function hhmm(iso) {
  if (!iso) return "";
  const p = parts(iso);
  return `${p.hour}:${p.minute}`;
}

// Date and time where a day may be crossed: "11-02 18:20"; the year only when it is not this one.
export function when(iso) {
  if (!iso) return "";
  const p = parts(iso);
  const year = p.year === parts(new Date().toISOString()).year ? "" : `${p.year}-`;
  return `${year}${p.month}-${p.day} ${p.hour}:${p.minute}`;
}

export function money(amount, currency) {
  const symbol = { USD: "$", CNY: "¥", EUR: "€" }[currency] ?? "";
  return `${symbol}${Number(amount || 0).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}
