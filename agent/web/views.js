// Approvals inbox and exemptions, findings table, savings and audit views.
import { download, getJSON, postJSON } from "./api.js";
import { barChart, sparkline, timeChart } from "./chart.js";
import { colon, lang, t, tv, untranslate } from "./i18n.js";
import { attr, esc, inline, markdown, money, shown, state, when, zone } from "./render.js";

const tbody = (id) => document.querySelector(`#${id} tbody`);

// Under ~700px a table shows as one card per row: each cell is labelled with its column's header.
export function labelCells(tableId) {
  const heads = [...document.querySelectorAll(`#${tableId} thead th`)].map((th) => th.textContent.trim());
  document.querySelectorAll(`#${tableId} tbody tr`).forEach((tr) => {
    [...tr.children].forEach((td, i) => { if (heads[i]) td.dataset.label = heads[i]; });
  });
}

// Cards answered on this page stay (with their result) until their close button is pressed.
const kept = new Map();

export async function loadApprovals() {
  const data = await getJSON(`/api/approvals?lang=${lang}`);
  const badge = document.getElementById("pending-badge");
  badge.hidden = data.pending.length === 0;
  badge.textContent = data.pending.length;
  const list = document.getElementById("pending-list");
  const shown = [...list.querySelectorAll(".card")].map((c) => c.dataset.id);
  const want = [...kept.keys(), ...data.pending.map((a) => a.id).filter((id) => !kept.has(id))];
  if (want.join() !== shown.join() || document.documentElement.lang !== list.dataset.lang) {
    list.replaceChildren();
    list.dataset.lang = document.documentElement.lang;
    for (const el of kept.values()) list.appendChild(el);
    for (const a of data.pending) if (!kept.has(a.id)) list.appendChild(approvalCard(a));
    if (!list.children.length) list.innerHTML = `<p class="empty">${esc(t("approvals.none"))}</p>`;
  }
  tbody("recent-table").innerHTML = data.recent.map((a) => `<tr>
    <td>${esc(tv("action", a.action))}</td><td class="mono">${esc(a.target)}</td><td>${esc(t("level"))}${a.level}</td>
    <td><span class="pill ${esc(a.status)}">${esc(tv("status", a.status))}</span></td><td>${esc(a.answered_by || "—")}</td>
    <td class="nowrap">${when(a.answered_at || a.expires_at)}</td><td>${esc(a.answer_reason || "—")}</td>
    <td>${a.outcome ? `<span class="pill ${esc(a.outcome)}">${esc(tv("status", a.outcome))}</span> <span class="muted outcome-detail">${esc(a.outcome_detail || "")}</span>` : "—"}</td></tr>`).join("")
    || `<tr><td colspan="8" class="empty">${esc(t("approvals.no_recent"))}</td></tr>`;
  labelCells("recent-table");
  await loadExemptions();
}

function contextLine(a) {
  const parts = [];
  if (a.owner) parts.push(`${t("col.owner")}${colon()}<strong>${esc(a.owner)}</strong>`);
  if (a.gpus != null) parts.push(`${a.gpus} GPU`);
  if (a.cost_per_hour != null) parts.push(`${money(a.cost_per_hour, a.currency)}${esc(t("approvals.per_hour"))}`);
  if (a.finding_kind) parts.push(`<span class="kind ${esc(a.finding_kind)}">${esc(tv("kind", a.finding_kind))}</span>`);
  return parts.join(" · ");
}

// A resize names the node count it is for; when the latest sweep suggests another (or none), the server says so.
function sizeLines(a) {
  if (a.target_nodes == null) return "";
  const size = `<p class="size">${esc(t("approvals.resize_to"))}${colon()}<strong>${a.target_nodes}</strong> ${esc(t("approvals.nodes"))}</p>`;
  return size + (a.size_note ? `<p class="size-note warn" role="note">${esc(a.size_note)}</p>` : "");
}

