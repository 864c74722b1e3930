"""The LangGraph state machine: observe -> detect -> plan -> guardrail -> approval -> execute -> report.

A sweep runs in its own thread. An action that needs a human runs in a thread of its
own (mode "approval", thread id = the approval's opaque id) that stops at `interrupt()`
and is resumed exactly once with `Command(resume=...)`; the approved action is executed
as it was decided, never re-planned.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agent.deps import StewardDeps
from agent.detectors.engine import run_detectors
from agent.execute import execute_action, fresh_facts, remember_outcome
from agent.guardrail import decide
from agent.models import ActionOutcome, Finding, GuardedAction, ProposedAction
from agent.report import render_report
from agent.runbook_limits import limit_by_runbook
from agent.state import StewardState

_NUMBERS = re.compile(r"\d+(?:[.:]\d+)*")


def _findings(state: StewardState) -> list[Finding]:
    return [Finding.model_validate(f) for f in state.get("findings", [])]


def build_graph(deps: StewardDeps, checkpointer: Any = None):  # noqa: ANN201 - CompiledStateGraph
    """Wire the nodes around `deps`; nothing is created at import time."""

    def route_start(state: StewardState) -> Literal["observe", "approval"]:
        return "approval" if state.get("mode") == "approval" else "observe"

    def observe(state: StewardState) -> dict[str, Any]:
        obs = deps.observe()
        deps.remember(state["run_id"], obs)
        gpus = len(obs.gpus)
        return {"at": obs.at.isoformat(), "observed": {
            "jobs": len(obs.jobs), "gpus": gpus, "nodes": len(obs.nodes), "pools": len(obs.pools),
            "logs_read": len(obs.logs), "backend_calls": obs.backend_calls}}

    def detect(state: StewardState) -> dict[str, Any]:
        obs = deps.observation(state["run_id"])
        findings = run_detectors(obs, deps.policy)
        if deps.runbook_search is not None:
            searched: dict[str, str | None] = {}
            findings = [_with_runbook(f, searched) for f in findings]
        for f in findings:
            deps.audit.record("finding", at=obs.at, run_id=state["run_id"], target=f.target, action=None,
                              status=f.kind, reason=f.evidence,
                              data={"kind": f.kind, "since": f.since.isoformat(), "gpus": f.gpus,
                                    "waste_gpu_hours": f.waste_gpu_hours, "waste_cost": f.waste_cost,
                                    "runbook": f.runbook})
        return {"findings": [f.model_dump(mode="json") for f in findings]}

    def _with_runbook(f: Finding, searched: dict[str, str | None]) -> Finding:
        # Findings that differ only in their numbers share one search: hundreds of idle jobs, a few queries.
        query = f"{f.kind} {_NUMBERS.sub('#', f.evidence)}"
        if query not in searched:
            try:
                hits = deps.runbook_search(f"{f.kind} {f.evidence}", f.kind, 1)
            except Exception:  # retrieval is advisory; a broken index must not stop a sweep
                hits = []
            searched[query] = hits[0]["id"] if hits else None
        runbook = searched[query]
        return f.model_copy(update={"runbook": runbook}) if runbook else f

    def plan(state: StewardState) -> dict[str, Any]:
        obs = deps.observation(state["run_id"])
        history = deps.audit.history(obs.at)
        result = deps.planner.plan(_findings(state), obs, history, deps)
        for p in result.proposals:
            deps.audit.record("proposal", at=obs.at, run_id=state["run_id"], target=p.target, action=p.action,
                              level=p.level, status="proposed", reason=p.reason,
                              data={"proposed_by": p.proposed_by, "finding_kind": p.finding_kind,
                                    "target_nodes": p.target_nodes})
        summary = result.model_dump(mode="json", exclude={"proposals"})
        return {"plan": summary, "proposals": [p.model_dump(mode="json") for p in result.proposals]}

    def guardrail(state: StewardState) -> Command[Literal["execute", "report"]]:
        run_id = state["run_id"]
        findings = _findings(state)
        now = datetime.fromisoformat(state["at"])
        history = deps.audit.history(now)
        decided: list[dict[str, Any]] = []
        waiting: list[dict[str, Any]] = []
        for raw in state.get("proposals", []):
            proposal = ProposedAction.model_validate(raw)
            facts = fresh_facts(deps, run_id, proposal.target, findings, reread_job=False)
            decision = limit_by_runbook(decide(proposal, facts, deps.policy, history), proposal, findings,
                                        deps.runbook_max_level)
            ga = GuardedAction(id=f"{run_id}:{proposal.key()}", proposal=proposal, decision=decision, decided_at=now)
            deps.audit.record("decision", at=now, run_id=run_id, target=proposal.target, action=proposal.action,
                              level=decision.level, status=decision.verdict, reason=decision.reason,
                              data={"rule": decision.rule, "dry_run": decision.dry_run, "action_id": ga.id})
            (waiting if decision.verdict == "needs_approval" else decided).append(ga.model_dump(mode="json"))
        goto: Literal["execute", "report"] = (
            "execute" if any(d["decision"]["verdict"] == "allow" for d in decided) else "report"
        )
        return Command(goto=goto, update={"decisions": decided + waiting, "approval_requests": waiting})

    def approval(state: StewardState) -> Command[Literal["execute", "report"]]:
        request = state["approval_requests"][0]
        answer = interrupt({"approval_id": state["approval"]["id"], "action": request["proposal"],
                            "decision": request["decision"]})
        if not isinstance(answer, dict) or answer.get("decision") not in ("approve", "deny", "expire"):
            raise ValueError(f"approval resume value must be {{'decision': approve|deny|expire}}, got {answer!r}")
        update = {"approval": {**state["approval"], **answer}}
        if answer["decision"] == "approve":
            return Command(goto="execute", update=update)
        ga = GuardedAction.model_validate(request)
        status = "denied_by_human" if answer["decision"] == "deny" else "expired"
        out = ActionOutcome(id=ga.id, action=ga.proposal.action, target=ga.proposal.target, level=ga.decision.level,
                            status=status, at=deps.clock.now(), reason=str(answer.get("reason") or status),
                            approved_by=None)
        return Command(goto="report", update={**update, "outcomes": [out.model_dump(mode="json")]})

    def execute(state: StewardState) -> dict[str, Any]:
        run_id = state["run_id"]
        outcomes = []
        # One history for the whole step, kept current, so limits hold within a sweep without re-reading the log.
        history = deps.audit.history(deps.clock.now())
        todo: list[tuple[GuardedAction, list[Finding] | None]]
        if state.get("mode") == "approval":
            by = state.get("approval", {}).get("by") or "approver"
            todo = [(GuardedAction.model_validate(raw), None) for raw in state.get("approval_requests", [])]
        else:
            findings = _findings(state)
            todo = [(ga, findings) for ga in map(GuardedAction.model_validate, state.get("decisions", []))
                    if ga.decision.verdict == "allow"]
            by = None
        for ga, run_findings in todo:
            out = execute_action(deps, ga, run_id, run_findings=run_findings, approved_by=by, history=history)
            remember_outcome(history, out, ga.proposal.finding_kind)
            outcomes.append(out)
        return {"outcomes": [o.model_dump(mode="json") for o in outcomes]}

    def report(state: StewardState) -> dict[str, Any]:
        text = render_report(state, deps)
        deps.audit.record("report", at=deps.clock.now(), run_id=state["run_id"], status=state.get("mode", "sweep"),
                          reason=text[:2000])
        return {"report": text}

    graph = StateGraph(StewardState)
    graph.add_node("observe", observe)
    graph.add_node("detect", detect)
    graph.add_node("plan", plan)
    graph.add_node("guardrail", guardrail)
    graph.add_node("approval", approval)
    graph.add_node("execute", execute)
    graph.add_node("report", report)
    graph.add_conditional_edges(START, route_start)
    graph.add_edge("observe", "detect")
    graph.add_edge("detect", "plan")
    graph.add_edge("plan", "guardrail")
    graph.add_edge("execute", "report")
    graph.add_edge("report", END)
    return graph.compile(checkpointer=checkpointer)
