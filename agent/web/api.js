// HTTP helpers: bearer token (asked for on 401, kept in localStorage) and a server-sent-events reader.
function headers(extra = {}) {
  const token = localStorage.getItem("steward.token");
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

async function checked(resp) {
  if (resp.status === 401) {
    const token = window.prompt("API token (STEWARD_API_TOKENS):");
    if (token) localStorage.setItem("steward.token", token.trim());
  }
  if (!resp.ok) {
    let detail = resp.statusText;
    try { detail = (await resp.json()).detail || detail; } catch (_) { /* not JSON */ }
    const err = new Error(typeof detail === "string" ? detail : JSON.stringify(detail));
    err.status = resp.status;
    throw err;
  }
  return resp;
}

export async function getJSON(path) {
  return (await checked(await fetch(path, { headers: headers() }))).json();
}

// /healthz answers 503 with its reasons when degraded: read both, never prompt for a token.
export async function getHealth() {
  const resp = await fetch("/healthz", { headers: headers() });
  if (resp.status !== 200 && resp.status !== 503) throw new Error(`/healthz: ${resp.status}`);
  return resp.json();
}

export async function postJSON(path, body) {
  const resp = await fetch(path, {
    method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body),
  });
  return (await checked(resp)).json();
}

// POST and read the text/event-stream body as it arrives, calling onEvent(type, data) per event.
export async function streamSSE(path, body, onEvent) {
  const resp = await checked(await fetch(path, {
    method: "POST", headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
  }));
  await readEvents(resp, onEvent);
}

async function readEvents(resp, onEvent) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let type = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) type = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) onEvent(type, JSON.parse(data.join("\n")));
    }
  }
}

// GET a text/event-stream (fetch, not EventSource, so the bearer token goes along), calling onEvent(type, data).
export async function followSSE(path, onEvent, signal) {
  const resp = await checked(await fetch(path, { headers: headers({ Accept: "text/event-stream" }), signal }));
  await readEvents(resp, onEvent);
}

// A file download through fetch, so a bearer token goes along (a plain link would not carry it).
export async function download(path, filename) {
  const resp = await checked(await fetch(path, { headers: headers() }));
  const url = URL.createObjectURL(await resp.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
