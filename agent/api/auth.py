"""Who is calling: API tokens, or a trusted OIDC proxy's headers; viewer (read, chat) and approver roles.

With neither configured the server is in local development mode: every caller is the local
approver, which is only safe because `steward serve` then refuses to bind anything but loopback
(and agent.api.guard refuses foreign Host headers and cross-site posts).

Proxy headers are believed only from a request that proves it came through the proxy: its peer
address is in `trusted_proxies`, and/or it carries the shared `proxy_secret` header. A header
sent twice is refused, never resolved by picking one copy.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request
from pydantic import BaseModel

from agent.config.settings import Settings

Role = Literal["viewer", "approver"]
AuthMode = Literal["tokens", "proxy", "local-dev"]
_RANK = {"viewer": 0, "approver": 1}
MAX_USER_CHARS = 256


class Principal(BaseModel):
    name: str
    role: Role
    via: AuthMode


class CredentialsRefused(ValueError):
    """Credentials that are present but unusable (a header sent twice, an unusable user name): 401 with why."""


def auth_mode(settings: Settings) -> AuthMode:
    if settings.api_tokens:
        return "tokens"
    return "proxy" if settings.trust_proxy_headers else "local-dev"


def _networks(settings: Settings) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(entry.strip(), strict=False) for entry in settings.trusted_proxies]


def check_access_settings(settings: Settings) -> None:
    """ValueError naming the setting when the access settings cannot be served safely."""
    for entry in settings.trusted_proxies:
        try:
            ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            raise ValueError(f"STEWARD_TRUSTED_PROXIES: {entry!r} is not an IP address or CIDR range") from None
    if settings.trust_proxy_headers and not settings.trusted_proxies and settings.proxy_secret is None:
        raise ValueError(
            "STEWARD_TRUST_PROXY_HEADERS=true needs STEWARD_TRUSTED_PROXIES (the proxy's addresses, e.g. "
            "'[\"10.0.0.7\"]') or STEWARD_PROXY_SECRET (a header only the proxy adds); without either, anyone "
            "who reaches the port could claim any user (docs/access-control.md)")
    if settings.proxy_secret is not None and len(settings.proxy_secret.get_secret_value()) < 16:
        raise ValueError("STEWARD_PROXY_SECRET needs at least 16 characters")


def _one_header(request: Request, name: str) -> str | None:
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise CredentialsRefused(f"{name} was sent {len(values)} times; refused as ambiguous (the proxy must "
                                 f"strip the client's copies) / {name} 出现了 {len(values)} 次，存在歧义，已拒绝")
    return values[0] if values else None


def from_trusted_proxy(request: Request, settings: Settings) -> bool:
    """Whether the request proves it came through the configured proxy (every configured proof must hold)."""
    if not settings.trusted_proxies and settings.proxy_secret is None:
        return False
    if settings.trusted_proxies:
        try:
            peer = ipaddress.ip_address(request.client.host if request.client else "")
        except ValueError:
            return False
        if not any(peer in network for network in _networks(settings)):
            return False
    if settings.proxy_secret is not None:
        sent = _one_header(request, settings.proxy_secret_header)
        expected = settings.proxy_secret.get_secret_value().encode()
        if sent is None or not hmac.compare_digest(sent.encode("latin-1", "replace"), expected):
            return False
    return True


def identify(request: Request, settings: Settings) -> Principal | None:
    """The caller, or None when no credential is valid. Tokens win over proxy headers.

    CredentialsRefused when proxy headers are ambiguous (sent twice) or unusable.
    """
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer ") and settings.api_tokens:
        entry = settings.api_tokens.get(header[7:].strip())
        return Principal(name=entry.name, role=entry.role, via="tokens") if entry else None
    if settings.trust_proxy_headers:
        user = (_one_header(request, settings.proxy_user_header) or "").strip()
        groups_header = _one_header(request, settings.proxy_groups_header) or ""
        if user and from_trusted_proxy(request, settings):
            if len(user) > MAX_USER_CHARS or "," in user or not user.isprintable():
                raise CredentialsRefused(f"{settings.proxy_user_header} is not a usable user name / 用户名无效")
            groups = {g.strip() for g in groups_header.split(",")}
            role: Role = "approver" if groups & set(settings.approver_groups) else "viewer"
            return Principal(name=user, role=role, via="proxy")
    if auth_mode(settings) == "local-dev":
        return Principal(name="local-dev", role="approver", via="local-dev")
    return None


UNAUTHENTICATED = ("missing or invalid credentials: send 'Authorization: Bearer <token>' / "
                   "缺少或无效的凭据：请发送 'Authorization: Bearer <token>'")


def require(role: Role):  # noqa: ANN201 - a FastAPI dependency
    def dependency(request: Request) -> Principal:
        settings: Settings = request.app.state.settings
        try:
            who = identify(request, settings)
        except CredentialsRefused as exc:
            raise HTTPException(401, str(exc), headers={"WWW-Authenticate": "Bearer"}) from None
        if who is None:
            raise HTTPException(401, UNAUTHENTICATED, headers={"WWW-Authenticate": "Bearer"})
        if _RANK[who.role] < _RANK[role]:
            raise HTTPException(403, f"{who.name} is a {who.role}; this needs the {role} role")
        return who

    return dependency


Viewer = Annotated[Principal, Depends(require("viewer"))]
Approver = Annotated[Principal, Depends(require("approver"))]
