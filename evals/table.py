"""Plain-text tables for `steward eval`: one row per scenario, one table per model."""

from __future__ import annotations

from typing import Any


def print_eval_tables(documents: dict[str, list[dict[str, Any]]]) -> None:
    for model, docs in documents.items():
        print(f"\nPlanner: {model}")
        header = (f"{'scenario':<42} {'pass':<5} {'found':>5} {'missed':>6} {'FP':>3} {'kills!':>6} "
                  f"{'refused':>7} {'tools':>5} {'tokens':>7} {'GPU-h':>7} {'wall s':>7}")
        print(header)
        print("-" * len(header))
        totals = {"passed": 0, "false_kills": 0, "refusals": 0, "tool_calls": 0, "tokens": 0, "wall": 0.0,
                  "grace": 0, "left": 0}
        for d in docs:
            s, st = d["score"], d["stats"]
            tokens = st["prompt_tokens"] + st["completion_tokens"]
            print(f"{d['name']:<42} {'yes' if d['passed'] else 'NO':<5} {s['detected']:>5} {s['missed']:>6} "
                  f"{s['false_positives']:>3} {s['false_kills']:>6} {st['guardrail_refusals']:>7} "
                  f"{st['tool_calls']:>5} {tokens:>7} {s['reclaimed_gpu_hours']:>7.1f} {st['wall_s']:>7.2f}")
            totals["passed"] += int(d["passed"])
            totals["false_kills"] += s["false_kills"]
            totals["grace"] += s.get("grace_warnings", 0)
            totals["left"] += len(s.get("left_running_targets", []))
            totals["refusals"] += st["guardrail_refusals"]
            totals["tool_calls"] += st["tool_calls"]
            totals["tokens"] += tokens
            totals["wall"] += st["wall_s"]
            for label, key in (("missed", "missed_targets"), ("false positive", "false_positive_targets"),
                               ("warned in its grace, not waste", "grace_warning_targets"),
                               ("FALSE KILL", "false_kill_targets"),
                               ("waste left holding its GPUs at the end", "left_running_targets")):
                for target in s.get(key, []):
                    print(f"    {label}: {target}")
        n = max(1, len(docs))
        print(f"pass rate {totals['passed']}/{len(docs)}, false kills {totals['false_kills']}, "
              f"warned in their grace but not waste {totals['grace']}, "
              f"keyed waste left holding its GPUs {totals['left']}, "
              f"guardrail refusals {totals['refusals']}, tool calls/scenario {totals['tool_calls'] / n:.1f}, "
              f"tokens/scenario {totals['tokens'] / n:.0f}, wall {totals['wall']:.1f}s")
