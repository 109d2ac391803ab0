"""Where first-party capabilities live, for "install koboi-<x>" hints only.

The kernel never imports or depends on these distributions; it only names them
when a config uses a section, provider, tool, sandbox or store scheme that no
installed plugin provides.
"""

from __future__ import annotations

SECTIONS: dict[str, str] = {
    "context": "koboi-memory",
    "memory": "koboi-memory",
    "rag": "koboi-rag",
    "guardrails": "koboi-governance",
    "governance": "koboi-governance",
    "policy": "koboi-governance",
    "approvals": "koboi-governance",
    "trust": "koboi-governance",
    "rate_limit": "koboi-governance",
    "server": "koboi-server",
    "mcp": "koboi-mcp",
    "a2a": "koboi-a2a",
    "eval": "koboi-eval",
    "replay": "koboi-replay",
    "orchestration": "koboi-orchestration",
    "hooks": "koboi-hooks",
    "skills": "koboi-skills",
    "telemetry": "koboi-otel",
    "tools_web": "koboi-tools-web",
    "tools_shell": "koboi-tools-shell",
    "tools_fs": "koboi-tools-fs",
    "tools_git": "koboi-tools-git",
}

#: Names people write at the top level for what lives inside another section.
NESTED_SECTIONS: dict[str, str] = {
    "guardrails": "governance.guardrails",
    "policy": "governance.policy",
    "trust": "governance.trust",
    "rate_limit": "governance.rate_limits",
    "rate_limits": "governance.rate_limits",
    "redaction": "governance.redaction",
    "approvals": "agent.approval_risk / agent.approval_timeout_seconds",
}

PROVIDERS: dict[str, str] = {
    "openai": "koboi-openai",
    "anthropic": "koboi-anthropic",
    "cloudflare": "koboi-cloudflare",
    "scripted": "koboi-scripted",
}

TOOLS: dict[str, str] = {
    "calculator": "koboi-tools-basic",
    "current_time": "koboi-tools-basic",
    "web_search": "koboi-tools-web",
    "web_fetch": "koboi-tools-web",
    "memory_store": "koboi-memory",
    "memory_recall": "koboi-memory",
    "read_file": "koboi-tools-fs",
    "write_file": "koboi-tools-fs",
    "edit_file": "koboi-tools-fs",
    "apply_patch": "koboi-tools-fs",
    "list_dir": "koboi-tools-fs",
    "glob": "koboi-tools-fs",
    "grep": "koboi-tools-fs",
    "delete_file": "koboi-tools-fs",
    "move_file": "koboi-tools-fs",
    "run_shell": "koboi-tools-shell",
    "shell_status": "koboi-tools-shell",
    "shell_kill": "koboi-tools-shell",
    "git_status": "koboi-tools-git",
    "git_diff": "koboi-tools-git",
    "git_log": "koboi-tools-git",
    "git_commit": "koboi-tools-git",
    "rag_search": "koboi-rag",
}

SANDBOXES: dict[str, str] = {"restricted": "koboi-sandbox"}

STORE_SCHEMES: dict[str, str] = {"sqlite": "koboi-store-sql", "postgresql": "koboi-store-sql"}


def isolating_sandboxes() -> str:
    """How to get a sandbox that isolates, in words for an error message."""
    known = ", ".join(f"'{name}' from {dist}" for name, dist in SANDBOXES.items())
    return f"use an isolating backend such as {known}" if known else "use an isolating backend"
