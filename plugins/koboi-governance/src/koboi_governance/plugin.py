"""koboi hooks of koboi-governance: the ``governance`` section, the pipeline, the commands.

Nothing is imported until an agent is assembled or a command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from koboi.hookspecs import hookimpl


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_governance import aliases
    from koboi_governance.settings import SECTION, GovernanceSection

    register(
        SECTION,
        GovernanceSection,
        description="Policy rules, guardrails, trust, rate limits and redaction of tool calls.",
        # koboi-agent's spellings: accepted, and `koboi validate --suggest` shows koboi's.
        aliases={
            "guardrails": aliases.guardrails,
            "rate_limit": aliases.rate_limit,
            "policy": aliases.policy,
        },
    )


@hookimpl
def koboi_register_interceptors(register: Callable[..., None], config: Any) -> None:
    from koboi_governance.assemble import interceptors

    for interceptor in interceptors(config):
        register(interceptor)


@hookimpl
def koboi_register_commands(register: Callable[..., None]) -> None:
    register("trust", "koboi_governance.cli:trust_app", help="List, add and revoke trust rules.")
    register("audit", "koboi_governance.cli:audit", help="Show the audit trail of a session.")
