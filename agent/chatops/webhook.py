"""What a chat robot's webhook answered, read the same way for DingTalk and WeCom: an answer that is not their JSON
(a proxy's login page, a maintenance page, an HTTP error) is a WebhookError that says what came back, cut short
and without the webhook's token, key or signature."""

from __future__ import annotations

import urllib.parse
from typing import Any

import httpx

from core.text import one_line

ANSWER_CHARS = 200  # how much of an unexpected answer an error quotes


class WebhookError(RuntimeError):
    """A chat webhook did not accept a message. The text names the channel and what it answered; it never holds the
    webhook's URL or anything secret in it (it goes to the log and the audit)."""


def redact(text: str, *secrets: str | None) -> str:
    """`text` without any of `secrets`, and, for a secret that is a URL (a webhook's), without its query values
    either (access_token, key, timestamp, sign)."""
    hidden = [s for s in secrets if s]
    hidden += [value for s in hidden for _, value in urllib.parse.parse_qsl(urllib.parse.urlsplit(s).query)]
    for value in sorted({v for v in hidden if len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, "***").replace(urllib.parse.quote_plus(value), "***")
    return text


def quoted(text: str) -> str:
    """An answer as one line, at most ANSWER_CHARS long."""
    line = one_line(" ".join(text.split()))
    return line if len(line) <= ANSWER_CHARS else line[: ANSWER_CHARS - 1] + "…"


def post(channel: str, client: httpx.Client, url: str, message: dict[str, Any], *secrets: str | None) -> dict[str, Any]:
    """POST `message` to the webhook and return its JSON object; WebhookError when it cannot be reached or does not
    answer one (the caller reads the errcode)."""
    try:
        response = client.post(url, json=message)
    except httpx.HTTPError as exc:
        raise WebhookError(f"{channel} webhook could not be reached: {type(exc).__name__}: "
                           f"{quoted(redact(str(exc), url, *secrets))}") from None
    said = quoted(redact(response.text, url, *secrets)) or "an empty body"
    if response.status_code >= 400:
        raise WebhookError(f"{channel} webhook answered HTTP {response.status_code}: {said}")
    try:
        body = response.json()
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        raise WebhookError(f"{channel} webhook answered HTTP {response.status_code} with {kind}, not its JSON: "
                           f"{said}") from None
    if not isinstance(body, dict):
        raise WebhookError(f"{channel} webhook answered JSON that is not an object: {said}")
    return body


def errcode(body: dict[str, Any]) -> int:
    """The answer's errcode; -1 when it has none or not a number."""
    try:
        return int(body.get("errcode", -1))
    except (TypeError, ValueError):
        return -1
