"""Who is calling: API tokens, or a trusted OIDC proxy's headers; viewer (read, chat) and approver roles.

With neither configured the server is in local development mode: every caller is the local
approver, which is only safe because `steward serve` then refuses to bind anything but loopback.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request
from pydantic import BaseModel

from agent.config.settings import Settings

Role = Literal["viewer", "approver"]
AuthMode = Literal["tokens", "proxy", "local-dev"]
_RANK = {"viewer": 0, "approver": 1}


class Principal(BaseModel):
    name: str
    role: Role
    via: AuthMode


def auth_mode(settings: Settings) -> AuthMode:
    if settings.api_tokens:
        return "tokens"
    return "proxy" if settings.trust_proxy_headers else "local-dev"


def identify(request: Request, settings: Settings) -> Principal | None:
    """The caller, or None when no credential is valid. Tokens win over proxy headers."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer ") and settings.api_tokens:
        entry = settings.api_tokens.get(header[7:].strip())
        return Principal(name=entry.name, role=entry.role, via="tokens") if entry else None
    if settings.trust_proxy_headers:
        user = request.headers.get(settings.proxy_user_header, "").strip()
        if user:
            groups = {g.strip() for g in request.headers.get(settings.proxy_groups_header, "").split(",")}
            role: Role = "approver" if groups & set(settings.approver_groups) else "viewer"
            return Principal(name=user, role=role, via="proxy")
    if auth_mode(settings) == "local-dev":
        return Principal(name="local-dev", role="approver", via="local-dev")
    return None


def require(role: Role):  # noqa: ANN201 - a FastAPI dependency
    def dependency(request: Request) -> Principal:
        settings: Settings = request.app.state.settings
        who = identify(request, settings)
        if who is None:
            raise HTTPException(401, "missing or invalid credentials: send 'Authorization: Bearer <token>'",
                                headers={"WWW-Authenticate": "Bearer"})
        if _RANK[who.role] < _RANK[role]:
            raise HTTPException(403, f"{who.name} is a {who.role}; this needs the {role} role")
        return who

    return dependency


Viewer = Annotated[Principal, Depends(require("viewer"))]
Approver = Annotated[Principal, Depends(require("approver"))]
