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
    zh = book.language == "zh"
    about = (f"编号 <code>{html.escape(book.id)}</code> · 自动处理最高级别 {book.max_level} · 审阅于 {book.reviewed}" if zh
             else f"id <code>{html.escape(book.id)}</code> · max automatic level {book.max_level} · "
                  f"reviewed {book.reviewed}")
    page = (f"<!doctype html><html lang=\"{'zh-CN' if zh else 'en'}\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(book.title)}</title>"
            "<style>body{font:15px/1.6 system-ui,sans-serif;max-width:860px;margin:2rem auto;padding:0 1rem}"
            "code{background:#f3f3f3;padding:0 .2em;overflow-wrap:anywhere}"
            "pre{background:#f3f3f3;padding:.6em;overflow-x:auto}pre code{padding:0}</style></head>"
            f"<body><h1>{html.escape(book.title)}</h1><p>{about}</p>{render_markdown(_body(text))}</body></html>")
    return HTMLResponse(page)


def _body(text: str) -> str:
    """The runbook without its front matter (shown above as id, level and review date)."""
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            return text[end + 4:]
    return text


def render_markdown(text: str) -> str:
    """CommonMark to HTML with raw HTML in the source escaped, not passed through: a runbook is text, never markup
    that runs in the reader's browser."""
    from markdown_it import MarkdownIt

    return str(MarkdownIt("commonmark", {"html": False}).render(text))
