// Approvals inbox, findings table, savings and audit views.
import { getJSON, postJSON } from "./api.js";
import { teamChart, timeChart } from "./chart.js";
import { t } from "./i18n.js";
import { esc, hhmm, inline, money } from "./render.js";

const tbody = (id) => document.querySelector(`#${id} tbody`);

export async function loadApprovals() {
  const data = await getJSON("/api/approvals");
  const badge = document.getElementById("pending-badge");
  badge.hidden = data.pending.length === 0;
  badge.textContent = data.pending.length;
  const list = document.getElementById("pending-list");
  const open = new Set([...list.querySelectorAll(".card")].map((c) => c.dataset.id));
  const ids = data.pending.map((a) => a.id);
  if (ids.length !== open.size || ids.some((id) => !open.has(id))) {
    list.innerHTML = ids.length ? "" : `<p class="empty">${esc(t("approvals.none"))}</p>`;
    for (const a of data.pending) list.appendChild(approvalCard(a));
  }
  tbody("recent-table").innerHTML = data.recent.map((a) => `<tr>
    <td>${esc(a.action)}</td><td class="mono">${esc(a.target)}</td><td>${a.level}</td>
    <td><span class="pill ${esc(a.status)}">${esc(a.status)}</span></td><td>${esc(a.answered_by || "—")}</td>
    <td>${hhmm(a.answered_at)}</td></tr>`).join("");
}

function approvalCard(a) {
  const ga = a.payload.guarded_action || {};
  const why = ga.decision?.reason || "";
  const proposalWhy = ga.proposal?.reason || "";
  const el = document.createElement("div");
  el.className = `card level-${a.level}`;
  el.dataset.id = a.id;
  el.innerHTML = `<div class="card-head"><span class="action">${esc(a.action)}</span>
      <span class="mono target">${esc(a.target)}</span><span class="lvl">L${a.level}</span></div>
    <div class="card-body"><p>${inline(proposalWhy)}</p><p class="muted">${esc(t("approvals.why"))}: ${inline(why)}</p>
      <p class="muted">${esc(t("approvals.requested"))} ${hhmm(a.requested_at)} UTC · ${esc(t("approvals.expires"))} ${hhmm(a.expires_at)} UTC · <code>${esc(a.id)}</code></p></div>
    <div class="card-actions"><input class="reason" placeholder="${esc(t("approvals.reason"))}">
      <button class="approve">${esc(t("approvals.approve"))}</button><button class="deny">${esc(t("approvals.deny"))}</button></div>
    <div class="card-result"></div>`;
  const result = el.querySelector(".card-result");
  const send = async (decision) => {
    el.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    try {
      const r = await postJSON(`/api/approvals/${encodeURIComponent(a.id)}`, { decision, reason: el.querySelector(".reason").value });
      result.className = "card-result ok";
      result.textContent = r.report;
      el.classList.add("answered");
    } catch (err) {
      result.className = "card-result error";
      result.textContent = err.message;
    }
    setTimeout(loadApprovals, 2500);
  };
  el.querySelector(".approve").addEventListener("click", () => send("approve"));
  el.querySelector(".deny").addEventListener("click", () => send("deny"));
  return el;
}

export function bindExemptForm() {
  const form = document.getElementById("exempt-form");
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const note = document.getElementById("exempt-note");
    const body = Object.fromEntries(new FormData(form));
    try {
      const r = await postJSON("/api/exemptions", body);
      note.className = "form-note ok";
      note.textContent = `${t("exempt.done")} ${hhmm(r.until)} UTC`;
    } catch (err) {
      note.className = "form-note error";
      note.textContent = err.message;
    }
  });
}

export async function loadFindings() {
  const data = await getJSON("/api/findings");
  document.getElementById("findings-at").textContent = data.at ? `${hhmm(data.at)} UTC` : "";
  tbody("findings-table").innerHTML = data.findings.length ? data.findings.map((f) => `<tr>
    <td><span class="kind ${esc(f.kind)}">${esc(f.kind)}</span></td><td class="mono">${esc(f.target)}</td>
    <td>${esc(f.owner || "—")}</td><td class="num">${f.gpus}</td><td>${hhmm(f.since)}</td>
    <td class="num">${f.waste_gpu_hours.toFixed(1)}</td><td class="num">${money(f.waste_cost, f.currency)}</td>
    <td class="evidence">${inline(f.evidence)}${f.runbook ? ` ${inline(`[rb:${f.runbook}]`)}` : ""}</td></tr>`).join("")
    : `<tr><td colspan="8" class="empty">${esc(t("findings.none"))}</td></tr>`;
}

export async function loadSavings() {
  const s = await getJSON("/api/savings");
  const waste = s.waste_by_team.reduce((sum, x) => sum + x.money, 0);
  document.getElementById("kpis").innerHTML = [
    [t("savings.gpu_hours"), s.reclaimed_gpu_hours.toFixed(1)], [t("savings.money"), money(s.reclaimed_money, s.currency)],
    [t("savings.actions"), s.actions], [t("savings.waste_now"), money(waste, s.currency)],
  ].map(([k, v]) => `<div class="kpi"><div class="kpi-value">${esc(v)}</div><div class="kpi-label">${esc(k)}</div></div>`).join("");
  const labels = { empty: t("savings.empty"), hours: t("savings.gpu_hours"), money: t("savings.money"), title: t("savings.over_time") };
  timeChart(document.getElementById("chart-time"), s.timeline, s.currency, labels);
  teamChart(document.getElementById("chart-team"), s.waste_by_team, s.currency, { ...labels, title: t("savings.by_team") });
}

const audit = { offset: 0, limit: 50, next: null };

export async function loadAudit() {
  const form = new FormData(document.getElementById("audit-filter"));
  const q = new URLSearchParams({ limit: audit.limit, offset: audit.offset });
  for (const key of ["kind", "target", "status"]) if (form.get(key)) q.set(key, form.get(key));
  const page = await getJSON(`/api/audit?${q}`);
  audit.next = page.next_offset;
  tbody("audit-table").innerHTML = page.entries.map((e) => `<tr>
    <td class="num muted">${e.seq}</td><td>${hhmm(e.at)}</td><td><span class="kind ${esc(e.kind)}">${esc(e.kind)}</span></td>
    <td>${esc(e.action || "")}</td><td class="mono">${esc(e.target || "")}</td><td>${esc(e.status || "")}</td>
    <td class="evidence">${inline((e.reason || "").split("\n")[0])}</td></tr>`).join("");
}

export function bindAudit() {
  document.getElementById("audit-filter").addEventListener("submit", (e) => { e.preventDefault(); audit.offset = 0; loadAudit(); });
  document.getElementById("audit-prev").addEventListener("click", () => { audit.offset = Math.max(0, audit.offset - audit.limit); loadAudit(); });
  document.getElementById("audit-next").addEventListener("click", () => { if (audit.next !== null) { audit.offset = audit.next; loadAudit(); } });
}