function approvalCard(a) {
  const ga = a.payload.guarded_action || {};
  const why = a.why || ga.decision?.reason || "";
  const proposalWhy = ga.proposal?.reason || "";
  const el = document.createElement("div");
  el.className = `card level-${a.level}`;
  el.dataset.id = a.id;
  el.innerHTML = `<div class="card-head"><span class="action">${esc(tv("action", a.action))}</span>
      <span class="mono target">${esc(a.target)}</span><span class="lvl">${esc(t("level"))}${a.level}</span></div>
    <div class="card-body"><p class="context">${contextLine(a)}</p>${sizeLines(a)}
      ${a.evidence ? `<p class="evidence">${inline(a.evidence)}</p>` : `<p>${inline(proposalWhy)}</p>`}
      <p class="muted">${esc(t("approvals.why"))}${colon()}${inline(why)}</p>
      <p class="muted">${esc(t("approvals.requested"))} ${when(a.requested_at)} ${zone()} · ${esc(t("approvals.expires"))} ${when(a.expires_at)} ${zone()} ·
        <a href="#findings" class="to-finding" data-target="${attr(a.target)}">${esc(t("approvals.see_finding"))}</a>
        ${a.metrics_url ? ` · <a class="metrics" href="${esc(a.metrics_url)}" target="_blank" rel="noopener">${esc(t("approvals.metrics"))}</a>` : ""}
        · <code>${esc(a.id)}</code></p></div>
    <div class="card-actions"><input class="reason" placeholder="${esc(t("approvals.reason"))}">
      <button class="approve">${esc(t("approvals.approve"))}</button><button class="deny">${esc(t("approvals.deny"))}</button></div>
    <div class="card-result" role="status"></div>`;
  const result = el.querySelector(".card-result");
  const send = async (decision) => {
    el.querySelectorAll(".card-actions button").forEach((b) => { b.disabled = true; });
    try {
      const r = await postJSON(`/api/approvals/${encodeURIComponent(a.id)}?lang=${lang}`, { decision, reason: el.querySelector(".reason").value });
      const ap = r.approval;
      const said = (o) => o.text ?? (lang === "en" ? o.detail || "" : "");
      const outcome = (r.outcomes || []).map((o) => `${tv("action", o.action)} ${o.target}${colon()}`
        + `${tv("status", o.status)}${said(o) ? (lang === "zh" ? `（${said(o)}）` : ` (${said(o)})`) : ""}`);
      result.className = `card-result ok ${ap.status}`;
      result.innerHTML = `<p class="verdict"><strong>${esc(tv("status", ap.status))}</strong> · ${esc(ap.answered_by || "")} · ${when(ap.answered_at)} ${zone()}`
        + `${ap.answer_reason ? ` · ${esc(ap.answer_reason)}` : ""}</p>`
        + (outcome.length ? `<ul>${outcome.map((o) => `<li>${esc(o)}</li>`).join("")}</ul>` : "")
        + `<details><summary>${esc(t("approvals.report"))}</summary>${markdown(r.report || "")}</details>`;
      el.classList.add("answered");
    } catch (err) {
      result.className = "card-result error";
      result.textContent = shown(err.message);
      el.querySelectorAll(".card-actions button").forEach((b) => { b.disabled = false; });
    }
    const close = document.createElement("button");
    close.type = "button";
    close.className = "dismiss";
    close.textContent = t("approvals.dismiss");
    close.addEventListener("click", () => { kept.delete(a.id); el.remove(); loadApprovals(); });
    if (el.classList.contains("answered")) { result.appendChild(close); kept.set(a.id, el); }
    loadApprovals();
  };
  el.querySelector(".approve").addEventListener("click", () => send("approve"));
  el.querySelector(".deny").addEventListener("click", () => send("deny"));
  return el;
}

async function loadExemptions() {
  const data = await getJSON("/api/exemptions");
  const body = tbody("exempt-table");
  body.innerHTML = data.exemptions.map((e) => `<tr data-target="${attr(e.target)}">
    <td class="mono">${esc(e.target)}</td><td class="nowrap">${when(e.data.until)} ${zone()}</td><td>${esc(e.data.by || "—")}</td>
    <td>${esc(e.reason || "")}</td><td class="nowrap">${when(e.at)}</td>
    <td><button type="button" class="revoke">${esc(t("exempt.revoke"))}</button></td></tr>`).join("")
    || `<tr><td colspan="6" class="empty">${esc(t("exempt.none"))}</td></tr>`;
  body.querySelectorAll("button.revoke").forEach((b) => b.addEventListener("click", async () => {
    const job = b.closest("tr").dataset.target;
    b.disabled = true;
    const note = document.getElementById("exempt-note");
    try {
      await postJSON("/api/exemptions/revoke", { job, reason: "" });
      note.className = "form-note ok";
      note.textContent = `${t("exempt.revoked")} ${shown(job)}`;
    } catch (err) {
      note.className = "form-note error";
      note.textContent = shown(err.message);
    }
    loadExemptions();
  }));
  labelCells("exempt-table");
}

