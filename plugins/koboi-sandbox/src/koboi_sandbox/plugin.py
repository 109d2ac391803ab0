"""koboi hooks of the sandbox plugin. Imports its modules only when asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi_sandbox.options import RestrictedOptions
    from koboi_sandbox.restricted import RestrictedSandbox


def create_sandbox(options: RestrictedOptions, config: Any) -> RestrictedSandbox:
    """Build the sandbox from its validated ``sandbox:`` block; the config file and the
    store's directory are kept out of its processes' reach."""
    from koboi_sandbox.restricted import RestrictedSandbox, koboi_paths

    return RestrictedSandbox(
        options, base_dir=getattr(config, "base_dir", None), private=koboi_paths(config)
    )


@hookimpl
def koboi_register_sandboxes(register: Callable[..., None]) -> None:
    from koboi_sandbox.options import RestrictedOptions

    register(
        "restricted",
        create_sandbox,
        options=RestrictedOptions,
        description="Per-session workdirs, rlimits, a clean environment, an unprivileged user; "
        "isolation: hard adds seccomp and Landlock.",
    )


@hookimpl
def koboi_register_commands(register: Callable[..., None]) -> None:
    register(
        "sandbox",
        "koboi_sandbox.cli:app",
        help="What the sandbox can enforce on this machine (koboi sandbox check).",
    )
