"""Fixtures: agents assembled from a config dict with the installed plugins (governance included)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from koboi import KoboiAgent, Risk, tool
from koboi.tools import Tool


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _tools() -> dict[str, Tool]:
    @tool(name="look", risk=Risk.SAFE, idempotent=True)
    def look(what: str = "") -> str:
        """Read something (safe)."""
        return f"looked at {what}"

    @tool(name="note", risk=Risk.MODERATE)
    def note(text: str) -> str:
        """Write a note (moderate)."""
        return f"noted {text}"

    @tool(name="wipe", risk=Risk.DESTRUCTIVE)
    def wipe(target: str) -> str:
        """Delete something (destructive)."""
        return f"wiped {target}"

    @tool(name="plan_step", risk=Risk.MODERATE)
    def plan_step(step: str) -> str:
        """Record a step of the plan (planning)."""
        return f"planned {step}"

    plan_step.planning = True
    return {t.name: t for t in (look, note, wipe, plan_step)}


@pytest.fixture
def demo_tools() -> dict[str, Tool]:
    """Four tools, one per kind: safe, moderate, destructive, planning."""
    return _tools()


AgentMaker = Callable[..., KoboiAgent]


@pytest.fixture
def make_agent(tmp_path: Path, demo_tools: dict[str, Tool]) -> AgentMaker:
    """``make_agent(script, mode=..., governance=..., **kwargs)``: a scripted agent."""

    def make(
        script: list[Any],
        *,
        mode: str = "act",
        governance: dict[str, Any] | None = None,
        store_url: str = "memory://",
        extra: dict[str, Any] | None = None,
        tools: list[Tool] | None = None,
        **kwargs: Any,
    ) -> KoboiAgent:
        config: dict[str, Any] = {
            "agent": {"name": "governed", "mode": mode},
            "llm": {"provider": "scripted", "script": script, "on_exhausted": "error"},
            "store": {"url": store_url},
        }
        if governance is not None:
            config["governance"] = governance
        config.update(extra or {})
        return KoboiAgent.from_dict(
            config,
            base_dir=tmp_path,
            extra_tools=tools if tools is not None else list(demo_tools.values()),
            **kwargs,
        )

    return make


def call(name: str, arguments: dict[str, Any] | None = None, call_id: str = "c1") -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": name, "arguments": arguments or {}}]}


@pytest.fixture
def turn() -> Callable[..., dict[str, Any]]:
    """``turn(name, args)``: a script turn calling one tool."""
    return call


@pytest.fixture
def in_order() -> Callable[[list[Any]], Any]:
    """``in_order(turns)``: a model that answers calls strictly in order, whoever makes them
    (a parent and its sub-agent share it). A turn is a text or a ``{"name", "arguments"}``."""
    from koboi_testing.models import InOrderModel

    return InOrderModel