export function bindExemptForm() {
  const form = document.getElementById("exempt-form");
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const note = document.getElementById("exempt-note");
    const body = Object.fromEntries(new FormData(form));
    try {
      const r = await postJSON(`/api/exemptions?lang=${lang}`, body);
      note.className = "form-note ok";
      note.textContent = `${shown(r.job)}${colon()}${t("exempt.done")} ${when(r.until)} ${zone()}`;
      loadExemptions();
    } catch (err) {
      note.className = "form-note error";
      note.textContent = shown(err.message);
    }
  });
  document.addEventListener("click", (e) => {
    const link = e.target.closest("a.to-finding");
    if (link) state.focusTarget = link.dataset.target;
  });
}

// What has happened to a finding's target since: stopped, stopping, exempt, warned with the stop's due time.
function findingState(f) {
  const pills = [];
  if (f.stopped_at) pills.push(["stopped", `${t("state.stopped")} ${when(f.stopped_at)}`]);
  else if (f.stopping_since) pills.push(["stopping", `${t("state.stopping")} ${when(f.stopping_since)}`]);
  if (f.exempt_until) pills.push(["exempt", `${t("state.exempt_until")} ${when(f.exempt_until)}`]);
  if (f.denied_until) pills.push(["denied", `${t("state.denied_until")} ${when(f.denied_until)}`]);
  if (f.warned_at && !f.stopped_at) {
    pills.push(["warned", `${t("state.warned")} ${when(f.warned_at)}`]);
    if (!f.stopping_since) pills.push(["due", `${t("state.stop_due")} ${when(f.stop_due_at)}`]);
  }
  if (f.advised_at && !f.warned_at && !f.stopped_at) pills.push(["advised", `${t("state.advised")} ${when(f.advised_at)}`]);
  if (f.approval_id) pills.push(["awaiting", t("state.awaiting")]);
  if (!pills.length) pills.push(["open", t("state.open")]);
  return pills.map(([cls, text]) => `<span class="pill ${cls}">${esc(text)}</span>`).join(" ");
}

// The findings table: the latest sweep's rows, filtered by namespace/team/owner/pool and sorted by a column.
const findingsView = { rows: [], sort: null, dir: 1 };  // no sort: the server's order (costliest first)

export async function loadFindings() {
  const data = await getJSON(`/api/findings?lang=${lang}`);
  document.getElementById("findings-at").textContent = data.at ? `${when(data.at)} ${zone()}` : "";
  let empty = t("findings.none");
  if (!data.run_id) empty = data.sweep_running ? t("findings.first_running") : t("findings.no_sweep");
  findingsView.rows = data.findings;
  findingsView.empty = empty;
  fillFilterValues();
  renderFindings();
}

function fillFilterValues() {
  const form = document.getElementById("findings-filter");
  const by = form.elements.by.value;
  const select = form.elements.value;
  const chosen = select.value;
  const values = [...new Set(findingsView.rows.map((f) => f[by]).filter(Boolean))].sort();
  select.innerHTML = `<option value="">${esc(t("filter.all"))}</option>`
    + values.map((v) => `<option value="${attr(v)}">${esc(v)}</option>`).join("");
  select.value = values.includes(chosen) ? chosen : "";
}

