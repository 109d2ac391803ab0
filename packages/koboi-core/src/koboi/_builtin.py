"""The kernel's built-in plugin: the in-memory store, the passthrough sandbox, the loop runner.

Like any plugin.py it imports nothing at module level beyond the hook marker.

Registered first, like any other plugin, so installed plugins see the same
registries and duplicates are reported the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterRunner, RegisterSandbox, RegisterStore
    from koboi.runners import Runner
    from koboi.sandbox import Sandbox
    from koboi.store import Store


def _passthrough(options: Any, config: Any) -> Sandbox:
    from koboi.sandbox import PassthroughSandbox

    workdir = None
    if options.workdir:
        base = Path(getattr(config, "base_dir", ".") or ".")
        workdir = (base / options.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    return PassthroughSandbox(workdir=workdir)


def _memory(url: str, base_dir: Path) -> Store:
    from koboi.store import InMemoryStore

    return InMemoryStore()


def _loop(options: Any, config: Any) -> Runner:
    from koboi.runners import LoopRunner

    return LoopRunner()


@hookimpl
def koboi_register_sandboxes(register: RegisterSandbox) -> None:
    from koboi.sandbox import PassthroughOptions

    register(
        "passthrough",
        _passthrough,
        options=PassthroughOptions,
        description="No isolation; timeouts and output caps only.",
    )


@hookimpl
def koboi_register_stores(register: RegisterStore) -> None:
    register("memory", _memory, description="In-process store, lost at exit (tests, one-off runs).")


@hookimpl
def koboi_register_runners(register: RegisterRunner) -> None:
    register(
        "loop", _loop, description="The kernel's loop: model call, tool calls, results, again."
    )
