from __future__ import annotations

import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

#: A session that uses tools: two calculator calls (one of them with current_time, in
#: parallel when the config asks), approvals (approval_risk: safe), then an answer.
TOOLS_CONFIG = """
    agent: {name: replayed, mode: act, approval_risk: safe}
    llm:
      provider: scripted
      on_exhausted: error
      script:
        - tool_calls: [{name: calculator, arguments: {expression: "6 * 7"}}]
        - tool_calls:
            - {name: calculator, arguments: {expression: "1 + 1"}}
            - {name: current_time, arguments: {}}
        - reply: "The answer is 42."
    tools: {builtin: [calculator, current_time]}
    store: {url: "memory://"}
"""


@pytest.fixture(autouse=True)
def _isolated(koboi_clean_environment: None) -> None:
    """koboi-testing's clean environment for every test."""


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write a YAML config (dedented) into ``tmp_path``; return its path."""

    def write(text: str = TOOLS_CONFIG, name: str = "agent.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def record_session() -> Callable[..., Awaitable[Any]]:
    """Run a config on messages in one session (memory store) and capture it.

    Returns the :class:`koboi_replay.capture.Captured`; ``approver`` defaults to
    approving everything. With ``sessions``, the same messages run in that many
    sessions, one after the other, and the last is captured.
    """

    async def record(
        config: Path,
        *messages: str,
        approver: Any = None,
        with_cache: bool = False,
        extra_tools: Any = (),
        sessions: int = 1,
    ) -> Any:
        from koboi.agent import KoboiAgent
        from koboi.approval import AllowAllApprover
        from koboi.plugins import default_host
        from koboi_replay.capture import capture_session

        agent = KoboiAgent.from_config(
            config, approver=approver or AllowAllApprover(), extra_tools=extra_tools
        )
        async with agent:
            for _ in range(sessions):  # the last session is the one captured
                session = None
                for message in messages or ("go",):
                    result = await agent.run(message, session_id=session)
                    session = result.session_id
            return await capture_session(
                agent.store,
                "last",
                config_path=config,
                host=default_host(),
                with_cache=with_cache,
            )

    return record
