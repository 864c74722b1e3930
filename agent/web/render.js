// Safe text rendering: escape first, then a little markdown (bold, code, bullets) and runbook links.
export const state = { runbooksRoute: false };

export function esc(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

export function inline(text) {
  return esc(text)
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\[rb:([a-z0-9][a-z0-9._-]*)\]/gi, (_, id) => state.runbooksRoute
      ? `<a class="rb" href="/runbooks/${encodeURIComponent(id)}" target="_blank" rel="noopener">${id}</a>`
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

export function hhmm(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return `${String(d.getUTCHours()).padStart(2, "0")}:${String(d.getUTCMinutes()).padStart(2, "0")}`;
}

// Date and time (UTC) where a day may be crossed: "11-02 18:20"; the year only when it is not this one.
export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  const day = `${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
  const year = d.getUTCFullYear() === new Date().getUTCFullYear() ? "" : `${d.getUTCFullYear()}-`;
  return `${year}${day} ${hhmm(iso)}`;
}

export function money(amount, currency) {
  const symbol = { USD: "$", CNY: "¥", EUR: "€" }[currency] ?? "";
  return `${symbol}${Number(amount || 0).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}
