"""The kernel's built-in plugin: the in-memory store and the passthrough sandbox.

Like any plugin.py it imports nothing at module level beyond the hook marker.

Registered first, like any other plugin, so installed plugins see the same
registries and duplicates are reported the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from koboi.hookspecs import hookimpl


def _passthrough(options: Any, config: Any) -> Any:
    from koboi.sandbox import PassthroughSandbox

    workdir = None
    if options.workdir:
        base = Path(getattr(config, "base_dir", ".") or ".")
        workdir = (base / options.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    return PassthroughSandbox(workdir=workdir)


def _memory(url: str, base_dir: Path) -> Any:
    from koboi.store import InMemoryStore

    return InMemoryStore()


@hookimpl
def koboi_register_sandboxes(register: Callable[..., None]) -> None:
    from koboi.sandbox import PassthroughOptions

    register(
        "passthrough",
        _passthrough,
        options=PassthroughOptions,
        description="No isolation; timeouts and output caps only.",
    )


@hookimpl
def koboi_register_stores(register: Callable[..., None]) -> None:
    register("memory", _memory, description="In-process store, lost at exit (tests, one-off runs).")
