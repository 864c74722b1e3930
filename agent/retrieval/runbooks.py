"""Runbooks: parse and validate the markdown files in runbooks/, and cut them into sections for retrieval.

A runbook is one markdown file with YAML front matter. English and Chinese versions of
the same procedure share one `id` (so the agent cites one id whatever the language) and
differ in `language`; files are named `<id>.md` and `<id>.<lang>.md`.
"""

from __future__ import annotations

import hashlib
import re
from datetime import date
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent.assets import RUNBOOKS_DIR
from core.files import load_yaml

FINDING_KINDS = ("idle", "zombie", "overprovisioned", "node_health", "oversized")
CHUNK_CHARS = 900  # long sections are split near this size, at a paragraph or list item
CHUNKER_VERSION = "2"

# Headings the code understands, English and Chinese; other `##` sections are kept as "other".
SECTION_KEYS = {
    "symptoms": ("symptoms", "症状"),
    "confirm": ("how to confirm", "confirm", "如何确认", "确认"),
    "remedies": ("remedies", "处置"),
    "automatic": ("what the agent may do automatically", "agent 可自动", "自动执行"),
}
REQUIRED_SECTIONS = ("symptoms", "confirm", "remedies", "automatic")


class RunbookError(ValueError):
    """A runbook file that cannot be used; the message names the file and the field."""


class RunbookMeta(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=3)
    language: Literal["en", "zh"]
    kinds: list[str] = []  # finding kinds this runbook is the primary procedure for
    alerts: list[str] = []
    max_level: int = Field(ge=0, le=4)  # the most the agent may do on its own for these findings
    # Actions above max_level this procedure proposes to a human (an incident investigation asks for approval).
    proposes: list[Literal["cordon"]] = []
    reviewed: date

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = [k for k in kinds if k not in FINDING_KINDS]
        if unknown:
            raise ValueError(f"unknown finding kind(s) {unknown}; known: {', '.join(FINDING_KINDS)}")
        return kinds


class Runbook(RunbookMeta):
    path: str
    sections: dict[str, str]  # section key -> body text
    headings: dict[str, str]  # section key -> heading as written

    @property
    def automatic(self) -> str:
        return self.sections["automatic"]


class Chunk(BaseModel):
    chunk_id: str
    runbook_id: str
    title: str
    language: str
    section: str
    text: str  # what gets embedded: title, heading and body
    body: str
    kinds: list[str]
    max_level: int


def _section_key(heading: str) -> str:
    low = heading.strip().lower()
    for key, prefixes in SECTION_KEYS.items():
        if any(low.startswith(p) for p in prefixes):
            return key
    return "other:" + re.sub(r"[^a-z0-9\u4e00-\u9fff]+", "-", low).strip("-")


def parse_runbook(path: Path) -> Runbook:
    """Parse one file; every problem is a RunbookError that names the file and the field."""
    name = path.name
    text = path.read_text(encoding="utf-8")
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n(.*)$", text, re.S)
    if not match:
        raise RunbookError(f"{name}: no YAML front matter (the file must start with '---' and close it with '---')")
    try:
        front = load_yaml(match.group(1)) or {}
    except yaml.YAMLError as exc:
        raise RunbookError(f"{name}: front matter is not valid YAML: {exc}") from None
    if not isinstance(front, dict):
        raise RunbookError(f"{name}: front matter must be a mapping of fields")
    try:
        meta = RunbookMeta.model_validate(front)
    except ValidationError as exc:
        problems = "; ".join(f"field '{'.'.join(map(str, e['loc'])) or '?'}': {e['msg']}" for e in exc.errors())
        raise RunbookError(f"{name}: {problems}") from None
    sections: dict[str, str] = {}
    headings: dict[str, str] = {}
    for part in re.split(r"^## +", match.group(2), flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        key = _section_key(heading)
        if key in sections:
            raise RunbookError(f"{name}: section '{heading.strip()}' appears twice")
        sections[key], headings[key] = body.strip(), heading.strip()
    missing = [k for k in REQUIRED_SECTIONS if not sections.get(k)]
    if missing:
        wanted = ", ".join(f"'{SECTION_KEYS[k][0]}'" for k in missing)
        raise RunbookError(f"{name}: missing or empty section(s) {wanted} (field 'sections')")
    return Runbook(**meta.model_dump(), path=name, sections=sections, headings=headings)


def runbook_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.md") if p.name.lower() != "readme.md")


def load_runbooks(directory: Path | None = None) -> list[Runbook]:
    """All runbooks in a directory, checked together: (id, language) is unique, versions agree on max_level."""
    directory = directory or RUNBOOKS_DIR
    books = [parse_runbook(p) for p in runbook_files(directory)]
    seen: dict[tuple[str, str], str] = {}
    levels: dict[str, tuple[int, str]] = {}
    for b in books:
        if (b.id, b.language) in seen:
            raise RunbookError(f"{b.path}: field 'id': {b.id!r} ({b.language}) is already used by {seen[b.id, b.language]}")
        seen[b.id, b.language] = b.path
        if b.id in levels and levels[b.id][0] != b.max_level:
            raise RunbookError(f"{b.path}: field 'max_level': {b.max_level} differs from {levels[b.id][1]} "
                               f"({levels[b.id][0]}); all language versions of {b.id!r} must agree")
        levels.setdefault(b.id, (b.max_level, b.path))
    return books


def _split(body: str, limit: int = CHUNK_CHARS) -> list[str]:
    """Split at blank lines or list items so that no piece is much longer than `limit`."""
    blocks = [b for b in re.split(r"\n(?=\s*(?:[-*] |\d+\. ))|\n\s*\n", body) if b.strip()]
    pieces: list[str] = []
    current = ""
    for block in blocks:
        if current and len(current) + len(block) + 1 > limit:
            pieces.append(current)
            current = block
        else:
            current = f"{current}\n{block}" if current else block
    if current:
        pieces.append(current)
    return pieces


def chunk_runbook(book: Runbook) -> list[Chunk]:
    """One chunk per section (more for long sections), each carrying the runbook's metadata."""
    chunks = []
    for key, body in book.sections.items():
        for n, piece in enumerate(_split(body)):
            chunks.append(Chunk(
                chunk_id=f"{book.id}.{book.language}#{key}-{n}", runbook_id=book.id, title=book.title,
                language=book.language, section=key, body=piece, kinds=book.kinds, max_level=book.max_level,
                text=f"{book.title}\n{book.headings[key]}\n{piece}",
            ))
    return chunks


def content_hash(directory: Path, *salt: str) -> str:
    """Hash of every runbook file (name and bytes) plus whatever else shapes the index."""
    h = hashlib.sha256()
    for p in runbook_files(directory):
        h.update(p.name.encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    for s in (CHUNKER_VERSION, *salt):
        h.update(s.encode())
    return h.hexdigest()
