"""GET /runbooks/{id}: a runbook as a plain page, so `[rb:<id>]` references in chat and findings are links."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse

from agent.api.auth import Viewer
from agent.retrieval.runbooks import RUNBOOKS_DIR, Runbook, load_runbooks

router = APIRouter(tags=["runbooks"])


def _directory(request: Request) -> Path:
    return Path(getattr(request.app.state.settings, "runbooks_dir", None) or RUNBOOKS_DIR)


@router.get("/runbooks/{runbook_id}", response_class=HTMLResponse)
def runbook_page(runbook_id: Annotated[str, PathParam(max_length=100)], request: Request, _: Viewer,
                 lang: Annotated[str, Query(max_length=8)] = "en") -> HTMLResponse:
    """The runbook in the asked language (else English), as written: markdown shown as text."""
    directory = _directory(request)
    versions: dict[str, Runbook] = {b.language: b for b in load_runbooks(directory) if b.id == runbook_id}
    book = versions.get(lang) or versions.get("en") or next(iter(versions.values()), None)
    if book is None:
        raise HTTPException(status_code=404, detail=f"no runbook with id {runbook_id!r}")
    text = (directory / Path(book.path).name).read_text(encoding="utf-8")
    page = (f"<!doctype html><html lang=\"{book.language}\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(book.title)}</title>"
            "<style>body{font:15px/1.55 system-ui,sans-serif;max-width:860px;margin:2rem auto;padding:0 1rem}"
            "pre{white-space:pre-wrap}</style></head>"
            f"<body><h1>{html.escape(book.title)}</h1><p>id <code>{html.escape(book.id)}</code> · max automatic "
            f"level {book.max_level} · reviewed {book.reviewed}</p><pre>{html.escape(text)}</pre></body></html>")
    return HTMLResponse(page)
