"""Planning: findings -> proposed actions. The built-in policy model, the LLM planner and its bounds,
prompt loading and the explanation prompt. Proposals are only proposals: the guardrail decides.
Imports detectors, retrieval, guardrail (read-only helpers), records, config, core and tools.
"""
