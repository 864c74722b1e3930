"""The ChatOps HTTP surface: DingTalk and WeCom callbacks (platform signatures only) and approve links."""

from __future__ import annotations

import hashlib
import html
import logging
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from agent.chatops import dingtalk, wecom
from agent.chatops.commands import Answer, ChatCommands, StewardService, not_carried_out
from agent.chatops.directory import UserDirectory
from agent.chatops.links import MAX_TOKEN_CHARS, ApprovalLinks, LinkClaim, LinkExpired, LinkRefused, UsedNonces
from agent.chatops.replay import SeenCallbacks, StoreUnavailable
from agent.chatops.wecom_crypto import WeComCrypto, WeComCryptoError
from agent.config.settings import Settings
from agent.records.approvals import ApprovalError, ApprovalUnavailable, audit_refused_answer
from core.text import chat_reply_text

WECOM_MAX_SKEW_S = 300.0
# A timestamp seen now is accepted for at most 2 * skew; a second more, so a key is never forgotten at the very edge.
WECOM_REPLAY_KEEP_S = 2 * WECOM_MAX_SKEW_S + dingtalk.REPLAY_MARGIN_S


def dingtalk_key(timestamp: str, sign: str) -> str:
    """The replay key of a DingTalk callback: printable (Postgres text refuses NUL), one per (timestamp, sign)."""
    return "dingtalk:" + hashlib.sha256(f"{timestamp}\n{sign}".encode()).hexdigest()


def wecom_key(msg_signature: str) -> str:
    """The replay key of a WeCom callback: its signature, as checked (lower case). The signature hashes the sorted
    fields joined with no separator, so the same request re-split (a nonce's trailing character moved to the front of
    the timestamp) keeps it: a key on (timestamp, nonce) would take such a replay as new."""
    return "wecom:" + msg_signature.lower()


def _secret(value: object) -> str | None:
    return value.get_secret_value() if value is not None else None  # type: ignore[attr-defined]


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                        "<meta name='viewport' content='width=device-width'></head><body style='font-family:"
                        f"sans-serif;max-width:36em;margin:2em auto'><h2>{html.escape(title)}</h2>{body}</body></html>",
                        status_code=status, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})


log = logging.getLogger("steward.chatops")


def offline_answer(provider: Callable[[], Any]) -> Answer:
    """Free questions from DingTalk or WeCom ("为什么停止 …", "这周花了多少钱？") answered as the web chat's built-in
    answerer answers them, from the server's runtime; None (the findings summary) where the service is not one."""

    def ask(question: str, user: str, lang: str) -> str | None:
        runtime = provider()
        if not hasattr(runtime, "read_cluster"):
            return None
        from agent.api.answerer import answer
        from agent.api.chat import SweepStillReading, chat_context

        language: Literal["en", "zh"] = "zh" if lang == "zh" else "en"
        try:  # the newest reading held: WeCom and DingTalk wait about 5 s, and retry a callback that is late
            ctx, notice = chat_context(runtime, language, zone=getattr(runtime, "zone", UTC), newest_only=True,
                                       asker=user or None)
            reply = next((e["answer"] for e in answer(ctx, question, language) if e["type"] == "done"), None)
        except SweepStillReading as exc:
            return str(exc)
        except Exception:  # noqa: BLE001 - a failed answer falls back to the findings summary, never a 500
            log.warning("chat answer for a ChatOps question failed; replying with the findings summary", exc_info=True)
            return None
        # Chat messages are plain text: the web chat's **bold** would show as asterisks. The answer quotes the
        # cluster's words (a Slurm job named `<a href=...>`): no link, tag or @all leaves in the steward's name.
        return None if reply is None else chat_reply_text((notice + reply).replace("**", ""))

    return ask


