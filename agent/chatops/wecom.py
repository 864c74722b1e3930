"""WeCom (企业微信): group robot sends (markdown, template_card) and the app callback's XML envelopes."""

from __future__ import annotations

import re
import secrets
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import BaseModel

from agent.chatops.webhook import WebhookError, errcode, post, quoted
from agent.chatops.wecom_crypto import WeComCrypto, WeComCryptoError


class WeComError(WebhookError):
    """The robot webhook refused a message (errcode != 0), e.g. 93000 invalid webhook key."""

    def __init__(self, errcode: int, errmsg: str) -> None:
        super().__init__(f"WeCom errcode {errcode}: {quoted(errmsg)}")
        self.errcode, self.errmsg = errcode, errmsg


def markdown_message(text: str, *, mention_user_ids: Sequence[str] = ()) -> dict:
    """A markdown message; robots @-mention with <@userid> inside markdown."""
    mentions = " ".join(f"<@{u}>" for u in mention_user_ids)
    return {"msgtype": "markdown", "markdown": {"content": f"{text}\n{mentions}".rstrip()}}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def approval_card(title: str, desc: str, body: str, buttons: list[tuple[str, str]], detail_url: str) -> dict:
    """A text_notice template_card: the title and a one-line `desc`, the `body` (evidence, deadline) below, and a
    jump list opening each (label, url). Tapping the card itself (a text_notice card must open something) opens
    `detail_url`, the steward's own page, never an answer: only a button answers."""
    return {"msgtype": "template_card", "template_card": {
        "card_type": "text_notice", "main_title": {"title": title[:36], "desc": desc[:44]},
        "sub_title_text": _cut(body or desc, 400),
        "jump_list": [{"type": 1, "title": label, "url": url} for label, url in buttons],
        "card_action": {"type": 1, "url": detail_url},
    }}


class WeComRobot:
    """Sends to one group robot webhook (…/cgi-bin/webhook/send?key=…); raises WeComError when WeCom answers
    errcode != 0, WebhookError when it cannot be reached or answers anything but its JSON."""

    def __init__(self, webhook_url: str, *, client: httpx.Client | None = None, timeout_s: float = 10.0) -> None:
        self.webhook_url = webhook_url
        self._client = client or httpx.Client(timeout=timeout_s)

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        body = post("WeCom", self._client, self.webhook_url, message)
        if errcode(body) != 0:
            raise WeComError(errcode(body), str(body.get("errmsg", "")))
        return body


class WeComMessage(BaseModel):
    """The decrypted inner message of an app callback."""

    to_user: str = ""
    from_user: str = ""
    msg_type: str = ""
    content: str = ""
    agent_id: str = ""


def parse_xml(text: str) -> dict[str, str]:
    """Flat <xml><Tag>value</Tag>…</xml>; documents with a DOCTYPE (entity tricks) are refused."""
    if "<!DOCTYPE" in text.upper() or "<!ENTITY" in text.upper():
        raise WeComCryptoError("XML with a DOCTYPE is refused")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise WeComCryptoError(f"not XML: {exc}") from None
    return {child.tag: (child.text or "") for child in root}


_ENCRYPT = re.compile(rb"<Encrypt>\s*(?:<!\[CDATA\[)?([A-Za-z0-9+/=]+)(?:\]\]>)?\s*</Encrypt>")


def envelope_encrypt(body: bytes) -> str:
    """The Encrypt field of a callback envelope, found without an XML parser: the signature covers only this
    field, so nothing parses the rest of an unauthenticated body (WeComCryptoError when it is not there)."""
    found = _ENCRYPT.findall(body)
    if len(found) != 1:
        raise WeComCryptoError("no single <Encrypt> field of base64 text")
    return found[0].decode("ascii")


def parse_message(inner_xml: str) -> WeComMessage:
    fields = parse_xml(inner_xml)
    return WeComMessage(to_user=fields.get("ToUserName", ""), from_user=fields.get("FromUserName", ""),
                        msg_type=fields.get("MsgType", ""), content=fields.get("Content", "").strip(),
                        agent_id=fields.get("AgentID", ""))


def _cdata(value: str) -> str:
    return "<![CDATA[" + value.replace("]]>", "]]]]><![CDATA[>") + "]]>"


def text_reply_xml(to_user: str, from_corp: str, content: str, now_s: int | None = None) -> str:
    """The plaintext passive reply (a text message back to the sender)."""
    return (f"<xml><ToUserName>{_cdata(to_user)}</ToUserName><FromUserName>{_cdata(from_corp)}</FromUserName>"
            f"<CreateTime>{now_s or int(time.time())}</CreateTime><MsgType>{_cdata('text')}</MsgType>"
            f"<Content>{_cdata(content)}</Content></xml>")


def encrypted_reply(crypto: WeComCrypto, plain_xml: str, now_s: int | None = None) -> str:
    """The passive reply envelope: Encrypt, MsgSignature, TimeStamp, Nonce."""
    timestamp, nonce = str(now_s or int(time.time())), secrets.token_hex(8)
    encrypted = crypto.encrypt(plain_xml)
    return (f"<xml><Encrypt>{_cdata(encrypted)}</Encrypt>"
            f"<MsgSignature>{_cdata(crypto.sign(timestamp, nonce, encrypted))}</MsgSignature>"
            f"<TimeStamp>{timestamp}</TimeStamp><Nonce>{_cdata(nonce)}</Nonce></xml>")
