// The chat pane: streams an answer from POST /api/chat, showing tool calls as they happen.
import { streamSSE } from "./api.js";
import { lang, t, tv } from "./i18n.js";
import { esc, markdown, shown } from "./render.js";

const messages = () => document.getElementById("messages");

function add(cls, html) {
  const el = document.createElement("div");
  el.className = `msg ${cls}`;
  el.innerHTML = html;
  messages().appendChild(el);
  messages().scrollTop = messages().scrollHeight;
  return el;
}

function argText(args) {
  return Object.entries(args || {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");
}

export async function ask(question) {
  add("user", esc(question));
  const bot = add("bot streaming", `<div class="tools"></div><div class="answer"><span class="typing">${t("chat.thinking")}</span></div>`);
  const tools = bot.querySelector(".tools");
  const answer = bot.querySelector(".answer");
  let text = "";
  const pending = {};
  try {
    await streamSSE("/api/chat", { message: question, lang }, (type, ev) => {
      if (type === "tool_call") {
        const row = document.createElement("div");
        row.className = "tool running";
        row.innerHTML = `<span class="tool-name">${esc(ev.name)}</span><span class="tool-args">(${esc(argText(ev.args))})</span><span class="tool-status"></span>`;
        tools.appendChild(row);
        (pending[ev.name] ||= []).push(row);
      } else if (type === "tool_result") {
        const row = (pending[ev.name] || []).shift();
        if (row) {
          row.classList.remove("running");
          row.classList.add(ev.status === "ok" ? "ok" : "warn");
          row.querySelector(".tool-status").textContent = `→ ${tv("tool", ev.status)}${ev.summary && lang === "en" ? `: ${shown(ev.summary)}` : ""}`;
        }
      } else if (type === "token") {
        text += ev.text;
        answer.innerHTML = markdown(text);
      } else if (type === "done") {
        answer.innerHTML = markdown(ev.answer || text);
      } else if (type === "error") {
        answer.innerHTML = `<p class="error">${esc(ev.message)}</p>`;
      }
      messages().scrollTop = messages().scrollHeight;
    });
  } catch (err) {
    answer.innerHTML = `<p class="error">${esc(err.message)}</p>`;
  }
  bot.classList.remove("streaming");
  bot.classList.add("done");
}

export function renderSuggestions(onPick) {
  const box = document.getElementById("suggestions");
  box.innerHTML = "";
  for (const q of t("suggest")) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "chip";
    b.textContent = q;
    b.addEventListener("click", () => onPick(q));
    box.appendChild(b);
  }
}
