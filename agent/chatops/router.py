"""The ChatOps HTTP surface: DingTalk and WeCom callbacks (platform signatures only) and approve links."""

from __future__ import annotations

import html
import time
import urllib.parse
from collections.abc import Callable

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from agent.chatops import dingtalk, wecom
from agent.chatops.commands import Answer, ChatCommands, StewardService
from agent.chatops.directory import UserDirectory
from agent.chatops.links import ApprovalLinks, LinkRefused, UsedNonces
from agent.chatops.replay import NonceCache
from agent.chatops.wecom_crypto import WeComCrypto, WeComCryptoError
from agent.config.settings import Settings
from agent.records.approvals import ApprovalError

WECOM_MAX_SKEW_S = 300.0


def _secret(value: object) -> str | None:
    return value.get_secret_value() if value is not None else None  # type: ignore[attr-defined]


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                        "<meta name='viewport' content='width=device-width'></head><body style='font-family:"
                        f"sans-serif;max-width:36em;margin:2em auto'><h2>{html.escape(title)}</h2>{body}</body></html>",
                        status_code=status, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})


def chatops_router(settings: Settings, service_provider: Callable[[], StewardService] | None = None, *,
                   answer: Answer | None = None, used_nonces: UsedNonces | None = None,
                   now_s: Callable[[], float] = time.time) -> APIRouter:
    """The router; `service_provider` defaults to the app's runtime (request.app.state.runtime).

    answer(question, user, language) -> str answers free questions (default: a summary of findings).
    """
    router = APIRouter(tags=["chatops"])
    directory = UserDirectory.from_settings(settings)
    app_secret = _secret(settings.dingtalk_app_secret)
    crypto = (WeComCrypto(_secret(settings.wecom_token) or "", _secret(settings.wecom_aes_key) or "",
                          settings.wecom_corp_id or "")
              if settings.wecom_token and settings.wecom_aes_key and settings.wecom_corp_id else None)
    link_secret = _secret(settings.chatops_link_secret)
    links = (ApprovalLinks(link_secret, settings.chatops_public_url or "", settings.chatops_link_ttl_s)
             if link_secret else None)
    spent = used_nonces or UsedNonces(settings.data_dir / "chatops-links.sqlite" if settings.data_dir.is_dir()
                                      else ":memory:")
    seen = NonceCache(ttl_s=2 * WECOM_MAX_SKEW_S)

    def commands(request: Request) -> ChatCommands:
        provider = service_provider or (lambda: request.app.state.runtime)
        return ChatCommands(provider, directory, answer)

    @router.post("/webhooks/dingtalk")
    def dingtalk_callback(request: Request, body: dingtalk.OutgoingMessage) -> JSONResponse:
        if app_secret is None:
            raise HTTPException(404, "DingTalk callback is not configured (STEWARD_DINGTALK_APP_SECRET)")
        try:
            dingtalk.verify_callback(request.headers.get("timestamp"), request.headers.get("sign"), app_secret,
                                     lambda: int(now_s() * 1000))
        except dingtalk.CallbackRefused as exc:
            raise HTTPException(401, str(exc)) from None
        if not seen.first_use(f"dingtalk\x00{request.headers['timestamp']}\x00{request.headers['sign']}", now_s()):
            raise HTTPException(401, "replayed callback")
        chat_id = body.senderStaffId or body.senderId
        reply = commands(request).handle("dingtalk", chat_id, body.content)
        return JSONResponse(dingtalk.text_reply(reply))

    def _wecom_check(msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> str:
        if crypto is None:
            raise HTTPException(404, "WeCom callback is not configured (STEWARD_WECOM_TOKEN, _AES_KEY, _CORP_ID)")
        try:
            if abs(now_s() - float(timestamp)) > WECOM_MAX_SKEW_S:
                raise HTTPException(401, "stale or future timestamp")
        except ValueError:
            raise HTTPException(401, "timestamp is not a number") from None
        try:
            plain = crypto.verify_and_decrypt(msg_signature, timestamp, nonce, encrypted)
        except WeComCryptoError as exc:
            raise HTTPException(401, str(exc)) from None
        if not seen.first_use(f"wecom\x00{timestamp}\x00{nonce}", now_s()):
            raise HTTPException(401, "replayed nonce")
        return plain

    @router.get("/webhooks/wecom")
    def wecom_verify(msg_signature: str, timestamp: str, nonce: str, echostr: str) -> PlainTextResponse:
        return PlainTextResponse(_wecom_check(msg_signature, timestamp, nonce, echostr))

    @router.post("/webhooks/wecom")
    async def wecom_callback(request: Request, msg_signature: str, timestamp: str, nonce: str) -> Response:
        try:
            envelope = wecom.parse_xml((await request.body()).decode())
        except (WeComCryptoError, UnicodeDecodeError) as exc:
            raise HTTPException(400, f"not a WeCom callback: {exc}") from None
        plain = _wecom_check(msg_signature, timestamp, nonce, envelope.get("Encrypt", ""))
        message = wecom.parse_message(plain)
        if message.msg_type != "text" or not message.content:
            return PlainTextResponse("")  # events and media: acknowledged, no reply
        from starlette.concurrency import run_in_threadpool

        reply = await run_in_threadpool(commands(request).handle, "wecom", message.from_user, message.content)
        assert crypto is not None
        inner = wecom.text_reply_xml(message.from_user, crypto.corp_id, reply, int(now_s()))
        return Response(wecom.encrypted_reply(crypto, inner, int(now_s())), media_type="application/xml")

    def _claim(token: str):  # noqa: ANN202
        if links is None:
            raise HTTPException(404, "approve links are not configured (STEWARD_CHATOPS_LINK_SECRET)")
        try:
            claim = links.verify(token, now_s())
        except LinkRefused as exc:
            return None, _page("Link refused / 链接无效", f"<p>{html.escape(str(exc))}</p>", 403)
        if spent.is_used(claim.n):
            return None, _page("Link refused / 链接无效", "<p>link already used / 链接已使用</p>", 410)
        return claim, None

    @router.get("/chatops/approve", response_class=HTMLResponse)
    def approve_page(token: str) -> HTMLResponse:
        claim, refused = _claim(token)
        if refused is not None:
            return refused
        # GET only shows; link previewers and chat unfurlers must not act.
        who = (f"<p>As / 身份: <b>{html.escape(claim.r)}</b></p>" if claim.r else
               "<p><label>Your approver id / 审批人账号 <input name='by' required></label></p>")
        verb = "Approve / 批准" if claim.d == "approve" else "Deny / 拒绝"
        form = (f"<form method='post' action='approve'><input type='hidden' name='token' value='{html.escape(token)}'>"
                f"{who}<p><label>Reason / 原因 <input name='reason'></label></p>"
                f"<button type='submit'>{verb} {html.escape(claim.a)}</button></form>")
        return _page(f"{verb}: {claim.a}", form)

    @router.post("/chatops/approve", response_class=HTMLResponse)
    async def approve_act(request: Request) -> HTMLResponse:
        form = {k: v[0] for k, v in urllib.parse.parse_qs((await request.body()).decode()).items()}
        claim, refused = _claim(form.get("token", ""))
        if refused is not None:
            return refused
        if claim.r:
            by = claim.r
        else:
            by = form.get("by", "").strip()
            if not by or (directory.approvers and by not in directory.approvers):
                return _page("Not an approver / 非审批人", "<p>name one of the configured approvers</p>", 403)
        try:
            spent.spend(claim, by, now_s())
        except LinkRefused as exc:
            return _page("Link refused / 链接无效", f"<p>{html.escape(str(exc))}</p>", 410)
        service = (service_provider or (lambda: request.app.state.runtime))()
        from starlette.concurrency import run_in_threadpool

        try:
            await run_in_threadpool(service.answer, claim.a, claim.d, by=f"link:{by}",
                                    reason=form.get("reason", "") or "via chat link")
        except (ApprovalError, LookupError) as exc:
            return _page("Not taken / 未受理", f"<p>{html.escape(str(exc))}</p>", 409)
        return _page("Done / 已完成", f"<p>{html.escape(claim.a)}: {claim.d} by {html.escape(by)}</p>")

    router.links = links  # type: ignore[attr-defined]  # the card listener signs with the same secret
    return router
