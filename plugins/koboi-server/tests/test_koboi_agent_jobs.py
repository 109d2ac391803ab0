"""koboi-agent's top-level ``jobs``: an alias of ``server``."""

from __future__ import annotations

from typing import Any

import pytest

from koboi.config import validate_config
from koboi.errors import ConfigError
from koboi_server.settings import ServerSettings


def _server(jobs: Any, **more: Any) -> ServerSettings:
    raw = {"llm": {"provider": "scripted"}, "jobs": jobs, **more}
    section = validate_config(raw).section("server")
    assert isinstance(section, ServerSettings)
    return section


def test_the_job_runners_limits_are_converted() -> None:
    section = _server(
        {"enabled": False, "max_concurrent": 8, "queue_depth": 32, "resume_on_startup": False}
    )
    assert (section.job_workers, section.max_queued_jobs) == (8, 32)
    assert section.resume_interrupted is False
    assert section.run_jobs is True  # koboi-agent never read jobs.enabled


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ({"timeout_seconds": 1800}, "agent.max_iterations"),
        ({"ttl_seconds": 86400}, "jobs.ttl_seconds: has no counterpart"),
        ({"webhooks": [{"url": "https://hooks.example"}]}, "server.webhooks.endpoints"),
        ({"per_tenant_max": 5}, "server.max_jobs_per_principal"),
    ],
)
def test_what_has_no_counterpart_is_one_line_saying_what_to_write(
    jobs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _server(jobs)
    problems = [p for p in info.value.problems if p.path == "jobs"]
    assert problems and message in problems[0].message, info.value.problems
    assert "\n" not in problems[0].message


def test_set_both_ways_differently_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"server\.job_workers"):
        _server({"max_concurrent": 8}, server={"job_workers": 4})
