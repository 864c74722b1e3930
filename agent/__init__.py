"""GPU Steward: the agent graph, guardrail, detectors, policy, cost and audit."""
