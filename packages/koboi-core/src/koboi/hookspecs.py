"""The hook specifications: the whole extension surface of koboi.

Every hook here is a *registration* hook: sync, called by the kernel once per
plugin with a ``register`` callable bound to that plugin (so the kernel knows
who registered what and refuses duplicates, naming both plugins). Per-step
behaviour is not a pluggy hook: it lives on :class:`koboi.Interceptor` objects
registered through :func:`koboi_register_interceptors`.

Plugins implement hooks with ``from koboi import hookimpl``. The names and
parameters below are the contract; docs/hooks.md documents each one and a test
keeps the two in step.

Ordering (for every hook): built-in plugins are asked first, then installed
plugins in sorted order of their entry-point names. Registrations do not depend
on order: a duplicate name is an error whoever comes first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable

    from koboi.config import AgentConfig

hookspec = pluggy.HookspecMarker("koboi")
hookimpl = pluggy.HookimplMarker("koboi")


# ---------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    """Register the config sections this plugin owns.

    :param register: ``register(section, model, *, description="")`` where
        ``section`` is the top-level YAML key (by convention the entry-point
        name) and ``model`` a pydantic ``BaseModel`` with ``extra="forbid"`` and a
        description on every field. The kernel validates the section with it and
        hands the instance back through ``AgentConfig.section(name)``.

    Called once per plugin host. Sync only.
    """


# ---------------------------------------------------------------------------
# Capabilities
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_providers(register: Callable[..., None]) -> None:
    """Register model providers.

    :param register: ``register(name, factory, *, options=None, description="")``.
        ``factory(options)`` returns a :class:`koboi.ModelProvider`; it is called
        lazily when an agent uses the provider, with the ``llm`` (or named
        ``providers``) section minus its ``provider`` key, validated by the
        pydantic model ``options`` (or a plain dict when ``options`` is None).
        Import heavy client libraries inside the factory, not at module level.

    Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_tools(register: Callable[..., None]) -> None:
    """Register tools.

    :param register: ``register(tool)`` with a :class:`koboi.Tool` instance
        (for example one made by ``@tool``), or ``register(name, factory, *,
        description="")`` where ``factory(config)`` receives the agent's
        :class:`koboi.AgentConfig` and returns a ``Tool`` named ``name``. A
        config enables tools by exact name under ``tools.builtin``.

    Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_sandboxes(register: Callable[..., None]) -> None:
    """Register sandbox backends.

    :param register: ``register(name, factory, *, options=None, description="")``.
        ``factory(options, config)`` returns a :class:`koboi.Sandbox`; ``options``
        is the ``sandbox`` section minus ``backend``, validated by ``options``.

    Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_stores(register: Callable[..., None]) -> None:
    """Register store backends by URL scheme.

    :param register: ``register(scheme, factory, *, description="", default_url=None)``.
        ``factory(url, base_dir)`` returns a :class:`koboi.Store` for a
        ``store.url`` whose scheme (the part before ``:``, without a ``+driver``
        suffix) is ``scheme``; ``base_dir`` is the directory of the config file,
        against which relative paths resolve. A store that should be used when
        a config sets no ``store.url`` (and ``KOBOI_STORE`` is unset) passes its
        ``default_url``.

    Called once per plugin host. Sync only.
    """


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_commands(register: Callable[..., None]) -> None:
    """Add subcommands to the ``koboi`` command.

    :param register: ``register(name, target, *, help="")`` where ``target`` is
        an import path ``"package.module:attribute"`` naming a ``typer.Typer``
        app (recommended), a click command object, or a plain typed function
        that typer can wrap. The target is
        imported only when the command is invoked, so ``koboi --help`` stays fast.

    Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_run_sources(register: Callable[..., None]) -> None:
    """Let ``koboi run`` run files that are not YAML configs.

    ``koboi run PATH`` hands a path whose file name ends in a registered suffix
    to the plugin that registered it, instead of loading it as a config.

    :param register: ``register(name, target, *, suffixes, description="")``
        where ``suffixes`` is a non-empty sequence of file-name endings this
        source claims (``".koboi"``; compared case-insensitively; when two
        match, the longest wins; one suffix claimed by two plugins is a
        registration error naming both), and ``target`` an import path
        ``"package.module:attribute"`` naming a callable that is imported
        only when a claimed file is run. It is called as
        ``target(path, options)``: ``path`` is the ``pathlib.Path`` given to
        ``koboi run``, ``options`` a read-only mapping of the run command's
        options by name (their meaning is the CLI's: see ``koboi run --help``);
        it runs the file, prints what it does, and returns the exit code.
        It raises a :class:`koboi.errors.KoboiError` for anything the user
        can fix.

    Called once per plugin host. Sync only.
    """


# ---------------------------------------------------------------------------
# Per-step seams
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_interceptors(register: Callable[..., None], config: AgentConfig) -> None:
    """Register interceptors and observers for one agent.

    :param register: ``register(interceptor)`` with a :class:`koboi.Interceptor`
        instance. Its async methods run around every model call and tool call
        (in ascending ``priority``, then registration order), and ``on_event``
        observes every committed journal event.
    :param config: the validated config of the agent being assembled, so a
        plugin registers only what its section enables.

    Called once per agent assembly (not per step). Sync only; the interceptor's
    methods are async.
    """


HOOK_NAMES: tuple[str, ...] = tuple(
    name for name, value in dict(globals()).items() if name.startswith("koboi_") and callable(value)
)
