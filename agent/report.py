"""The human-readable sweep report: what was found, why, what was decided and done."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent.cost import money
from sim.durations import format_duration

if TYPE_CHECKING:
    from agent.deps import StewardDeps
    from agent.state import StewardState

LABELS = {
    "en": {"sweep": "GPU Steward sweep at", "findings": "Findings", "none": "No waste found.", "actions": "Actions",
           "no_actions": "No actions.", "since": "since", "waste": "waste", "planner": "Planner",
           "approval": "Approval", "total": "Waste so far"},
    "zh": {"sweep": "GPU Steward 巡检时间", "findings": "发现", "none": "未发现浪费。", "actions": "操作",
           "no_actions": "无操作。", "since": "开始于", "waste": "浪费", "planner": "规划器",
           "approval": "审批", "total": "累计浪费"},
}


def _when(value: str) -> str:
    return datetime.fromisoformat(value).strftime("%H:%M")


def _decision_line(d: dict[str, Any], outcomes: dict[str, dict[str, Any]]) -> str:
    p, dec = d["proposal"], d["decision"]
    target = p["target"] + (f" -> {p['target_nodes']} nodes" if p.get("target_nodes") is not None else "")
    head = f"  {p['action']:<16} {target} (level {dec['level']})"
    out = outcomes.get(d["id"])
    if dec["verdict"] == "needs_approval":
        return f"{head}: waiting for human approval [{dec['rule']}] {dec['reason']}"
    if dec["verdict"] == "deny":
        return f"{head}: refused by guardrail [{dec['rule']}] {dec['reason']}"
    if out is None:
        return f"{head}: allowed"
    return f"{head}: {out['status']} {out.get('detail') or out.get('reason') or ''}".rstrip()


def render_report(state: StewardState, deps: StewardDeps) -> str:
    words = LABELS.get(deps.language, LABELS["en"])
    outcomes = {o["id"]: o for o in state.get("outcomes", [])}
    if state.get("mode") == "approval":
        a = state.get("approval", {})
        lines = [f"{words['approval']} {a.get('id', '?')}: {a.get('decision', '?')} by {a.get('by') or 'policy'}"]
        for o in state.get("outcomes", []):
            lines.append(f"  {o['action']:<16} {o['target']} (level {o['level']}): {o['status']} "
                         f"{o.get('detail') or o.get('reason') or ''}".rstrip())
        return "\n".join(lines)
    at = state.get("at", "")
    observed = state.get("observed", {})
    header = (f"{words['sweep']} {at[:16].replace('T', ' ')} UTC: {observed.get('jobs', 0)} jobs, "
              f"{observed.get('gpus', 0)} GPUs, {observed.get('nodes', 0)} nodes "
              f"({observed.get('backend_calls', 0)} backend calls)")
    lines = [header, ""]
    findings = state.get("findings", [])
    if findings:
        lines.append(f"{words['findings']} ({len(findings)}):")
        total_cost, total_hours, currency = 0.0, 0.0, deps.currency
        for f in findings:
            duration = format_duration((datetime.fromisoformat(at) - datetime.fromisoformat(f["since"])).total_seconds())
            money_str = money(f["waste_cost"], f["currency"]) if f["waste_cost"] else ""
            waste = f"{words['waste']} {f['waste_gpu_hours']:.1f} GPU-h {money_str}".rstrip() if f["gpus"] else ""
            lines.append(f"  {f['kind'].upper():<15} {f['target']}  {f['gpus']} GPUs  {words['since']} "
                         f"{_when(f['since'])} ({duration})  {waste}".rstrip())
            lines.append(f"  {'':<15} {f['evidence']}" + (f" [rb:{f['runbook']}]" if f.get("runbook") else ""))
            total_cost += f["waste_cost"]
            total_hours += f["waste_gpu_hours"]
            currency = f["currency"]
        lines.append(f"  {words['total']}: {total_hours:.1f} GPU-h, {money(total_cost, currency)}")
    else:
        lines.append(words["none"])
    lines.append("")
    decisions = state.get("decisions", [])
    lines.append(f"{words['actions']}:" if decisions else words["no_actions"])
    lines.extend(_decision_line(d, outcomes) for d in decisions)
    plan = state.get("plan", {})
    if plan:
        extra = f", {plan.get('tool_calls', 0)} tool calls" if plan.get("tool_calls") else ""
        lines.append(f"\n{words['planner']}: {plan.get('model', '?')}{extra}")
        if plan.get("model") != "policy-model" and plan.get("explanation"):
            lines.append(plan["explanation"])
        for err in plan.get("errors", []):
            lines.append(f"  ! {err}")
    return "\n".join(lines)


def describe_grace(seconds: float) -> str:
    return format_duration(seconds)