function renderFindings() {
  const form = document.getElementById("findings-filter");
  const by = form.elements.by.value;
  const value = form.elements.value.value;
  const { sort, dir } = findingsView;
  const rows = findingsView.rows.filter((f) => !value || f[by] === value).sort((a, b) => {
    if (!sort) return 0;
    const x = a[sort] ?? "";
    const y = b[sort] ?? "";
    return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir;
  });
  document.querySelectorAll("#findings-table thead th[data-sort]").forEach((th) => {
    th.classList.toggle("sorted", th.dataset.sort === sort);
    th.dataset.dir = th.dataset.sort === sort ? (dir > 0 ? "asc" : "desc") : "";
  });
  document.getElementById("findings-count").textContent = value ? `${rows.length}/${findingsView.rows.length} ${t("findings.shown")}` : "";
  tbody("findings-table").innerHTML = rows.length ? rows.map((f) => `<tr data-target="${attr(f.target)}">
    <td><span class="kind ${esc(f.kind)}">${esc(tv("kind", f.kind))}</span></td>
    <td class="mono">${esc(f.target)}${placement(f)}</td>
    <td>${esc(f.owner || "—")}</td><td class="num">${f.gpus}</td><td class="nowrap">${when(f.since)}</td>
    <td class="spark-cell">${utilCell(f.util)}</td>
    <td class="num">${f.waste_gpu_hours.toFixed(1)}</td><td class="num">${money(f.waste_cost, f.currency)}</td>
    <td class="state">${findingState(f)}</td>
    <td class="evidence">${inline(f.evidence)}${f.runbook ? ` ${inline(`[rb:${f.runbook}]`)}` : ""}${f.metrics_url
      ? ` <a class="metrics" href="${esc(f.metrics_url)}" target="_blank" rel="noopener">${esc(t("approvals.metrics"))}</a>` : ""}</td></tr>`).join("")
    : `<tr><td colspan="10" class="empty">${esc(findingsView.rows.length ? t("findings.none") : findingsView.empty)}</td></tr>`;
  labelCells("findings-table");
  if (state.focusTarget) {
    const row = [...document.querySelectorAll("#findings-table tbody tr")].find((r) => r.dataset.target === state.focusTarget);
    state.focusTarget = null;
    if (row) { row.classList.add("focus"); row.scrollIntoView({ block: "center" }); }
  }
}

// The sparkline of a finding's GPU utilisation over the detection window, with its peak and mean in words.
function utilCell(util) {
  if (!util || !util.max?.length) return `<span class="muted">—</span>`;
  const known = (xs) => xs.filter((v) => v !== null && v !== undefined);
  const peak = Math.max(...known(util.max), 0);
  const avgs = known(util.avg);
  const mean = avgs.length ? avgs.reduce((a, b) => a + b, 0) / avgs.length : 0;
  const pct = (v) => `${Math.round(v)}%`;
  const span = duration(util.step_s * util.max.length);
  const title = lang === "zh"
    ? `近 ${span} GPU 利用率：最高 ${pct(peak)}，平均 ${pct(mean)}`
    : `GPU utilisation over the last ${span}: max ${pct(peak)}, mean ${pct(mean)}`;
  const note = lang === "zh" ? `最高 ${pct(peak)} · 平均 ${pct(mean)}` : `max ${pct(peak)} · mean ${pct(mean)}`;
  return `<div>${sparkline(util, title)}<div class="muted spark-note">${esc(note)}</div></div>`;
}

function duration(seconds) {
  const h = Math.floor(seconds / 3600), m = Math.round((seconds % 3600) / 60);
  if (lang === "zh") return h ? `${h} 小时${m ? ` ${m} 分钟` : ""}` : `${m} 分钟`;
  return h ? `${h}h${m ? ` ${m}m` : ""}` : `${m}m`;
}

function placement(f) {
  const where = [f.team && f.team !== f.namespace ? f.team : null, f.pool].filter(Boolean);
  return where.length ? `<div class="muted placement">${esc(where.join(" · "))}</div>` : "";
}

