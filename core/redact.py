"""Scrub secrets out of log text before it reaches a chat model, the web UI or a notification.

Each pattern's match becomes `[REDACTED:<name>]`. A pattern with a named group `v` replaces only that group
(the key and separator stay: `password=[REDACTED:password]`; surrounding quotes stay too). Patterns run in
order, key=value ones before token shapes, so a whole value goes at once. A match overlapping an earlier
`[REDACTED:...]` is left alone and the search resumes one character on, which keeps `redact` idempotent.
Every regex has a literal anchor and a lookbehind that stops a scan restarting inside a run, and no nested
quantifiers: linear on big inputs.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_TOKEN = re.compile(r"\[REDACTED:[A-Za-z0-9_.-]{1,40}\]")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
# A key=value value: a quoted string (quotes kept) or a run up to whitespace, a quote or a list separator.
_VALUE = r"""(?P<v>"[^"\n]+"|'[^'\n]+'|[^\s"',;&，；]+)"""


@dataclass(frozen=True)
class Pattern:
    name: str
    regex: str
    flags: int = 0


def _kv(name: str, keys: str, cjk: str = "", guard: str = "") -> Pattern:
    """`<key> = value` / `"key": "value"` / `密码：value`; an ASCII key matches whole or as a `_`/`-`/`.` suffix."""
    keys = rf"(?<![A-Za-z0-9])(?:{keys})" + (f"|{cjk}" if cjk else "")
    return Pattern(name, rf"""(?:{keys})["']?[ \t]*[:=：＝][ \t]*{guard}{_VALUE}""", re.IGNORECASE)


_B64URL = "[A-Za-z0-9_-]"
DEFAULT_PATTERNS: tuple[Pattern, ...] = (
    # BEGIN through END over any lines; a truncated block (no END) loses its header and whole base64 lines.
    Pattern("private_key", r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----(?:(?:[^-]|-(?!----))*"
                           r"-----END[A-Z ]{0,40}PRIVATE KEY-----|[A-Za-z0-9+/=\r\n]*(?![^\r\n]))"),
    Pattern("bearer", r"""(?<![A-Za-z0-9])bearer[ \t]+(?P<v>[^\s"',;]+)""", re.IGNORECASE),
    # scheme://user:pass@host keeps the scheme and host; the password may itself hold an '@'.
    Pattern("url_credentials", r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?P<v>[^\s/@:]*:[^\s/]+)@"),
    _kv("aws_secret_key", r"secret[_-]?access[_-]?key"),
    _kv("password", r"password|passwd|pwd(?!=[/~])", "密码|口令"),  # PWD=/home/... is a working directory
    # pad_token=<pad>, eos_token: '</s>', mask_token=[MASK] are tokenizer settings, not credentials.
    _kv("token", r"access_token|token", "令牌", guard=r"""(?!["']?[<\[])"""),
    _kv("secret", r"secret", "密钥|秘钥"),
    _kv("api_key", r"api[_-]?key"),
    _kv("key", r"key"),
    Pattern("aws_access_key_id", r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
    Pattern("github_token", r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}|(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{20,}"),
    Pattern("openai_key", r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}"),
    Pattern("slack_token", r"(?<![A-Za-z0-9-])xox[abpr]-[A-Za-z0-9-]{10,}"),
    Pattern("hf_token", r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
    # A JWT whose payload opens with the service-account issuer or the in-cluster audience, or the
    # base64 of a JWT (`ZXlK` = base64 "eyJ") as a Secret's data.token holds it.
    Pattern("k8s_sa_token", rf"(?<!{_B64URL})eyJ{_B64URL}+\.(?:eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50"
                            rf"|eyJhdWQiOlsiaHR0cHM6Ly9rdWJlcm5ldGVz){_B64URL}*\.{_B64URL}*"
                            r"|(?<![A-Za-z0-9+/])ZXlK[A-Za-z0-9+/]{60,}={0,2}"),
    Pattern("jwt", rf"(?<!{_B64URL})eyJ{_B64URL}+\.{_B64URL}+\.{_B64URL}*"),
    # Both ends closed so that redacting one address cannot expose a match the lookbehind had blocked.
    Pattern("email", r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9_%+-][A-Za-z0-9._%+-]*@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"
                     r"(?![A-Za-z0-9_%+-])"),
)


def _apply(name: str, rx: re.Pattern[str], text: str) -> tuple[str, int]:
    spans = [m.span() for m in _TOKEN.finditer(text)]
    starts = [s for s, _ in spans]
    has_v, token = "v" in rx.groupindex, f"[REDACTED:{name}]"
    parts: list[str] = []
    last = pos = count = 0
    while pos <= len(text) and (m := rx.search(text, pos)):
        a, b = m.span("v") if has_v and m.group("v") is not None else m.span()
        i = bisect_right(starts, b - 1) - 1  # the last earlier token starting before b ends furthest right
        if a == b or (i >= 0 and spans[i][1] > a):  # empty, or over an earlier redaction: retry one further on
            pos = m.start() + 1
            continue
        value = text[a:b]
        quote = value[0] if len(value) > 1 and value[0] in "\"'" and value[-1] == value[0] else ""
        parts += [text[last:a], quote, token, quote]
        last, pos, count = b, m.end(), count + 1
    parts.append(text[last:])
    return "".join(parts), count


class Redactor:
    """The defaults, then `extra` ({name, regex} or Pattern) in order, less the names in `disabled`."""

    def __init__(self, extra: Iterable[Mapping[str, str] | Pattern] = (), disabled: Iterable[str] = ()) -> None:
        patterns = list(DEFAULT_PATTERNS)
        for item in extra:
            p = item if isinstance(item, Pattern) else Pattern(str(item.get("name", "")), str(item.get("regex", "")))
            if not _NAME.fullmatch(p.name):
                raise ValueError(f"redaction pattern name {p.name!r} must be 1-40 of A-Z a-z 0-9 _ . -")
            if not p.regex:
                raise ValueError(f"redaction pattern {p.name!r} has no regex")
            patterns.append(p)
        off = set(disabled)
        unknown = off - {p.name for p in patterns}
        if unknown:
            raise ValueError(f"unknown redaction pattern name(s) to disable: {sorted(unknown)}")
        self.patterns = tuple(p for p in patterns if p.name not in off)
        self._compiled: list[tuple[str, re.Pattern[str]]] = []
        for p in self.patterns:
            try:
                self._compiled.append((p.name, re.compile(p.regex, p.flags)))
            except (re.error, TypeError) as e:
                raise ValueError(f"redaction pattern {p.name!r} has an invalid regex: {e}") from e

    def redact_count(self, text: str) -> tuple[str, int]:
        total = 0
        for name, rx in self._compiled:
            text, n = _apply(name, rx, text)
            total += n
        return text, total

    def redact(self, text: str) -> str:
        return self.redact_count(text)[0]


DEFAULT_REDACTOR = Redactor()
