"""koboi-agent's top-level ``jobs`` section, as a fragment of ``server`` (registered
as its alias).

Only what has a counterpart in koboi's job runner is converted; every other key is
a ``ValueError`` naming it and what to write instead, never silently dropped.
Pydantic-free: a config is converted before anything is validated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: ``jobs`` keys -> ``server`` keys of the same meaning.
_RENAMED = {
    "max_concurrent": "job_workers",  # jobs this process runs at once
    "queue_depth": "max_queued_jobs",  # jobs that may wait in the queue
    "resume_on_startup": "resume_interrupted",  # interrupted runs are resumed
}
#: ``jobs`` keys with no counterpart, and what to write instead.
_REFUSED = {
    "timeout_seconds": "bound a job with agent.max_iterations, agent.max_total_tokens or "
    "agent.max_cost_usd",
    "ttl_seconds": "koboi keeps a finished job with its session (no expiry)",
    "per_tenant_max": "write server.max_jobs_per_principal (unfinished jobs, queued included)",
    "webhooks": "write server.webhooks.endpoints [{url, secrets: [whsec_...], events}] "
    "(Standard Webhooks signatures; see docs/webhooks.md)",
    "event_buffer": "a job's events are kept in the store and replayed in full",
    "shell_allowlist": "allow commands with governance.policy rules",
}


def jobs(value: Any) -> dict[str, Any]:
    """koboi-agent's ``jobs`` as a fragment of ``server``. ``enabled`` is accepted and
    unused (koboi-agent never read it either: jobs are always offered)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("jobs: must be a mapping")
    fragment: dict[str, Any] = {}
    for key, item in value.items():
        if key in _RENAMED:
            fragment[_RENAMED[key]] = item
        elif key in _REFUSED:
            raise ValueError(f"jobs.{key}: has no counterpart in koboi; {_REFUSED[key]}")
        elif key != "enabled":
            raise ValueError(
                f"jobs.{key}: has no counterpart in koboi; see server in koboi config schema"
            )
    return fragment
