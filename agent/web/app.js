// Entry point: tabs, language toggle, polling of the current view and the cluster clock.
import { followSSE, getHealth, postJSON } from "./api.js";
import { ask, renderSuggestions } from "./chat.js";
import { adoptServerLang, applyLabels, setZoneLabel, t, toggleLang } from "./i18n.js";
import { hhmm, shown, state, when, zone } from "./render.js";
import { bindAudit, bindExemptForm, bindFindings, loadApprovals, loadAudit, loadFindings, loadSavings } from "./views.js";

const loaders = { chat: null, approvals: loadApprovals, findings: loadFindings, savings: loadSavings, audit: loadAudit };
let current = "chat";

function show(view) {
  current = view;
  document.querySelectorAll(".tabs button").forEach((b) => {
    b.classList.toggle("active", b.dataset.view === view);
    b.setAttribute("aria-selected", String(b.dataset.view === view));
  });
  document.querySelectorAll(".view").forEach((v) => v.classList.toggle("active", v.id === `view-${view}`));
  if (location.hash !== `#${view}`) history.pushState(null, "", `#${view}`);
  refresh();
}

async function refresh() {
  try {
    const health = await getHealth();
    showDegraded(health.reasons || []);
    state.runbooksRoute = health.runbooks_route;
    state.tz = health.display_tz || "UTC";
    setZoneLabel(zone());
    if (adoptServerLang(health.language)) renderSuggestions(submit);
    document.getElementById("clock").textContent = `${hhmm(health.cluster_time)} ${zone()}`;
    if (state.status) statusLine(state.status);  // a status that came before the zone was known
    const mode = document.getElementById("mode");
    mode.textContent = t(`mode.${health.auth_mode}`);
    mode.className = `mode ${health.auth_mode}`;
    if (current !== "approvals") await loadApprovals();  // keeps the badge current
    if (loaders[current]) await loaders[current]();
  } catch (err) {
    console.warn(err);
  }
}

// The banner: one line per reason, in the reader's language, with the server's detail on hover.
function showDegraded(reasons) {
  const banner = document.getElementById("degraded");
  banner.hidden = reasons.length === 0;
  banner.replaceChildren();
  if (!reasons.length) return;
  const title = document.createElement("strong");
  title.textContent = t("degraded.title");
  banner.append(title);
  const details = new Map();  // one line per reason; every store's detail in its tooltip
  for (const r of reasons) details.set(r.reason, [...(details.get(r.reason) || []), r.detail]);
  for (const [reason, texts] of details) {
    const line = document.createElement("div");
    line.className = `reason ${reason}`;
    const key = `degraded.${reason}`;
    line.textContent = t(key) === key ? shown(texts.join("; ")) : t(key);
    line.title = shown(texts.join("\n"));
    banner.append(line);
  }
}

// Live status from GET /api/events: sweep running / last / next, scenario over, degraded; a new sweep reloads the view.
let lastRun;
function showStatus(s) {
  state.status = s;
  if (s.display_tz) state.tz = s.display_tz;
  setZoneLabel(zone());
  document.getElementById("ended").hidden = !s.scenario_ended;
  document.getElementById("clock").textContent = `${hhmm(s.cluster_time)} ${zone()}`;
  statusLine(s);
  const button = document.getElementById("sweep-now");
  button.hidden = s.role !== "approver";
  button.disabled = s.running;
  showDegraded(s.degraded || []);
  const badge = document.getElementById("pending-badge");
  badge.hidden = !s.pending_approvals;
  badge.textContent = s.pending_approvals;
  if (s.last_run_id !== lastRun || (s.running && current === "findings")) {
    lastRun = s.last_run_id;
    refresh();
  }
}

// The sweep line: running since, or last and next, in the display zone.
function statusLine(s) {
  const line = document.getElementById("sweep-state");
  if (s.running) {
    line.textContent = `${t(s.last_run_id ? "status.running" : "status.running_first")} ${when(s.running_since)} ${zone()}…`;
  } else if (s.last_finished_at) {
    const next = s.next_due && !s.scenario_ended ? ` · ${t("status.next")} ${when(s.next_due)} ${zone()}` : "";
    line.textContent = `${t("status.last")} ${when(s.last_finished_at)} ${zone()}${next}`;
  } else {
    line.textContent = t("status.none_yet");
  }
  line.className = `sweep-state${s.running ? " running" : ""}`;
}

async function follow() {
  for (;;) {
    try {
      await followSSE("/api/events", (type, data) => { if (type === "status") showStatus(data); });
    } catch (err) {
      console.warn(err);
    }
    document.getElementById("sweep-state").textContent = t("status.offline");
    await new Promise((r) => setTimeout(r, 3000));
  }
}

async function sweepNow() {
  const note = document.getElementById("sweep-note");
  note.className = "form-note";
  note.textContent = t("status.started");
  try {
    const r = await postJSON("/api/sweeps", {});
    note.className = "form-note ok";
    note.textContent = `${t("status.done")} ${r.findings} (${when(r.at)} ${zone()})`;
  } catch (err) {
    note.className = "form-note error";
    note.textContent = shown(err.message);
  }
  refresh();
}

function submit(question) {
  const q = question.trim();
  if (!q) return;
  document.getElementById("question").value = "";
  ask(q);
}

document.querySelectorAll(".tabs button").forEach((b) => b.addEventListener("click", () => show(b.dataset.view)));
document.getElementById("lang-toggle").addEventListener("click", () => {
  toggleLang();
  renderSuggestions(submit);
  if (state.status) showStatus(state.status);
  refresh();
});
document.getElementById("sweep-now").addEventListener("click", sweepNow);
document.getElementById("composer").addEventListener("submit", (e) => { e.preventDefault(); submit(document.getElementById("question").value); });
bindExemptForm();
bindAudit();
bindFindings();
applyLabels();
renderSuggestions(submit);
const start = location.hash.slice(1);
show(start in loaders ? start : "chat");
// A link to #findings (an approval card's "see finding") or the Back button moves between tabs.
window.addEventListener("hashchange", () => {
  const view = location.hash.slice(1);
  if (view in loaders && view !== current) show(view);
});
setInterval(() => { if (!document.hidden) refresh(); }, 3000);
follow();

// Runbook links are plain links; with token auth a new tab has no token, so fetch with it and open the page.
document.addEventListener("click", async (e) => {
  const link = e.target.closest("a.rb");
  const token = localStorage.getItem("steward.token");
  if (!link || !token) return;
  e.preventDefault();
  const resp = await fetch(link.href, { headers: { Authorization: `Bearer ${token}` } });
  const page = URL.createObjectURL(new Blob([await resp.text()], { type: "text/html" }));
  window.open(page, "_blank", "noopener");
});
