"""The explanation prompt: one finding, its runbook sections and the cluster's own text, for a chat model."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from agent.planning.prompts import fence_untrusted, render, template_name
from core.actions import Finding

LANGUAGE_NAMES = {"en": "English", "zh": "Chinese (简体中文)"}


def explain_messages(finding: Finding, runbook_hits: list[dict[str, Any]], cluster_text: str, question: str,
                     *, language: str, now: datetime, scheduler: str = "Kubernetes") -> list[BaseMessage]:
    """System + user messages; the finding, the cluster text and the question are fenced as untrusted data."""
    language_name = LANGUAGE_NAMES.get(language, "English")
    runbook_id = finding.runbook or (runbook_hits[0]["id"] if runbook_hits else "none")
    excerpts = "\n\n".join(f"[{h['id']} / {h['section']}]\n{h['excerpt']}" for h in runbook_hits
                           if h["id"] == runbook_id) or "(no runbook matched)"
    row = {"target": finding.target, "kind": finding.kind, "since": finding.since.isoformat(), "gpus": finding.gpus,
           "waste_gpu_hours": finding.waste_gpu_hours, "evidence": finding.evidence}
    system = render(template_name("system", language), now, scheduler=scheduler, language_name=language_name)
    user = render(
        template_name("explain", language), now, target=finding.target, language_name=language_name,
        runbook_id=runbook_id, runbook_excerpt=excerpts,
        finding=fence_untrusted("detectors", json.dumps(row, ensure_ascii=False, indent=1)),
        cluster_text=fence_untrusted("cluster", cluster_text) if cluster_text.strip() else "(none)",
        question=fence_untrusted("operator", question),
    )
    return [SystemMessage(system), HumanMessage(user)]
