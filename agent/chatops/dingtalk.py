"""DingTalk custom robot: signed webhook sends (markdown, ActionCard) and the outgoing @-mention callback."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from agent.chatops.webhook import WebhookError, errcode, post, quoted

CALLBACK_MAX_AGE_MS = 3600 * 1000  # DingTalk's rule: a callback older than an hour is refused
CALLBACK_FUTURE_SKEW_MS = 60 * 1000  # a little clock skew, no more
# A taken (timestamp, sign) is remembered while its timestamp could still be accepted: max age + skew, and a
# second more: the age is checked in whole milliseconds, the seen-time is kept to the microsecond, so a callback
# taken at the future-skew edge could otherwise be replayed just under a millisecond after its key was forgotten.
REPLAY_MARGIN_S = 1.0
REPLAY_KEEP_S = (CALLBACK_MAX_AGE_MS + CALLBACK_FUTURE_SKEW_MS) / 1000 + REPLAY_MARGIN_S
MAX_TEXT_CHARS = 4000  # the web chat's limit


class DingTalkError(WebhookError):
    """DingTalk refused a message: errcode and errmsg as it said them (310000: signature or keyword)."""

    def __init__(self, errcode: int, errmsg: str) -> None:
        super().__init__(f"DingTalk errcode {errcode}: {quoted(errmsg)}")
        self.errcode, self.errmsg = errcode, errmsg


class CallbackRefused(ValueError):
    """A callback that does not authenticate: forged, stale or from the future."""


def sign(timestamp_ms: int | str, secret: str) -> str:
    """base64(HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}")): both the robot and the callback scheme."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def signed_url(webhook_url: str, secret: str | None, now_ms: int | None = None) -> str:
    """The webhook URL with &timestamp=…&sign=… appended (the sign URL-encoded), or as is without a secret."""
    if not secret:
        return webhook_url
    ts = now_ms if now_ms is not None else int(time.time() * 1000)
    joiner = "&" if "?" in webhook_url else "?"
    return f"{webhook_url}{joiner}timestamp={ts}&sign={urllib.parse.quote_plus(sign(ts, secret))}"


def markdown_message(title: str, text: str, *, at_user_ids: Sequence[str] = (), at_mobiles: Sequence[str] = ()) -> dict:
    """A markdown message; @-mentions need both the `at` block and the @id in the text."""
    mentions = " ".join(f"@{x}" for x in [*at_user_ids, *at_mobiles])
    return {"msgtype": "markdown", "markdown": {"title": title, "text": f"{text}\n\n{mentions}".rstrip()},
            "at": {"atUserIds": list(at_user_ids), "atMobiles": list(at_mobiles), "isAtAll": False}}


def action_card(title: str, text: str, buttons: list[tuple[str, str]]) -> dict:
    """An ActionCard with one button per (label, url), side by side."""
    return {"msgtype": "actionCard",
            "actionCard": {"title": title, "text": text, "btnOrientation": "1",
                           "btns": [{"title": label, "actionURL": url} for label, url in buttons]}}


class DingTalkRobot:
    """Sends to one custom robot webhook; raises DingTalkError when DingTalk answers errcode != 0, WebhookError when
    it cannot be reached or answers anything but its JSON (an HTML page from a proxy, an HTTP error)."""

    def __init__(self, webhook_url: str, secret: str | None = None, *, client: httpx.Client | None = None,
                 timeout_s: float = 10.0) -> None:
        self.webhook_url, self.secret = webhook_url, secret
        self._client = client or httpx.Client(timeout=timeout_s)

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        body = post("DingTalk", self._client, signed_url(self.webhook_url, self.secret), message, self.secret)
        if errcode(body) != 0:
            raise DingTalkError(errcode(body), str(body.get("errmsg", "")))
        return body


class OutgoingText(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # No max_length here: the body is bounded by the server's body limit, and a message over MAX_TEXT_CHARS is
    # answered with a reply naming the limit (the router), not refused with a 422 DingTalk shows to nobody.
    content: str = ""


class OutgoingMessage(BaseModel):
    """The JSON body DingTalk posts when someone @-mentions the robot (outgoing mode).

    Nothing in it is signed: DingTalk's `sign` header covers only the timestamp, so the sender ids and the
    text are whatever the poster wrote. They may answer questions and keep a job, never answer an approval.
    """

    model_config = ConfigDict(extra="ignore")

    msgtype: str = Field("text", max_length=64)
    text: OutgoingText = OutgoingText()
    senderNick: str = Field("", max_length=256)
    senderStaffId: str = Field("", max_length=256)
    senderId: str = Field("", max_length=256)
    conversationId: str = Field("", max_length=256)
    sessionWebhook: str = Field("", max_length=2048)

    @property
    def content(self) -> str:
        return self.text.content.strip()


def verify_callback(timestamp: str | None, signature: str | None, app_secret: str,
                    now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
    """Check the `timestamp` and `sign` headers of an outgoing callback; CallbackRefused if they fail."""
    if not timestamp or not signature:
        raise CallbackRefused("missing timestamp or sign header")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 16):
        raise CallbackRefused("timestamp is not a number of milliseconds")
    if not (signature.isascii() and len(signature) <= 128):
        raise CallbackRefused("signature does not match")
    ts = int(timestamp)
    age = now_ms() - ts
    if age > CALLBACK_MAX_AGE_MS:
        raise CallbackRefused("timestamp is more than an hour old")
    if age < -CALLBACK_FUTURE_SKEW_MS:
        raise CallbackRefused("timestamp is in the future")
    if not hmac.compare_digest(sign(timestamp, app_secret), signature):
        raise CallbackRefused("signature does not match")


def text_reply(content: str) -> dict:
    """What the callback answers in its response body: DingTalk posts it into the conversation."""
    return {"msgtype": "text", "text": {"content": content}}