export function bindFindings() {
  const form = document.getElementById("findings-filter");
  form.elements.by.addEventListener("change", () => { fillFilterValues(); renderFindings(); });
  form.elements.value.addEventListener("change", renderFindings);
  document.querySelectorAll("#findings-table thead th[data-sort]").forEach((th) => th.addEventListener("click", () => {
    findingsView.dir = findingsView.sort === th.dataset.sort ? -findingsView.dir : (th.classList.contains("num") ? -1 : 1);
    findingsView.sort = th.dataset.sort;
    renderFindings();
  }));
  document.querySelectorAll("button.export").forEach((b) => b.addEventListener("click", async () => {
    const q = new URLSearchParams({ format: b.dataset.format, lang });
    if (b.dataset.what === "audit") auditQuery(q);
    try {
      await download(`/api/${b.dataset.what}/export?${q}`, `steward-${b.dataset.what}.${b.dataset.format}`);
    } catch (err) {
      console.warn(err);
    }
  }));
}

export async function loadSavings() {
  const s = await getJSON("/api/savings");
  const waste = [...s.waste_by_team, ...(s.waste_by_pool || [])].reduce((sum, x) => sum + x.money, 0);
  document.getElementById("kpis").innerHTML = [
    [t("savings.gpu_hours"), s.reclaimed_gpu_hours.toFixed(1)], [t("savings.money"), money(s.reclaimed_money, s.currency)],
    [t("savings.actions"), s.actions], [t("savings.waste_now"), money(waste, s.currency)],
  ].map(([k, v]) => `<div class="kpi"><div class="kpi-value">${esc(v)}</div><div class="kpi-label">${esc(k)}</div></div>`).join("");
  const empty = t("savings.empty");
  timeChart(document.getElementById("chart-hours"), s.timeline, (p) => p.reclaimed_gpu_hours, (v) => `${+v.toFixed(1)}`,
    { empty, title: t("savings.hours_over_time"), cls: "hours" });
  timeChart(document.getElementById("chart-money"), s.timeline, (p) => p.reclaimed_money,
    (v) => money(v, s.currency).replace(/\.00$/, ""), { empty, title: t("savings.money_over_time"), cls: "money" });
  const unit = t("unit.gpu_hours");
  barChart(document.getElementById("chart-team"), s.waste_by_team.map((x) => ({ ...x, name: x.team })), s.currency,
    { empty: t("savings.no_waste"), title: t("savings.by_team"), unit });
  barChart(document.getElementById("chart-pool"), (s.waste_by_pool || []).map((x) => ({ ...x, name: x.pool })), s.currency,
    { empty: t("savings.no_waste"), title: t("savings.by_pool"), unit });
}

const audit = { offset: 0, limit: 50, next: null };

// The audit filter as the API takes it: a status or finding kind typed as the table shows it ("已执行", "空闲")
// is sent as its code.
function auditQuery(q) {
  const form = new FormData(document.getElementById("audit-filter"));
  for (const key of ["kind", "target", "status"]) {
    const value = String(form.get(key) || "").trim();
    if (value) q.set(key, key === "status" ? untranslate(["status", "kind"], value) : value);
  }
  return q;
}

export async function loadAudit() {
  const q = auditQuery(new URLSearchParams({ limit: audit.limit, offset: audit.offset, lang }));
  const page = await getJSON(`/api/audit?${q}`);
  audit.next = page.next_offset;
  tbody("audit-table").innerHTML = page.entries.map((e) => `<tr>
    <td class="num muted">${e.seq}</td><td class="nowrap">${when(e.at)}</td><td><span class="kind ${esc(e.kind)}">${esc(tv("akind", e.kind))}</span></td>
    <td>${esc(e.action ? tv("action", e.action) : "")}</td><td class="mono">${esc(e.target || "")}</td>
    <td>${esc(e.status ? tv(e.kind === "finding" ? "kind" : "status", e.status) : "")}</td>
    <td class="evidence">${inline((e.text || e.reason || "").split("\n")[0])}</td></tr>`).join("")
    || `<tr><td colspan="7" class="empty">${esc(t("audit.none"))}</td></tr>`;
  labelCells("audit-table");
}

export function bindAudit() {
  document.getElementById("audit-filter").addEventListener("submit", (e) => { e.preventDefault(); audit.offset = 0; loadAudit(); });
  document.getElementById("audit-prev").addEventListener("click", () => { audit.offset = Math.max(0, audit.offset - audit.limit); loadAudit(); });
  document.getElementById("audit-next").addEventListener("click", () => { if (audit.next !== null) { audit.offset = audit.next; loadAudit(); } });
}
