// Entry point: tabs, language toggle, polling of the current view and the cluster clock.
import { getJSON } from "./api.js";
import { ask, renderSuggestions } from "./chat.js";
import { applyLabels, t, toggleLang } from "./i18n.js";
import { hhmm, state } from "./render.js";
import { bindAudit, bindExemptForm, loadApprovals, loadAudit, loadFindings, loadSavings } from "./views.js";

const loaders = { chat: null, approvals: loadApprovals, findings: loadFindings, savings: loadSavings, audit: loadAudit };
let current = "chat";

function show(view) {
  current = view;
  document.querySelectorAll(".tabs button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
  document.querySelectorAll(".view").forEach((v) => v.classList.toggle("active", v.id === `view-${view}`));
  if (location.hash !== `#${view}`) history.replaceState(null, "", `#${view}`);
  refresh();
}

async function refresh() {
  try {
    const health = await getJSON("/healthz");
    state.runbooksRoute = health.runbooks_route;
    document.getElementById("clock").textContent = `${hhmm(health.cluster_time)} UTC`;
    const mode = document.getElementById("mode");
    mode.textContent = t(`mode.${health.auth_mode}`);
    mode.className = `mode ${health.auth_mode}`;
    if (current !== "approvals") await loadApprovals();  // keeps the badge current
    if (loaders[current]) await loaders[current]();
  } catch (err) {
    console.warn(err);
  }
}

function submit(question) {
  const q = question.trim();
  if (!q) return;
  document.getElementById("question").value = "";
  ask(q);
}

document.querySelectorAll(".tabs button").forEach((b) => b.addEventListener("click", () => show(b.dataset.view)));
document.getElementById("lang-toggle").addEventListener("click", () => { toggleLang(); renderSuggestions(submit); refresh(); });
document.getElementById("composer").addEventListener("submit", (e) => { e.preventDefault(); submit(document.getElementById("question").value); });
bindExemptForm();
bindAudit();
applyLabels();
renderSuggestions(submit);
const start = location.hash.slice(1);
show(start in loaders ? start : "chat");
setInterval(() => { if (!document.hidden) refresh(); }, 3000);

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
