"""The hook koboi-context defines: pre-compaction hooks.

Imports nothing but the hook marker and typing, so publishing it costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from koboi.hookspecs import hookspec

if TYPE_CHECKING:
    from koboi.interceptors import RunInfo


@runtime_checkable
class CompactionHook(Protocol):
    """Asked before a strategy compacts a session's context."""

    async def before_compaction(self, run: RunInfo, details: Mapping[str, Any]) -> str | None:
        """``details``: ``strategy`` (str), ``tokens_before`` (int: the request without this
        compaction), ``budget`` (int: the tokens the request may take), ``messages_dropped``
        (int: the messages this compaction drops). Return extra instructions for the
        summary (the ``summarise`` strategy uses them; the others journal them), or None.
        An exception is logged and journaled; the compaction goes on."""
        ...


class RegisterCompactionHook(Protocol):
    """``register(name, hook)``: ``hook`` is a :class:`CompactionHook`."""

    def __call__(self, name: str, hook: CompactionHook, *, description: str = "") -> None: ...


@hookspec
def koboi_context_register_compaction_hooks(register: RegisterCompactionHook) -> None:
    """Add hooks that koboi-context asks before a strategy compacts a session's context.

    Collected once per plugin host, the first time an agent with a ``context`` section
    compacts. Each call and its answer (or error) are journaled as a ``context.hook``
    plugin event. Sync only; the hook objects' methods are async.
    """
