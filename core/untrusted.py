"""Cluster-supplied text (logs, labels, alerts) fenced as data, so a model reads it as data, never as instructions."""

from __future__ import annotations


def fence_untrusted(label: str, text: str) -> str:
    """Wrap cluster-supplied text so the model reads it as data, never as instructions."""
    cleaned = text.replace("</untrusted>", "</untrusted_>")
    return f'<untrusted source="{label}">\n{cleaned}\n</untrusted>'
