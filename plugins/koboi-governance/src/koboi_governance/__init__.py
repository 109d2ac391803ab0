"""koboi-governance: The decision pipeline: modes, policy rules (shell commands judged segment by segment), guardrails, trust database, rate limits, redaction and the audit trail."""
