"""The hook specifications: the kernel's extension surface.

Every kernel hook is a *registration* hook: sync, called by the kernel with a
``register`` callable bound to the plugin being asked, so the kernel knows who
registered what and refuses duplicates, naming both plugins. Each ``register``
has a typed :class:`typing.Protocol` below (its exact signature), so a type
checker and an IDE help the plugin author. Per-step behaviour is not a pluggy
hook: it lives on :class:`koboi.Interceptor` objects registered through
:func:`koboi_register_interceptors`.

Plugins implement hooks with ``from koboi import hookimpl``. The names and
parameters below are the contract; docs/hooks.md documents each one and tests
keep the two in step. Plugins may publish hooks of their own (namespaced by
their id, see :func:`koboi_register_hookspecs`).

Ordering (for every hook): the built-in plugin is asked first, then installed
plugins in sorted order of their entry-point ids. Registrations do not depend
on order: a duplicate name is an error whoever comes first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import BaseModel

    from koboi.config import AgentConfig
    from koboi.interceptors import Interceptor
    from koboi.provider import ModelProvider
    from koboi.runners import Runner
    from koboi.sandbox import Sandbox
    from koboi.store import Store
    from koboi.tools import Tool
    from koboi.toolsets import Toolset

hookspec = pluggy.HookspecMarker("koboi")
hookimpl = pluggy.HookimplMarker("koboi")


# ---------------------------------------------------------------------------
# What each hook's ``register`` accepts
# ---------------------------------------------------------------------------


class RegisterConfigSection(Protocol):
    """``register(section, model, *, description="", aliases=None)`` of
    :func:`koboi_register_config_sections`."""

    def __call__(
        self,
        section: str,
        model: type[BaseModel],
        *,
        description: str = "",
        aliases: Mapping[str, Callable[[Any], Mapping[str, Any]]] | None = None,
    ) -> None: ...


class RegisterProvider(Protocol):
    """``register(name, factory, *, options=None, description="")`` of
    :func:`koboi_register_providers`; ``factory(options)`` returns the provider."""

    def __call__(
        self,
        name: str,
        factory: Callable[[Any], ModelProvider],
        *,
        options: type[BaseModel] | None = None,
        description: str = "",
    ) -> None: ...


class RegisterTool(Protocol):
    """``register(tool)`` or ``register(name, factory, *, description="")`` of
    :func:`koboi_register_tools`; ``factory(config)`` returns the tool."""

    @overload
    def __call__(self, tool: Tool, /) -> None: ...

    @overload
    def __call__(
        self, name: str, factory: Callable[[AgentConfig], Tool], /, *, description: str = ""
    ) -> None: ...


class RegisterToolset(Protocol):
    """``register(name, factory, *, description="")`` of :func:`koboi_register_toolsets`;
    ``factory(config)`` returns a toolset for that agent, or None when its config
    does not ask for one."""

    def __call__(
        self,
        name: str,
        factory: Callable[[AgentConfig], Toolset | None],
        *,
        description: str = "",
    ) -> None: ...


class RegisterSandbox(Protocol):
    """``register(name, factory, *, options=None, description="")`` of
    :func:`koboi_register_sandboxes`; ``factory(options, config)`` returns the sandbox."""

    def __call__(
        self,
        name: str,
        factory: Callable[[Any, AgentConfig], Sandbox],
        *,
        options: type[BaseModel] | None = None,
        description: str = "",
    ) -> None: ...


class RegisterStore(Protocol):
    """``register(scheme, factory, *, description="", default_url=None)`` of
    :func:`koboi_register_stores`; ``factory(url, base_dir)`` returns the store."""

    def __call__(
        self,
        scheme: str,
        factory: Callable[[str, Path], Store],
        *,
        description: str = "",
        default_url: str | None = None,
    ) -> None: ...


class RegisterRunner(Protocol):
    """``register(name, factory, *, options=None, description="")`` of
    :func:`koboi_register_runners`; ``factory(options, config)`` returns the runner."""

    def __call__(
        self,
        name: str,
        factory: Callable[[Any, AgentConfig], Runner],
        *,
        options: type[BaseModel] | None = None,
        description: str = "",
    ) -> None: ...


class RegisterCommand(Protocol):
    """``register(name, target, *, help="")`` of :func:`koboi_register_commands`."""

    def __call__(self, name: str, target: str, *, help: str = "") -> None: ...


class RegisterRunSource(Protocol):
    """``register(name, target, *, suffixes, description="")`` of
    :func:`koboi_register_run_sources`."""

    def __call__(
        self, name: str, target: str, *, suffixes: Sequence[str], description: str = ""
    ) -> None: ...


class RegisterEventSummary(Protocol):
    """``register(target, *, description="")`` of :func:`koboi_register_event_summaries`."""

    def __call__(self, target: str, *, description: str = "") -> None: ...


HintKind = Literal[
    "section", "provider", "tool", "sandbox", "store_scheme", "runner", "stage", "command"
]


class RegisterHint(Protocol):
    """``register(kind, name, distribution, *, moved_to=None, isolating=False)`` of
    :func:`koboi_register_hints`."""

    def __call__(
        self,
        kind: HintKind,
        name: str,
        distribution: str,
        *,
        moved_to: str | None = None,
        isolating: bool = False,
    ) -> None: ...


class RegisterHookspecs(Protocol):
    """``register(specs)`` of :func:`koboi_register_hookspecs`: a module or class holding
    functions marked ``@hookspec``."""

    def __call__(self, specs: object) -> None: ...


class RegisterInterceptor(Protocol):
    """``register(interceptor)`` of :func:`koboi_register_interceptors`."""

    def __call__(self, interceptor: Interceptor) -> None: ...


class RegisterEntry(Protocol):
    """The ``register`` a plugin-defined collector hook receives (see
    :meth:`koboi.plugins.PluginHost.collect`): ``register(name, target, *,
    description="", **extra)``."""

    def __call__(
        self, name: str, target: object, *, description: str = "", **extra: Any
    ) -> None: ...


# ---------------------------------------------------------------------------
# Plugins' own hooks and hints
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_hookspecs(register: RegisterHookspecs) -> None:
    """Publish hook specifications of this plugin, for other plugins to implement.

    :param register: ``register(specs)`` where ``specs`` is a module or class whose
        functions are marked with ``koboi.hookspecs.hookspec``. Every name must start
        with ``koboi_<id>_``, ``<id>`` being this plugin's entry-point id with ``-``
        written ``_`` (plugin ``weather`` publishes ``koboi_weather_register_stations``); a
        name outside that namespace is a registration error. The owner calls its
        hooks through :meth:`koboi.plugins.PluginHost.collect`.

    Called once per plugin host, right after every plugin is imported and before any
    other hook. A plugin may implement the hook of a plugin that is not installed:
    the implementation is then never called (an optional hook), and
    ``koboi plugins inspect`` shows it as waiting for its owner. Sync only.
    """


@hookspec
def koboi_register_hints(register: RegisterHint) -> None:
    """Name the distribution that provides something, for "install ..." hints.

    :param register: ``register(kind, name, distribution, *, moved_to=None,
        isolating=False)``. ``kind`` is ``section``, ``provider``, ``tool``,
        ``sandbox``, ``store_scheme``, ``runner``, ``stage`` or ``command``; ``name``
        what a config writes (for a ``stage``: a pipeline stage an interceptor
        ``enforces``, such as ``mode``, named when a config needs it and nothing
        enforces it; for a ``command``: a ``koboi`` subcommand a plugin adds, named
        when someone invokes it and no installed plugin provides it);
        ``distribution`` the distribution to install. For a section, ``moved_to``
        names the place where the key belongs instead (``stations`` ->
        ``weather.stations``). For a sandbox, ``isolating=True`` says the
        backend isolates tools: only those are suggested when a run needs isolation.

    The kernel names no capability itself: when a config uses something no installed
    plugin provides, its error says "install <distribution>" only if some installed
    plugin (koboi-agent ships the first-party list) registered a hint. Called once
    per plugin host, with the catalog. Sync only.
    """


# ---------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    """Register the config sections this plugin owns.

    :param register: ``register(section, model, *, description="", aliases=None)``
        where ``section`` is the top-level YAML key (by convention the entry-point
        name) and ``model`` a pydantic ``BaseModel`` with ``extra="forbid"`` and a
        description on every field. The kernel validates the section with it and
        hands the instance back through ``AgentConfig.section(name)``.
        ``aliases`` maps other top-level names for part of the section (another
        framework's spelling: ``stations`` for ``weather.stations``) to a
        converter ``convert(value) -> mapping``: the mapping is merged into the
        section before it is validated (a key set both ways is a config problem),
        a ``ValueError`` it raises is a config problem of the alias, and
        ``koboi validate --suggest`` prints the preferred spelling.

    Called once per plugin host. Sync only.
    """


# ---------------------------------------------------------------------------
# Capabilities
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_providers(register: RegisterProvider) -> None:
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
def koboi_register_tools(register: RegisterTool) -> None:
    """Register tools.

    :param register: ``register(tool)`` with a :class:`koboi.Tool` instance
        (for example one made by ``@tool``), or ``register(name, factory, *,
        description="")`` where ``factory(config)`` receives the agent's
        :class:`koboi.AgentConfig` and returns a ``Tool`` named ``name``. A
        config enables tools by exact name under ``tools.builtin``.

    Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_toolsets(register: RegisterToolset) -> None:
    """Register toolsets: sources of tools that are only known at run time and may change.

    :param register: ``register(name, factory, *, description="")``. ``factory(config)``
        is called once per agent assembly with the agent's config and returns a
        :class:`koboi.toolsets.Toolset`, or None when that config does not use it
        (its section is absent, say). The kernel opens each toolset (async), offers
        its tools beside the config's own, asks it again whenever its ``version``
        changes (between steps), and closes it with the agent.

    Toolset tools go through the same exact-name lookup and decision pipeline as
    every tool. A name that collides with another tool is handled by the toolset's
    ``on_collision`` (``error`` refuses to open the agent, ``skip`` drops the
    toolset's tool, logs a warning, and each run's ``run_started`` lists it under
    ``tools_skipped``; a change mid-run is journaled as ``tools_changed``). Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_sandboxes(register: RegisterSandbox) -> None:
    """Register sandbox backends.

    :param register: ``register(name, factory, *, options=None, description="")``.
        ``factory(options, config)`` returns a :class:`koboi.Sandbox`; ``options``
        is the ``sandbox`` section minus ``backend``, validated by ``options``.

    Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_stores(register: RegisterStore) -> None:
    """Register store backends by URL scheme.

    :param register: ``register(scheme, factory, *, description="", default_url=None)``.
        ``factory(url, base_dir)`` returns a :class:`koboi.Store` for a
        ``store.url`` whose scheme (the part before ``:``, without a ``+driver``
        suffix) is ``scheme``; ``base_dir`` is the directory of the config file,
        against which relative paths resolve. A store that should be used when
        a config sets no ``store.url`` (and ``KOBOI_STORE`` is unset) passes its
        ``default_url``.

    A store must implement the journal (:class:`koboi.Store`); keyed records,
    the job queue and the response cache are optional capabilities
    (:mod:`koboi.store`). Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_runners(register: RegisterRunner) -> None:
    """Register run strategies: ways to run an agent other than the single loop.

    :param register: ``register(name, factory, *, options=None, description="")``.
        ``factory(options, config)`` returns a :class:`koboi.runners.Runner`;
        a config selects it with ``agent.runner: name`` (or ``agent.runner: {name:
        ..., <options>}``), ``options`` validating the rest. The kernel's own
        runner is ``loop``.

    A runner has the same contract as the loop everywhere an agent runs
    (``koboi run``, the library, ``koboi serve`` chats and jobs, resume): the kernel
    journals the run's start and end around it. Called once per plugin host. Sync only.
    """


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_commands(register: RegisterCommand) -> None:
    """Add subcommands to the ``koboi`` command.

    :param register: ``register(name, target, *, help="")`` where ``target`` is
        an import path ``"package.module:attribute"`` naming a ``typer.Typer``
        app (recommended), a click command object, or a plain typed function
        that typer can wrap. The target is
        imported only when the command is invoked, so ``koboi --help`` stays fast.

    Called once per plugin host. Sync only.
    """


@hookspec
def koboi_register_run_sources(register: RegisterRunSource) -> None:
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


@hookspec
def koboi_register_event_summaries(register: RegisterEventSummary) -> None:
    """Say in one line what the plugin's own journal events record.

    A plugin's events (``"<plugin id>.<name>"``, recorded with ``run.record``)
    are shown by ``koboi show`` and anything else that shows a journal; without
    a summary they are shown as their data, in JSON.

    :param register: ``register(target, *, description="")`` where ``target``
        is an import path ``"package.module:attribute"`` naming a function
        ``summary(event_type, data) -> str | None``, imported only when one of
        the plugin's events is shown. It is asked about this plugin's events
        only; ``data`` has been redacted; None (or an exception, which is
        logged) falls back to the JSON of ``data``. One registration per plugin.

    Called once per plugin host. Sync only.
    """


# ---------------------------------------------------------------------------
# Per-step seams
# ---------------------------------------------------------------------------


@hookspec
def koboi_register_interceptors(register: RegisterInterceptor, config: AgentConfig) -> None:
    """Register interceptors and observers for one agent.

    :param register: ``register(interceptor)`` with a :class:`koboi.Interceptor`
        instance. Its async methods run around every run, model call and tool call
        (in ascending ``priority``, then registration order), and ``on_event``
        observes every committed journal event.
    :param config: the validated config of the agent being assembled, so a
        plugin registers only what its section enables.

    Called once per agent assembly (not per step). Sync only; the interceptor's
    methods are async.
    """


def _spec_names() -> tuple[str, ...]:
    return tuple(
        name
        for name, value in dict(globals()).items()
        if name.startswith("koboi_") and callable(value) and hasattr(value, "koboi_spec")
    )


HOOK_NAMES: tuple[str, ...] = _spec_names()
"""Every kernel hook, in the order of this module."""

#: Kernel-reserved prefix: a ``koboi_register_*`` hook the kernel does not define is a
#: hook of a newer kernel, not another plugin's.
KERNEL_PREFIX = "koboi_register_"
