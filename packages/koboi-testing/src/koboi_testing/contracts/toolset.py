"""Contract suite for :class:`koboi.toolsets.Toolset` implementations."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from koboi.tools import Tool
from koboi.toolsets import (
    NAMESPACE_SEPARATOR,
    ToolList,
    Toolset,
    ToolsetContext,
    ToolsetTool,
    check_namespace,
)

if TYPE_CHECKING:
    from koboi.plugins import PluginHost

_PROVIDER_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def toolset_context(
    config: Mapping[str, Any], base_dir: Path, host: PluginHost | None = None
) -> ToolsetContext:
    """What ``Toolset.open`` is given for an agent of ``config`` (a config mapping, validated
    against ``host``'s catalog, relative to ``base_dir``, with no environment): a
    passthrough sandbox working in ``base_dir``, an in-memory store (not opened) and
    ``host``. Override a ``ToolsetContract``'s ``toolset_context`` fixture with it when the
    toolset reads a section of its own."""
    from koboi.config import validate_config
    from koboi.sandbox import PassthroughSandbox
    from koboi.store import InMemoryStore

    catalog = host.catalog() if host is not None else None
    validated = validate_config(dict(config), catalog, base_dir=base_dir, env={})
    return ToolsetContext(validated, PassthroughSandbox(workdir=base_dir), InMemoryStore(), host)


class ToolsetContract:
    """Behaviour every :class:`~koboi.toolsets.Toolset` must show.

    **Required fixture** ``toolset``: a *new* (not opened) toolset. The suite opens it
    (``await toolset.open(context)``), checks what it offers (its tools, and the names a
    run offers them under: ``<namespace>__<tool>``, provider-safe), and closes it.

    **Optional fixture** ``toolset_context``: what the toolset is opened with;
    koboi-testing's ``koboi_toolset_context`` (a passthrough sandbox in ``tmp_path``,
    an in-memory store, a scripted-model config) unless the class overrides it.
    """

    @pytest.fixture
    def toolset_context(self, koboi_toolset_context: ToolsetContext) -> ToolsetContext:
        return koboi_toolset_context

    @pytest.fixture
    async def opened(
        self, toolset: Toolset, toolset_context: ToolsetContext
    ) -> AsyncIterator[Toolset]:
        await toolset.open(toolset_context)
        try:
            yield toolset
        finally:
            await toolset.aclose()

    def test_is_a_toolset_with_a_name_and_a_namespace(self, toolset: Toolset) -> None:
        assert isinstance(toolset, Toolset)
        assert toolset.name and isinstance(toolset.name, str)
        assert toolset.on_collision in ("error", "skip")
        assert isinstance(toolset.version, int)
        # Its tools are offered as <namespace>__<tool>: the declared namespace, else its name.
        namespace = toolset.namespace if toolset.namespace is not None else toolset.name
        check_namespace(namespace, toolset.name)

    @pytest.mark.anyio
    async def test_offers_tools_with_names_every_model_api_accepts(self, opened: Toolset) -> None:
        tools = list(opened.tools())
        assert tools, "an opened toolset offers at least one tool"
        # A tool's name is its own within its namespace (a tool may carry a namespace of
        # its own: an MCP client's servers each have one).
        names = [(t.namespace, t.name) for t in tools]
        assert len(names) == len(set(names)), f"duplicate tool names: {names}"
        for tool in tools:
            assert isinstance(tool, Tool)
            assert tool.name and isinstance(tool.name, str)
            spec = tool.spec()
            assert spec.description, f"{tool.name}: no description"
            assert spec.parameters.get("type") == "object"
            json.dumps(spec.parameters)
        # As a run offers them: in the toolset's namespace, provider-safe, each keeping the
        # toolset's own tool (and its original name) for the call, none lost to a collision.
        offered = ToolList.build({}, [opened])
        namespace = offered.namespaces[opened.name]
        assert not offered.skipped, f"tools lost to collisions: {offered.skipped}"
        assert len(offered.tools) == len(tools)
        originals: set[tuple[str | None, str]] = set()
        for name, tool in offered.tools.items():
            assert _PROVIDER_SAFE.match(name), (
                f"{name!r}: OpenAI and Anthropic accept [A-Za-z0-9_-]{{1,64}} only"
            )
            assert isinstance(tool, ToolsetTool) and tool.name == name
            own = tool.original.namespace
            expected = check_namespace(own, opened.name) if own is not None else namespace
            assert name.startswith(expected + NAMESPACE_SEPARATOR), name
            originals.add((own, tool.original.name))
        assert originals == set(names)

    @pytest.mark.anyio
    async def test_listing_is_stable_until_the_version_moves(self, opened: Toolset) -> None:
        version = opened.version
        first = [t.name for t in opened.tools()]
        second = [t.name for t in opened.tools()]
        if opened.version == version:
            assert first == second

    @pytest.mark.anyio
    async def test_risk_and_idempotency_are_declared(self, opened: Toolset) -> None:
        for tool in opened.tools():
            assert tool.risk.value in ("safe", "moderate", "destructive")
            assert isinstance(tool.idempotent, bool)

    @pytest.mark.anyio
    async def test_closing_twice_is_harmless(
        self, toolset: Toolset, toolset_context: ToolsetContext
    ) -> None:
        await toolset.open(toolset_context)
        await toolset.aclose()
        await toolset.aclose()


__all__ = ["ToolsetContract", "toolset_context"]
