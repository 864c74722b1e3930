"""Reading the YAML files operators write (scenarios, policies) with errors that name file and key."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose keys are valid at `loc` (list indexes and dict keys looked through), or None."""
    for part in loc:
        if model is None:
            return None
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue  # an index into a list, or a key of a mapping: the same element type
        model = _inner_model(field.annotation)
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _unknown_key(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> str:
    """`unknown key; did you mean 'max_auto'?`, or the keys allowed there."""
    owner = _model_at(model, loc[:-1])
    if owner is None:
        return "unknown key"
    names = list(owner.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return f"unknown key; the keys here are: {', '.join(names)}"


def format_validation_errors(source: str, error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per problem: `file: key.path[3].name: what is wrong` (an unknown key: the close valid one)."""
    parts = []
    for item in error.errors():
        loc = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in item["loc"]).replace(".[", "[")
        msg = _unknown_key(model, tuple(item["loc"])) if item["type"] == "extra_forbidden" else item["msg"]
        parts.append(f"{source}: {loc or '(top level)'}: {msg}")
    return "\n".join(parts)


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that names a key twice. PyYAML keeps the last silently, so a policy
    edited by two people with `protection:` twice would drop the first block's protections without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`, whose keys a mapping may override
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the safe loader's own error names it below
                continue
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"key {key!r} appears twice in one mapping (lines {first.start_mark.line + 1} and "
                    f"{key_node.start_mark.line + 1}); YAML would keep only the last one, silently: merge the two",
                    key_node.start_mark)
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, except that a key given twice in one mapping is an error (`yaml.YAMLError`)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 -- a SafeLoader subclass


def read_yaml(path: str | Path, error: type[Exception]) -> Any:
    """Parsed YAML, or `error` naming the file and why it could not be read or parsed."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"{path}: not UTF-8 at byte {exc.start} (line {line}); save the file as UTF-8 (an editor's GBK or "
                    f"ANSI encoding is not read)") from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = " ".join(str(x) for x in (getattr(exc, "context", None), getattr(exc, "problem", None)) if x)
        raise error(f"{path}: not valid YAML{where}: {what or exc}") from None
    except RecursionError:  # the parser recurses per level: "a: [[[[...]]]]" thousands deep
        raise error(f"{path}: nested too deeply to read (thousands of levels of lists or mappings); no policy, "
                    f"scenario or runbook needs more than a few") from None
