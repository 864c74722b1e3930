"""The HTTP API's guard (issue 13): limits before work, proxy mode, local development mode, bounded fields,
and chat that does not wait for a sweep.

Bodies are fed to the app through raw ASGI `receive` calls that count the bytes handed over, so "refused
before the body was read" is observed, not inferred. Everything runs on the simulated demo cluster.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from pydantic import SecretStr

from agent.api.guard import ALERT_WEBHOOK, PUBLIC_PATHS, SELF_AUTHENTICATING
from agent.config.settings import ApiToken, Settings
from server import create_app, proxy_exposure_warning
from tests.test_server_api import APPROVER, advance, client_for, settings_for, sse_events

TOKENS = {"approver-token": ApiToken(name="ann", role="approver"), "viewer-token": ApiToken(name="vic", role="viewer")}
BLOCK = b"x" * 65536


def asgi_request(app, method: str, path: str, *, headers: tuple[tuple[str, str], ...] = (), blocks: int = 0,
                 content_length: int | None = None, query: str = "",
                 client: tuple[str, int] = ("127.0.0.1", 50000)) -> tuple[int, bytes, int]:
    """(status, body, request bytes the app pulled through receive()) for one request of `blocks` x 64 KiB."""
    state = {"pulled": 0, "left": blocks, "ended": False}

    async def receive() -> dict:
        if state["left"] > 0:
            state["left"] -= 1
            state["pulled"] += len(BLOCK)
            state["ended"] = state["left"] == 0
            return {"type": "http.request", "body": BLOCK, "more_body": not state["ended"]}
        if not state["ended"]:
            state["ended"] = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)  # nothing more to send: the app is only listening for a disconnect
        return {"type": "http.disconnect"}

    messages: list[dict] = []

    async def send(message: dict) -> None:
        messages.append(message)

    raw_headers = [(k.lower().encode(), v.encode()) for k, v in headers]
    if not any(name == b"host" for name, _ in raw_headers):
        raw_headers.append((b"host", b"localhost"))
    if content_length is not None:
        raw_headers.append((b"content-length", str(content_length).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": raw_headers, "client": client, "server": ("127.0.0.1", 8000), "state": {}}
    asyncio.run(asyncio.wait_for(app(scope, receive, send), timeout=120))
    status = next(m["status"] for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return status, body, state["pulled"]


def guarded_operations(app) -> list[tuple[str, str]]:
    """(method, path with placeholders filled) of every operation in the schema that needs our credentials."""
    ops = []
    for path, item in app.openapi()["paths"].items():
        if path in PUBLIC_PATHS or path.startswith(SELF_AUTHENTICATING) or path == ALERT_WEBHOOK:  # own token
            continue
        filled = path.replace("{approval_id}", "apr_x").replace("{runbook_id}", "idle-gpu-job")
        ops += [(method.upper(), filled) for method in sorted(item)]
    return ops


# --- finding 4: limits before work ------------------------------------------------------------------------

def test_no_route_reads_an_unauthenticated_body(tmp_path):
    """Eight 50 MB POSTs used to be read in full before the 401: now not one byte is pulled, on any route."""
    app = create_app(settings_for(tmp_path, api_tokens=TOKENS), run_scheduler=False)
    ops = guarded_operations(app)
    assert ("POST", "/api/chat") in ops and ("POST", "/api/sweeps") in ops and ("GET", "/runbooks/idle-gpu-job") in ops
    for method, path in ops:
        for headers in ((), (("authorization", "Bearer wrong"),)):
            status, body, pulled = asgi_request(app, method, path, headers=(("content-type", "application/json"),
                                                                            *headers), blocks=32)
            assert (status, pulled) == (401, 0), (method, path, headers, body)


def test_oversized_bodies_are_refused_before_they_are_read(tmp_path):
    app = create_app(settings_for(tmp_path, api_tokens=TOKENS), run_scheduler=False)
    auth = (("authorization", "Bearer approver-token"), ("content-type", "application/json"))
    status, _, pulled = asgi_request(app, "POST", "/api/chat", headers=auth, content_length=50 * 2**20, blocks=800)
    assert (status, pulled) == (413, 0)  # Content-Length says too much: nothing is read
    status, body, pulled = asgi_request(app, "POST", "/api/chat", headers=auth, blocks=800)  # streamed, no length
    assert status == 413 and pulled <= app.state.settings.max_body_bytes + len(BLOCK)
    assert "STEWARD_MAX_BODY_BYTES" in str(body) and "65,536" in str(body), body


# --- finding 5: proxy mode ------------------------------------------------------------------------------

def test_proxy_mode_needs_proof_of_the_proxy(tmp_path, capsys):
    with pytest.raises(ValueError, match="STEWARD_TRUSTED_PROXIES"):
        create_app(settings_for(tmp_path, trust_proxy_headers=True))
    with pytest.raises(ValueError, match="'proxy.example' is not an IP address"):
        create_app(settings_for(tmp_path, trust_proxy_headers=True, trusted_proxies=["proxy.example"]))
    from agent.cli.main import main

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STEWARD_TRUST_PROXY_HEADERS", "true")
        mp.setenv("STEWARD_DATA_DIR", str(tmp_path))
        assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "STEWARD_TRUSTED_PROXIES" in capsys.readouterr().out


def test_proxy_headers_count_only_from_the_listed_proxies(tmp_path):
    settings = settings_for(tmp_path, trust_proxy_headers=True, trusted_proxies=["10.0.0.0/24", "fd00::7"])
    app = create_app(settings, run_scheduler=False)
    approver = (("x-forwarded-user", "mallory"), ("x-forwarded-groups", "steward-approvers"))
    for peer in ("127.0.0.1", "10.0.1.7", "fd00::8", "testclient"):
        status, _, pulled = asgi_request(app, "POST", "/api/sweeps", headers=approver, client=(peer, 1), blocks=1)
        assert (status, pulled) == (401, 0), peer
    with client_for(settings, peer="fd00::7") as c:
        assert c.get("/api/findings", headers=dict(approver)).status_code == 200


def test_a_proxy_header_sent_twice_is_refused_not_resolved(tmp_path):
    """With two X-Forwarded-Groups headers the first (the client's) used to win: now neither does."""
    settings = settings_for(tmp_path, trust_proxy_headers=True, trusted_proxies=["10.0.0.7"])
    with client_for(settings, peer="10.0.0.7") as c:
        twice = [("X-Forwarded-User", "bob"), ("X-Forwarded-Groups", "steward-approvers"),
                 ("X-Forwarded-Groups", "ml-team")]
        response = c.post("/api/sweeps", headers=twice)
        assert response.status_code == 401 and "X-Forwarded-Groups was sent 2 times" in response.json()["detail"]
        users = [("X-Forwarded-User", "mallory"), ("X-Forwarded-User", "bob"), ("X-Forwarded-Groups", "ml-team")]
        assert c.get("/api/findings", headers=users).status_code == 401
        assert c.app.state.runtime.sweeps_total == 0
        assert c.get("/api/findings", headers={"X-Forwarded-User": "bob", "X-Forwarded-Groups": "ml-team"}
                     ).status_code == 200


def test_proxy_secret_header(tmp_path):
    secret = "a-proxy-secret-0123456789"
    settings = settings_for(tmp_path, trust_proxy_headers=True, proxy_secret=SecretStr(secret))
    with client_for(settings, peer="192.0.2.1") as c:
        user = {"X-Forwarded-User": "lin", "X-Forwarded-Groups": "steward-approvers"}
        assert c.get("/api/findings", headers=user).status_code == 401
        assert c.get("/api/findings", headers={**user, "X-Steward-Proxy-Secret": "guess"}).status_code == 401
        assert c.get("/api/findings", headers={**user, "X-Steward-Proxy-Secret": secret}).status_code == 200


def test_serving_proxy_mode_on_a_public_address_warns():
    settings = Settings(trust_proxy_headers=True, trusted_proxies=["10.0.0.7"])
    warning = proxy_exposure_warning(settings, "0.0.0.0")
    assert warning and "STEWARD_TRUSTED_PROXIES" in warning and "strip" in warning
    assert proxy_exposure_warning(settings, "127.0.0.1") is None
    assert proxy_exposure_warning(Settings(api_tokens=TOKENS), "0.0.0.0") is None


# --- finding 6: local development mode -------------------------------------------------------------------

def test_local_dev_mode_serves_loopback_host_names_only(tmp_path):
    """DNS rebinding: a page on evil.example whose name resolves to 127.0.0.1 must not reach the API."""
    app = create_app(settings_for(tmp_path), run_scheduler=False, bind_host="127.0.0.5")
    for host in ("evil.example", "evil.example:8000", "127.0.0.6:8000", "localhost.evil.example", ""):
        status, body, _ = asgi_request(app, "GET", "/api/findings", headers=(("host", host),))
        assert status == 400 and b"local development mode" in body, host
    with client_for(settings_for(tmp_path), bind_host="127.0.0.5") as c:
        for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000", "127.0.0.5:8000", "LOCALHOST"):
            assert c.get("/api/findings", headers={"Host": host}).status_code == 200, host


def test_no_cross_site_form_reaches_a_state_changing_route(tmp_path):
    with client_for(settings_for(tmp_path)) as c:
        advance(c, 300)
        form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}
        assert c.post("/api/sweeps", content=b"", headers=form).status_code == 403
        assert c.post("/api/sweeps", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
        assert c.post("/api/sweeps", headers={"Origin": "http://evil.example"}).status_code == 403
        plain = c.post("/api/sweeps", content=b"{}", headers={"Content-Type": "text/plain"})
        assert plain.status_code == 415 and "JSON" in plain.json()["detail"]
        exempt = c.post("/api/exemptions", content=b"job=a100-ondemand&duration=4h",
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert exempt.status_code == 415
        rt = c.app.state.runtime
        assert rt.sweeps_total == 0 and rt.deps.audit.entries(kind="exemption") == []
        same_site = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
        assert c.post("/api/sweeps", headers=same_site).status_code == 200 and rt.sweeps_total == 1


# --- finding 8: no 500s, bounded fields ------------------------------------------------------------------

def test_bad_inputs_are_4xx_not_500(tmp_path):
    with client_for(settings_for(tmp_path)) as c:
        advance(c, 300)
        assert c.get("/api/audit", params={"offset": str(10**30)}).status_code == 422
        assert c.get("/api/audit", params={"target": "t" * 5000}).status_code == 422
        surrogate = c.post("/api/chat", content=b'{"message": "who \\ud800 wastes"}',
                           headers={"Content-Type": "application/json"})
        assert surrogate.status_code == 422 and surrogate.json()["detail"]
        assert c.post("/api/approvals/" + "a" * 5000, json={"decision": "approve"}).status_code == 422
        huge = c.post("/api/exemptions", json={"job": "j" * 500_000, "duration": "4h"})
        assert huge.status_code == 413 and "Too Large" in huge.text
        # Each says what is wrong, in both languages: not UTF-8, not JSON, a field.
        latin = c.post("/api/chat", content='{"message": "caf\xe9"}'.encode("latin-1"),
                       headers={"Content-Type": "application/json"})
        assert latin.status_code in (400, 422), latin.text
        assert "UTF-8" in latin.text
        broken = c.post("/api/chat", content=b'{"message": ', headers={"Content-Type": "application/json"})
        assert broken.status_code == 422 and broken.json()["message"].startswith("the body is not valid JSON")
        echoed = c.post("/api/chat", json={"message": "m" * 5000})
        assert echoed.status_code == 422 and len(echoed.text) < 2000, echoed.text[:300]
        # A NaN or 1e999 echoed back still makes a body any strict JSON parser reads.
        for number in (b"NaN", b"1e999", b"-Infinity"):
            odd = c.post("/api/exemptions", content=b'{"job": "x", "duration": ' + number + b'}',
                         headers={"Content-Type": "application/json"})
            assert odd.status_code == 422 and json.loads(odd.text, parse_constant=_no_constant)["detail"], odd.text
        long = c.post("/api/exemptions", json={"job": "j" * 10_000, "duration": "4h"})
        assert long.status_code == 422
        assert c.post("/api/exemptions", json={"job": "x", "duration": "4h", "reason": "r" * 2001}).status_code == 422
        assert c.app.state.runtime.deps.audit.entries(kind="exemption") == []



def test_a_too_deeply_nested_json_body_is_not_blamed_on_its_encoding(tmp_path):
    """A 10 KB body of nested arrays (valid UTF-8, under the size limit) was refused as "could not be read: send
    UTF-8 JSON", which sent the caller looking for an encoding problem that is not there: it names the nesting."""
    body = b'{"message": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with client_for(settings_for(tmp_path)) as client:
        resp = client.post("/api/chat", content=body, headers={"content-type": "application/json"})
        assert resp.status_code == 422
        detail = str(resp.json().get("detail"))
        assert "UTF-8" not in detail, f"{resp.status_code}: {detail}"
        assert "nested too deeply" in detail and "levels" in detail, detail
        shallow = client.post("/api/chat", content=b'{"message": ' + b"[" * 50 + b"]" * 50 + b"}",
                              headers={"content-type": "application/json"})
        assert shallow.status_code == 422 and "message" in shallow.json()["message"]  # read; the field is wrong


def test_a_nul_character_in_a_text_field_or_filter_is_refused_naming_it(tmp_path):
    """Postgres text cannot hold NUL (SQLite can): refused at the edge on either store, naming the field, with
    nothing recorded, so a client's value never reaches the store as a write failure (tests/test_postgres_api.py)."""
    with client_for(settings_for(tmp_path)) as c:
        advance(c, 300)
        for params in ({"target": "a\x00b"}, {"kind": "exemption\x00"}, {"status": "\x00"}):
            for path in ("/api/audit", "/api/audit/export"):
                resp = c.get(path, params=params)
                [field] = params
                assert resp.status_code == 422 and field in resp.json()["message"] and "NUL" in resp.text, resp.text
        bodies = [("/api/exemptions", {"job": "ml-team/jupyter-carol", "duration": "4h", "reason": "a\x00b"}, "reason"),
                  ("/api/exemptions", {"job": "ml-team/jupyter-carol\x00", "duration": "4h"}, "job"),
                  ("/api/exemptions", {"job": "ml-team/jupyter-carol", "duration": "4\x00h"}, "duration"),
                  ("/api/exemptions/revoke", {"job": "ml-team/jupyter-carol", "reason": "\x00"}, "reason"),
                  ("/api/approvals/apr_x", {"decision": "deny", "reason": "no\x00"}, "reason"),
                  ("/api/chat", {"message": "keep 4h ml-team/jupyter-carol demo\x00tonight"}, "message"),
                  ("/api/chat", {"message": "why?", "job": "ml-team/a\x00"}, "job")]
        for path, body, field in bodies:
            resp = c.post(path, json=body)
            assert resp.status_code == 422, (path, body, resp.status_code, resp.text[:200])
            assert field in resp.json()["message"] and "NUL" in resp.text, resp.text
        assert c.app.state.runtime.deps.audit.entries(kind="exemption") == []
        assert c.get("/healthz").status_code == 200


# --- clickjacking: no page of the steward may be framed --------------------------------------------------

def _refuses_framing(headers) -> bool:
    xfo = headers.get("x-frame-options", "").strip().lower()
    csp = headers.get("content-security-policy", "").lower()
    ancestors = next((d.strip() for d in csp.split(";") if d.strip().startswith("frame-ancestors")), "")
    return xfo == "deny" and ancestors == "frame-ancestors 'none'"


def test_the_ui_with_its_approve_buttons_cannot_be_framed_by_another_site(tmp_path):
    """In local development mode every caller is the approver `local-dev`, and a click on a framed UI's Approve
    button is a same-origin fetch, which the guard lets through: no response may be framed (X-Frame-Options: DENY,
    CSP frame-ancestors 'none'), the UI, its scripts, the API, errors and the guard's own refusals alike."""
    with client_for(settings_for(tmp_path)) as client:
        page = client.get("/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert _refuses_framing(page.headers), f"GET / may be framed by any site: headers {dict(page.headers)}"
        for resp in (client.get("/static/app.js"), client.get("/healthz"), client.get("/api/status"),
                     client.get("/api/no-such-route"), client.get("/ui", follow_redirects=False),
                     client.get("/", headers={"Host": "evil.example"}),  # refused by the guard
                     client.post("/api/sweeps", headers={"Sec-Fetch-Site": "cross-site"})):
            assert _refuses_framing(resp.headers), (resp.request.url, resp.status_code, dict(resp.headers))
        # the headers do not get in the UI's own way: a same-origin POST from the page still reaches the route
        approved = client.post("/api/approvals/apr_missing", json={"decision": "approve"},
                               headers={"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost"})
        assert approved.status_code == 404

def test_an_exemption_names_something_that_exists(tmp_path):
    with client_for(settings_for(tmp_path)) as c:
        missing = c.post("/api/exemptions", json={"job": "ml-team/no-such-job", "duration": "4h"})
        assert missing.status_code == 422 and "ml-team/no-such-job" in missing.json()["detail"]
        rt = c.app.state.runtime
        assert rt.deps.audit.entries(kind="exemption") == []
        job = rt.deps.scheduler.list_jobs()[0].id
        node = rt.deps.scheduler.list_nodes()[0].name
        pool = rt.deps.pools.list_pools()[0].name
        for target in (job, node, pool):
            assert c.post("/api/exemptions", json={"job": target, "duration": "1h"}).status_code == 201, target


# --- finding 9: chat does not wait for a sweep ------------------------------------------------------------

def test_chat_answers_while_the_first_sweep_builds_its_index(tmp_path):
    """The first sweep holds the graph lock while the runbook index builds (here: a search that waits until
    released). Chat answers meanwhile, from the reading that sweep took, and says so."""
    with client_for(settings_for(tmp_path)) as c:
        rt = c.app.state.runtime
        rt.read_wait_s = 0.05
        searching, release = threading.Event(), threading.Event()

        def index_still_building(query: str, kind: str | None, k: int) -> list[dict]:
            searching.set()
            release.wait(120)
            return []

        rt.deps.runbook_search = index_still_building
        advance(c, 300)
        sweeper = threading.Thread(target=rt.sweep_now, args=("test",), daemon=True)
        answers: dict[str, object] = {}

        def ask() -> None:
            answers["chat"] = c.post("/api/chat", json={"message": "who is wasting GPUs?"})
            answers["keep"] = c.post("/api/exemptions", json={"job": "a100-ondemand", "duration": "1h"})

        chatter = threading.Thread(target=ask, daemon=True)
        try:
            sweeper.start()
            assert searching.wait(120), "the sweep never reached its runbook search"
            chatter.start()
            chatter.join(60)  # a hang detector, not a speed check: the sweep stays blocked until released
            answered_during_sweep = not chatter.is_alive()
        finally:
            release.set()
            sweeper.join(120)
            chatter.join(120)
        assert answered_during_sweep, "chat waited for the sweep"
        events = sse_events(answers["chat"].text)  # type: ignore[attr-defined]
        answer = events[-1]["answer"]
        assert answer.startswith("(The first sweep is still running: no findings yet.")
        assert "".join(e["text"] for e in events if e["type"] == "token") == answer
        assert answers["keep"].status_code == 201  # type: ignore[attr-defined]
        after = sse_events(c.post("/api/chat", json={"message": "谁在浪费 GPU？"}).text)[-1]["answer"]
        assert "巡检" not in after.split("\n")[0] and "a100-ondemand" in after


def test_approver_token_still_works_through_the_guard(tmp_path):
    with client_for(settings_for(tmp_path, api_tokens=TOKENS)) as c:
        advance(c, 300)
        assert c.post("/api/sweeps", headers=APPROVER).status_code == 200
        assert c.get("/healthz").status_code == 200 and c.get("/metrics").status_code == 200
        assert c.get("/").status_code == 200 and c.get("/openapi.json").status_code == 200


def _no_constant(name: str) -> object:
    raise ValueError(f"not JSON: {name}")
