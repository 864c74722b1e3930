"""Reading the YAML files operators write (scenarios, policies) with errors that name file and key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError


def format_validation_errors(source: str, error: ValidationError) -> str:
    """One line per problem: `file: key.path[3].name: what is wrong`."""
    parts = []
    for item in error.errors():
        loc = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in item["loc"]).replace(".[", "[")
        parts.append(f"{source}: {loc or '(top level)'}: {item['msg']}")
    return "\n".join(parts)


def read_yaml(path: str | Path, error: type[Exception]) -> Any:
    """Parsed YAML, or `error` naming the file and why it could not be read or parsed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {exc}") from None