def chatops_router(settings: Settings, service_provider: Callable[[], StewardService] | None = None, *,
                   answer: Answer | None = None, used_nonces: UsedNonces | None = None,
                   seen_callbacks: SeenCallbacks | None = None, now_s: Callable[[], float] = time.time) -> APIRouter:
    """The router; `service_provider` defaults to the app's runtime (request.app.state.runtime).

    answer(question, user, language) -> str answers free questions (default: a summary of findings).
    Spent link nonces and taken callbacks are kept in SQLite under the data dir (created if missing), so
    neither a link nor a callback can be replayed after a restart.
    """
    router = APIRouter(tags=["chatops"])
    directory = UserDirectory.from_settings(settings)
    app_secret = _secret(settings.dingtalk_app_secret)
    crypto = (WeComCrypto(_secret(settings.wecom_token) or "", _secret(settings.wecom_aes_key) or "",
                          settings.wecom_corp_id or "")
              if settings.wecom_token and settings.wecom_aes_key and settings.wecom_corp_id else None)
    link_secret = _secret(settings.chatops_link_secret)
    public_url = (settings.chatops_public_url or "").rstrip("/")
    links = ApprovalLinks(link_secret, public_url, settings.chatops_link_ttl_s) if link_secret else None
    spent = used_nonces or UsedNonces(settings.store("chatops-links"))
    seen = seen_callbacks or SeenCallbacks(settings.store("chatops-callbacks"),
                                           keep_s=max(dingtalk.REPLAY_KEEP_S, WECOM_REPLAY_KEEP_S))

    def first_use(key: str) -> None:
        """401 for a replay; 503 when the replay store cannot be written (no callback is taken unremembered)."""
        try:
            fresh = seen.first_use(key, now_s())
        except StoreUnavailable as exc:
            raise HTTPException(503, f"callback not taken: {exc.problem.detail}") from None
        if not fresh:
            raise HTTPException(401, "replayed callback")
    approvals_url = f"{public_url}/#approvals" if public_url else ""

    def commands(request: Request) -> ChatCommands:
        provider = service_provider or (lambda: request.app.state.runtime)
        return ChatCommands(provider, directory, answer or offline_answer(provider), approvals_url=approvals_url)

    @router.post("/webhooks/dingtalk", openapi_extra=_body_schema("application/json", DINGTALK_BODY),
                 responses={401: {"description": "bad, stale or replayed signature"}})
    async def dingtalk_callback(request: Request) -> JSONResponse:
        # The signature covers only the headers' timestamp: checked, and taken once, before the body is read.
        if app_secret is None:
            raise HTTPException(404, "DingTalk callback is not configured (STEWARD_DINGTALK_APP_SECRET)")
        try:
            dingtalk.verify_callback(request.headers.get("timestamp"), request.headers.get("sign"), app_secret,
                                     lambda: int(now_s() * 1000))
        except dingtalk.CallbackRefused as exc:
            raise HTTPException(401, str(exc)) from None
        key = dingtalk_key(request.headers["timestamp"], request.headers["sign"])
        first_use(key)
        try:
            body = dingtalk.OutgoingMessage.model_validate_json(await request.body())
        except ValidationError as exc:
            raise HTTPException(422, f"not a DingTalk outgoing message: {exc.errors()[0]['msg']}") from None
        chat_id = body.senderStaffId or body.senderId
        if len(body.content) > dingtalk.MAX_TEXT_CHARS:  # answered, not refused: DingTalk shows a non-200 to nobody
            return JSONResponse(dingtalk.text_reply(too_long_reply()))
        reply = await taken_once(key, commands(request).handle, "dingtalk", chat_id, body.content)
        return JSONResponse(dingtalk.text_reply(reply))

    async def taken_once(key: str, handle, *args: str) -> str:  # noqa: ANN001
        """Run a callback's command; when it fails (a data store that cannot be written: 503, nothing done), the
        callback's key is taken back, so the platform's retry of the same request is carried out, not refused
        as a replay and lost."""
        try:
            return await run_in_threadpool(handle, *args)
        except BaseException:
            seen.forget(key)
            raise

    def _wecom_check(msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> str:
        if crypto is None:
            raise HTTPException(404, "WeCom callback is not configured (STEWARD_WECOM_TOKEN, _AES_KEY, _CORP_ID)")
        # Written as WeCom writes it: a leading zero would let the same signed request be re-split into new fields.
        if not (timestamp.isascii() and timestamp.isdigit() and str(int(timestamp)) == timestamp):
            raise HTTPException(401, "timestamp is not a whole number of seconds")
        if abs(now_s() - int(timestamp)) > WECOM_MAX_SKEW_S:
            raise HTTPException(401, "stale or future timestamp")
        try:
            plain = crypto.verify_and_decrypt(msg_signature, timestamp, nonce, encrypted)
        except WeComCryptoError as exc:
            raise HTTPException(401, str(exc)) from None
        first_use(wecom_key(msg_signature))
        return plain

    @router.get("/webhooks/wecom", response_class=PlainTextResponse)
    def wecom_verify(msg_signature: Signature, timestamp: Timestamp, nonce: Nonce,
                     echostr: Annotated[str, Query(max_length=4096)]) -> PlainTextResponse:
        return PlainTextResponse(_wecom_check(msg_signature, timestamp, nonce, echostr))

    @router.post("/webhooks/wecom", openapi_extra=_body_schema("application/xml", {"type": "string"}),
                 responses={200: {"content": {"application/xml": {}}}, 400: {"description": "not a WeCom callback"},
                            401: {"description": "bad, stale or replayed signature"}})
    async def wecom_callback(request: Request, msg_signature: Signature, timestamp: Timestamp,
                             nonce: Nonce) -> Response:
        # Only the signed Encrypt field is taken from the unauthenticated body, by a pattern, not an XML parser.
        try:
            encrypted = wecom.envelope_encrypt(await request.body())
        except WeComCryptoError as exc:
            raise HTTPException(400, f"not a WeCom callback: {exc}") from None
        plain = _wecom_check(msg_signature, timestamp, nonce, encrypted)
        try:
            message = wecom.parse_message(plain)
        except WeComCryptoError as exc:
            raise HTTPException(400, f"not a WeCom message: {exc}") from None
        if message.msg_type != "text" or not message.content:
            return PlainTextResponse("")  # events and media: acknowledged, no reply
        if len(message.content) > dingtalk.MAX_TEXT_CHARS:
            reply = too_long_reply()
        else:
            reply = await taken_once(wecom_key(msg_signature), commands(request).handle, "wecom",
                                     message.from_user, message.content)
        assert crypto is not None
        inner = wecom.text_reply_xml(message.from_user, crypto.corp_id, reply, int(now_s()))
        return Response(wecom.encrypted_reply(crypto, inner, int(now_s())), media_type="application/xml")

    def service_of(request: Request) -> StewardService:
        return (service_provider or (lambda: request.app.state.runtime))()

    def _answered(service: StewardService, approval_id: str) -> bool | None:
        """Whether the request was answered (True), is still pending (None: nothing recorded), or cannot be read
        now (False: the nonce stays spent, as a link used once must)."""
        try:
            approval = service.deps.approvals.get(approval_id)
        except Exception:
            return False
        if approval is None:
            return False
        return None if approval.status == "pending" else True

    def audit_link_refused(service: StewardService, claim: LinkClaim, by: str, why: str = "not an approver") -> None:
        """A genuine link (its signature holds) whose answer is refused, because it is tried under a name that is
        not an approver (a card forwarded outside the approvers' group), or is spent or expired, is audited as
        the API and the callbacks audit a refused answer: an attempt is a fact."""
        deps = service.deps
        try:
            approval = deps.approvals.get(claim.a)
        except Exception:  # noqa: BLE001 - the refusal stands when the request cannot be read to audit it
            log.warning("refused approve link for %s not audited: the approval store cannot be read", claim.a,
                        exc_info=True)
            return
        if approval is not None:
            audit_refused_answer(deps.audit, approval, at=deps.clock.now(), run_id="chatops-link", decision=claim.d,
                                 reason=f"answer through an approve link by {by or '(no name)'!r} refused: {why}",
                                 claimed_sender=by)

    def _claim(token: str):  # noqa: ANN202
        """(claim, None) for a genuine, unexpired, unspent link; else (the claim of a genuine link refused, or
        None for one whose signature does not hold, the refusal page)."""
        if links is None:
            raise HTTPException(404, "approve links are not configured (STEWARD_CHATOPS_LINK_SECRET)")
        try:
            claim = links.verify(token, now_s())
        except LinkExpired as exc:
            return exc.claim, _page("Link refused / 链接无效", "<p>link expired / 链接已过期</p>", 403)
        except LinkRefused as exc:
            return None, _page("Link refused / 链接无效", f"<p>{html.escape(str(exc))}</p>", 403)
        if spent.is_used(claim.n):
            return claim, _page("Link refused / 链接无效", "<p>link already used / 链接已使用</p>", 410)
        return claim, None

    @router.get("/chatops/approve", response_class=HTMLResponse)
    def approve_page(token: Annotated[str, Query(description=f"the signed link (at most {MAX_TOKEN_CHARS} "
                                                             "characters)")] = "") -> HTMLResponse:
        if links is not None and (not token or len(token) > MAX_TOKEN_CHARS):  # a person opened it: a page, not JSON
            return _page("Link refused / 链接无效", "<p>no link, or one too long to be a steward's (cut or altered in "
                         "copying?) / 链接缺失或过长，不是本服务生成的链接（复制时被截断或修改？）</p>", 400)
        claim, refused = _claim(token)
        if refused is not None:  # a GET only shows (link previewers fetch it too): nothing to audit
            return refused
        # GET only shows; link previewers and chat unfurlers must not act.
        who = (f"<p>As / 身份: <b>{html.escape(claim.r)}</b></p>" if claim.r else
               "<p><label>Your approver id / 审批人账号 <input name='by' required maxlength='200'></label></p>")
        verb = "Approve / 批准" if claim.d == "approve" else "Deny / 拒绝"
        form = (f"<form method='post' action='approve'><input type='hidden' name='token' value='{html.escape(token)}'>"
                f"{who}<p><label>Reason / 原因 <input name='reason' maxlength='2000'></label></p>"
                f"<button type='submit'>{verb} {html.escape(claim.a)}</button></form>")
        return _page(f"{verb}: {claim.a}", form)

    @router.post("/chatops/approve", response_class=HTMLResponse, openapi_extra=_body_schema(
        "application/x-www-form-urlencoded", {"type": "object", "required": ["token"], "properties": {
            "token": {"type": "string", "maxLength": MAX_TOKEN_CHARS}, "by": {"type": "string", "maxLength": 200},
            "reason": {"type": "string", "maxLength": 2000}}}))
    async def approve_act(request: Request) -> HTMLResponse:
        try:
            form = _form(await request.body())
        except ValueError as exc:
            return _page("Bad request / 请求无效", f"<p>{html.escape(str(exc))}</p>", 400)
        claim, refused = _claim(form.get("token", ""))
        by = (claim.r or form.get("by", "").strip()) if claim is not None else ""
        if refused is not None:
            if claim is not None:  # genuine, but spent or expired: the attempt to answer is audited
                why = "link already used" if refused.status_code == 410 else "link expired"
                await run_in_threadpool(audit_link_refused, service_of(request), claim, by, why)
            return refused
        # The docs' promise: an unbound link names a configured approver; with none configured, nobody.
        if not claim.r and (not by or by not in directory.approvers):
            await run_in_threadpool(audit_link_refused, service_of(request), claim, by)
            return _page("Not an approver / 非审批人", "<p>name one of the configured approvers "
                                                    "(STEWARD_CHATOPS_APPROVERS) / 请填写已配置的审批人"
                                                    "（STEWARD_CHATOPS_APPROVERS）</p>", 403)
        try:
            spent.spend(claim, by, now_s())
        except LinkRefused as exc:  # spent by another click since _claim looked
            await run_in_threadpool(audit_link_refused, service_of(request), claim, by, "link already used")
            return _page("Link refused / 链接无效", f"<p>{html.escape(str(exc))}</p>", 410)
        except StoreUnavailable as exc:
            return _page("Not taken / 未受理", "<p>the link store cannot be written; nothing was done / "
                                              f"链接存储无法写入，未执行任何操作</p><p>{html.escape(exc.problem.detail)}</p>", 503)
        service = service_of(request)
        try:
            result = await run_in_threadpool(service.answer, claim.a, claim.d, by=f"link:{by}",
                                             reason=form.get("reason", "") or "via chat link")
        except ApprovalUnavailable as exc:
            # Nothing was answered: the nonce is given back, so the same button works once the store is back.
            spent.forget(claim.n)
            return _page("Not taken / 未受理", f"<p>{html.escape(str(exc))}</p><p>{html.escape(exc.zh)}</p>"
                         "<p>the approval store cannot be written; try the link again later / "
                         "审批存储无法写入，请稍后再次使用此链接</p>", 503)
        except (ApprovalError, LookupError) as exc:
            return _page("Not taken / 未受理", f"<p>{html.escape(str(exc))}</p>", 409)
        except Exception:
            # An answer that failed unexpectedly: the nonce goes back only when nothing was recorded (the request
            # is still pending). One recorded before a later step failed (a re-read after the write) stays spent,
            # and the page says it was recorded: the steward carries it out.
            recorded = await run_in_threadpool(_answered, service, claim.a)
            if recorded is None:
                spent.forget(claim.n)
                raise
            if not recorded:
                raise
            return _page("Recorded / 已记录", f"<p>{html.escape(claim.a)}: the answer was recorded; the page could not "
                         f"be completed / 答复已记录，但页面未能完整生成</p>", 200)
        zh = "批准" if claim.d == "approve" else "拒绝"
        done = "approved" if claim.d == "approve" else "denied"
        missed = [not_carried_out(result, lang).strip() for lang in ("en", "zh")]
        shown = f"<p>{html.escape(missed[0])}</p><p>{html.escape(missed[1])}</p>" if missed[0] else ""
        return _page("Done / 已完成", f"<p>{html.escape(claim.a)}: {done} by {html.escape(by)} / "
                                      f"{html.escape(by)} 已{zh}</p>{shown}")

    router.links = links  # type: ignore[attr-defined]  # the card listener signs with the same secret
    # What /healthz reports besides the audit and approval stores, however the router is mounted (server.py's
    # chatops_wiring, or create_app(extra_routers=[router]) as docs/chatops.md shows).
    router.health_stores = {"chatops-links": lambda: spent, "chatops-callbacks": lambda: seen}  # type: ignore[attr-defined]
    return router


def too_long_reply(limit: int = dingtalk.MAX_TEXT_CHARS) -> str:
    """The reply to a chat message over the limit (a pasted log): nothing is done, and the sender is told why."""
    return f"Not taken: a message has at most {limit} characters. / 未受理：消息最多 {limit} 个字符。"


FORM_LIMITS = {"token": MAX_TOKEN_CHARS, "by": 200, "reason": 2000}


def _form(raw: bytes) -> dict[str, str]:
    """The approve form's fields; ValueError (bilingual) for a body that is not UTF-8 or has oversized fields."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the form is not UTF-8 / 表单不是 UTF-8 编码") from None
    try:
        fields = urllib.parse.parse_qs(text, max_num_fields=10, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the form is not a valid urlencoded form / 表单格式无效") from None
    form = {k: v[0] for k, v in fields.items()}
    for name, limit in FORM_LIMITS.items():
        if len(form.get(name, "")) > limit:
            raise ValueError(f"{name} is longer than {limit} characters / {name} 超过 {limit} 个字符")
    return form


def _body_schema(media_type: str, schema: dict) -> dict:
    """An OpenAPI requestBody for a route that reads its own body (after checking a signature or a token)."""
    return {"requestBody": {"required": True, "content": {media_type: {"schema": schema}}}}


DINGTALK_BODY = {"type": "object", "properties": {
    "msgtype": {"type": "string", "maxLength": 64},
    "text": {"type": "object", "properties": {"content": {"type": "string", "description": (
        f"a message over {dingtalk.MAX_TEXT_CHARS} characters is not taken: the reply names the limit")}}},
    "senderStaffId": {"type": "string", "maxLength": 256}, "senderId": {"type": "string", "maxLength": 256},
    "senderNick": {"type": "string", "maxLength": 256}, "conversationId": {"type": "string", "maxLength": 256}}}
Signature = Annotated[str, Query(max_length=64)]
Timestamp = Annotated[str, Query(max_length=20)]
Nonce = Annotated[str, Query(max_length=64)]
