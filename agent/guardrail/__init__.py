"""The guardrail: a pure function (action, fresh facts, policy, history) -> allow / deny / needs approval.

SAFETY-CRITICAL. Owns every rule between a proposal and a mutating call: target rules (exists,
running, same uid, protected, has a finding, level ceiling), limit rules (a delivered warning
first, graceful first, duplicates, rate, circuit breaker, reserve), protection, and the runbook
limit (which can only lower). Nothing here performs I/O: it imports only core and agent.config.
"""
