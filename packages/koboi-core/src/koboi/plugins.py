"""Plugin discovery and the plugin host.

Discovery reads the ``koboi.plugins`` entry points from metadata without
importing anything, applies ``KOBOI_LOAD_PLUGINS`` / ``KOBOI_DISABLE_PLUGINS``,
checks each plugin's declared ``koboi-core`` range against this kernel, and
only then imports each plugin inside its own error boundary. A plugin that
fails is listed with its reason and everything else keeps working;
``KOBOI_STRICT_PLUGINS=1`` turns every such failure into an error.

Order is deterministic: the kernel's built-in plugin first, then installed
plugins sorted by entry-point name.

Every hook is dispatched from one table (:data:`HOOKS`): the hook's name, when
it is called and the registrar that builds its ``register`` callable. Hook
implementations are read through pluggy's public API
(``HookCaller.get_hookimpls()``), and each is called with only the arguments
it declares. Plugins may publish hooks of their own
(``koboi_register_hookspecs``); their owners call them with :meth:`PluginHost.collect`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, cast

import pluggy

from koboi import hookspecs
from koboi._version import __version__
from koboi.errors import PluginError, RegistrationError, describe_error
from koboi.logs import get_logger
from koboi.registry import Registration, Registry
from koboi.versions import requirement_specifier, satisfies

log = get_logger("koboi.plugins")

if TYPE_CHECKING:
    from pydantic import BaseModel

    from koboi.config import AgentConfig
    from koboi.interceptors import Interceptor

ENTRY_POINT_GROUP = "koboi.plugins"
KERNEL_DIST = "koboi-core"
BUILTIN_ID = "builtin"

PluginStatus = Literal["loaded", "failed", "disabled", "incompatible", "not-loaded"]


def strict_from_env() -> bool:
    """True when ``KOBOI_STRICT_PLUGINS`` asks for plugin failures to be errors."""
    return os.environ.get("KOBOI_STRICT_PLUGINS", "").strip().lower() in ("1", "true", "yes", "on")


def hook_namespace(plugin_id: str) -> str:
    """The prefix of the hooks plugin ``plugin_id`` may define: ``koboi_<id>_`` (``-`` as ``_``)."""
    return "koboi_" + re.sub(r"[^0-9A-Za-z]+", "_", plugin_id).strip("_").lower() + "_"


def reserved_id(plugin_id: str) -> str:
    """Why ``plugin_id`` cannot be a plugin's id ("" when it can): ``builtin`` is the
    kernel's, and an id whose hook namespace would be the kernel's own
    (``register``, ``register-x``...) would make its hooks look like kernel hooks."""
    if plugin_id == BUILTIN_ID:
        return f"plugin id {BUILTIN_ID!r} is reserved"
    if hook_namespace(plugin_id).startswith(hookspecs.KERNEL_PREFIX):
        return (
            f"plugin id {plugin_id!r} is reserved: its hooks would be named "
            f"{hookspecs.KERNEL_PREFIX}..., the kernel's own; choose another id"
        )
    return ""


@dataclass
class PluginInfo:
    """What is known about one plugin: from metadata, and from loading it."""

    id: str
    dist: str
    version: str
    module: str
    builtin: bool = False
    status: PluginStatus = "not-loaded"
    reason: str = ""
    requires_core: str | None = None
    #: Hooks this plugin implements (kernel hooks and other plugins').
    hooks: list[str] = field(default_factory=list)
    #: Hooks this plugin defines for others (``koboi_register_hookspecs``).
    defines: list[str] = field(default_factory=list)
    #: Hooks it implements whose owner is not installed: never called (optional hooks).
    waiting: list[str] = field(default_factory=list)
    load_seconds: float = 0.0


@dataclass
class Hints:
    """Which distribution provides what (from ``koboi_register_hints``), for error messages."""

    entries: Registry[str] = field(default_factory=lambda: Registry("hint"))

    def distribution(self, kind: str, name: str) -> str | None:
        entry = self.entries.get(f"{kind}:{name}")
        return entry.target if entry is not None else None

    def moved_to(self, section: str) -> str | None:
        entry = self.entries.get(f"section:{section}")
        return entry.extra.get("moved_to") if entry is not None else None

    def names(self, kind: str) -> dict[str, str]:
        """``name -> distribution`` of every hint of ``kind``."""
        prefix = f"{kind}:"
        return {e.name[len(prefix) :]: e.target for e in self.entries if e.name.startswith(prefix)}

    def isolating_sandboxes(self) -> dict[str, str]:
        """``backend -> distribution`` of the sandbox hints that say they isolate tools."""
        return {
            e.name.removeprefix("sandbox:"): e.target
            for e in self.entries
            if e.name.startswith("sandbox:") and e.extra.get("isolating")
        }


@dataclass
class Catalog:
    """Everything the loaded plugins registered, with owners."""

    sections: Registry[type[BaseModel]] = field(default_factory=lambda: Registry("config section"))
    #: Other top-level spellings of part of a plugin's section (``stations`` for
    #: ``weather.stations``): the converter, with ``extra["section"]`` its owner.
    section_aliases: Registry[Callable[[Any], Mapping[str, Any]]] = field(
        default_factory=lambda: Registry("config section alias")
    )
    providers: Registry[Callable[..., Any]] = field(default_factory=lambda: Registry("provider"))
    tools: Registry[Any] = field(default_factory=lambda: Registry("tool"))
    toolsets: Registry[Callable[..., Any]] = field(default_factory=lambda: Registry("toolset"))
    sandboxes: Registry[Callable[..., Any]] = field(
        default_factory=lambda: Registry("sandbox backend")
    )
    stores: Registry[Callable[..., Any]] = field(default_factory=lambda: Registry("store"))
    runners: Registry[Callable[..., Any]] = field(default_factory=lambda: Registry("runner"))
    commands: Registry[str] = field(default_factory=lambda: Registry("command"))
    run_sources: Registry[str] = field(default_factory=lambda: Registry("run source"))
    #: Per plugin id (its events' namespace): the import path of its summary function.
    event_summaries: Registry[str] = field(default_factory=lambda: Registry("event summary"))
    hints: Hints = field(default_factory=Hints)

    def registries(self) -> dict[str, Registry[Any]]:
        """Every registry by its field name (``koboi plugins inspect`` shows them)."""
        return {
            "sections": self.sections,
            "section_aliases": self.section_aliases,
            "providers": self.providers,
            "tools": self.tools,
            "toolsets": self.toolsets,
            "sandboxes": self.sandboxes,
            "stores": self.stores,
            "runners": self.runners,
            "commands": self.commands,
            "run_sources": self.run_sources,
            "event_summaries": self.event_summaries,
            "hints": self.hints.entries,
        }

    def hint(self, kind: str, name: str) -> str:
        """``install <dist>`` when some plugin says who provides ``name``, else ``""``."""
        dist = self.hints.distribution(kind, name)
        return f"install {dist}" if dist else ""


# ---------------------------------------------------------------------------
# The dispatch table
# ---------------------------------------------------------------------------

#: Staged registrations of one plugin: kept only if the plugin's whole hook succeeds.
_Staged = list[tuple[Registry[Any], Registration[Any]]]
HookScope = Literal["load", "catalog", "agent"]


@dataclass(frozen=True)
class HookDispatch:
    """How the kernel calls one of its hooks.

    ``scope``: ``load`` (right after import), ``catalog`` (once per host) or
    ``agent`` (once per agent assembly). ``registrar(plugin, catalog, staged)``
    builds the ``register`` callable handed to one plugin's implementation.
    """

    scope: HookScope
    registrar: Callable[[str, Catalog, _Staged], Callable[..., None]]


def _options_model(name: str, options: Any) -> type[BaseModel] | None:
    if options is None:
        return None
    from pydantic import BaseModel  # only when something registers a model

    if isinstance(options, type) and issubclass(options, BaseModel):
        return options
    raise RegistrationError(f"{name!r}: options must be a pydantic BaseModel class")


def _import_path(kind: str, name: str, target: Any) -> str:
    if not isinstance(target, str) or ":" not in target:
        raise RegistrationError(
            f"{kind} {name!r}: target must be an import path 'package.module:attribute'"
        )
    return target


def _check_name(kind: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise RegistrationError(f"{kind}: the name must be a non-empty string, not {name!r}")
    return name


def _component_registrar(field_name: str) -> Callable[[str, Catalog, _Staged], Callable[..., None]]:
    """Providers, sandboxes, runners: ``register(name, factory, *, options=None, description="")``."""

    def make(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
        registry: Registry[Any] = getattr(catalog, field_name)

        def register(
            name: str, factory: Callable[..., Any], *, options: Any = None, description: str = ""
        ) -> None:
            _check_name(registry.kind, name)
            if not callable(factory):
                raise RegistrationError(f"{registry.kind} {name!r}: factory must be callable")
            entry = Registration(
                registry.kind,
                name,
                factory,
                plugin,
                options=_options_model(name, options),
                description=description,
            )
            staged.append((registry, entry))

        return register

    return make


def _section_registrar(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
    def register(
        section: str,
        model: type[BaseModel],
        *,
        description: str = "",
        aliases: Mapping[str, Callable[[Any], Mapping[str, Any]]] | None = None,
    ) -> None:
        from pydantic import BaseModel

        from koboi.config import KERNEL_SECTIONS

        _check_name("config section", section)
        if section in KERNEL_SECTIONS or section == "extends":
            raise RegistrationError(
                f"config section {section!r} is the kernel's; a plugin's section needs a "
                "name of its own (its plugin id, say)"
            )
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise RegistrationError(f"config section {section!r}: model must be a BaseModel class")
        staged.append(
            (
                catalog.sections,
                Registration("config section", section, model, plugin, description=description),
            )
        )
        for alias, convert in (aliases or {}).items():
            _check_name("config section alias", alias)
            if alias in KERNEL_SECTIONS or alias in ("extends", section):
                raise RegistrationError(
                    f"config section alias {alias!r} of {section!r}: a kernel section's or "
                    "its own section's name cannot be an alias"
                )
            if not callable(convert):
                raise RegistrationError(
                    f"config section alias {alias!r}: the converter must be callable"
                )
            staged.append(
                (
                    catalog.section_aliases,
                    Registration(
                        "config section alias",
                        alias,
                        convert,
                        plugin,
                        description=f"another spelling of part of {section!r}",
                        extra={"section": section},
                    ),
                )
            )

    return register


def _tool_registrar(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
    def register(
        tool_or_name: Any, factory: Callable[..., Any] | None = None, *, description: str = ""
    ) -> None:
        from koboi.tools import Tool, validate_tool_name

        if isinstance(tool_or_name, Tool):
            name = tool_or_name.name
            target: Any = tool_or_name
            description = description or tool_or_name.description
        elif isinstance(tool_or_name, str) and callable(factory):
            name, target = tool_or_name, factory
        else:
            raise RegistrationError("register() takes a koboi.Tool, or a tool name and a factory")
        try:
            validate_tool_name(name)
        except ValueError as exc:
            raise RegistrationError(str(exc)) from None
        staged.append(
            (catalog.tools, Registration("tool", name, target, plugin, description=description))
        )

    return register


def _toolset_registrar(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
    def register(name: str, factory: Callable[..., Any], *, description: str = "") -> None:
        _check_name("toolset", name)
        if not callable(factory):
            raise RegistrationError(f"toolset {name!r}: factory must be callable")
        staged.append(
            (
                catalog.toolsets,
                Registration("toolset", name, factory, plugin, description=description),
            )
        )

    return register


def _store_registrar(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
    def register(
        scheme: str,
        factory: Callable[..., Any],
        *,
        description: str = "",
        default_url: str | None = None,
    ) -> None:
        _check_name("store", scheme)
        if not callable(factory):
            raise RegistrationError(f"store {scheme!r}: factory must be callable")
        extra = {"default_url": default_url} if default_url else {}
        staged.append(
            (
                catalog.stores,
                Registration(
                    "store", scheme, factory, plugin, description=description, extra=extra
                ),
            )
        )

    return register


def _command_registrar(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
    def register(name: str, target: str, *, help: str = "") -> None:
        _check_name("command", name)
        staged.append(
            (
                catalog.commands,
                Registration(
                    "command",
                    name,
                    _import_path("command", name, target),
                    plugin,
                    description=help,
                ),
            )
        )

    return register


def _run_source_registrar(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
    def register(name: str, target: str, *, suffixes: Sequence[str], description: str = "") -> None:
        _check_name("run source", name)
        _import_path("run source", name, target)
        if isinstance(suffixes, str) or not suffixes:
            raise RegistrationError(
                f"run source {name!r}: suffixes must be a non-empty sequence such as ('.x',)"
            )
        claimed = tuple(str(s).lower() for s in suffixes)
        for suffix in claimed:
            if not suffix.startswith(".") or len(suffix) < 2:
                raise RegistrationError(
                    f"run source {name!r}: suffix {suffix!r} must start with '.'"
                )
        others = [*catalog.run_sources, *(e for r, e in staged if r is catalog.run_sources)]
        for other in others:
            shared = sorted(set(claimed) & set(other.extra.get("suffixes", ())))
            if shared:
                raise RegistrationError(
                    f"suffix {shared[0]!r} is claimed by two run sources: {other.name!r} "
                    f"(plugin {other.plugin!r}) and {name!r} (plugin {plugin!r}); disable "
                    "one of them (KOBOI_DISABLE_PLUGINS)"
                )
        staged.append(
            (
                catalog.run_sources,
                Registration(
                    "run source",
                    name,
                    target,
                    plugin,
                    description=description,
                    extra={"suffixes": claimed},
                ),
            )
        )

    return register


def _event_summary_registrar(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
    def register(target: str, *, description: str = "") -> None:
        # Named after the plugin: its events are "<plugin id>.<name>", and a second
        # registration of the same plugin is a duplicate.
        _import_path("event summary", plugin, target)
        if any(registry is catalog.event_summaries for registry, _ in staged):
            raise RegistrationError(
                f"plugin {plugin!r} registers an event summary twice; one function summarises "
                "all of a plugin's events"
            )
        staged.append(
            (
                catalog.event_summaries,
                Registration("event summary", plugin, target, plugin, description=description),
            )
        )

    return register


_HINT_KINDS = frozenset(
    ("section", "provider", "tool", "sandbox", "store_scheme", "runner", "stage", "command")
)


def _hint_registrar(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
    def register(
        kind: str,
        name: str,
        distribution: str,
        *,
        moved_to: str | None = None,
        isolating: bool = False,
    ) -> None:
        if kind not in _HINT_KINDS:
            raise RegistrationError(
                f"hint kind {kind!r} is not one of {', '.join(sorted(_HINT_KINDS))}"
            )
        _check_name("hint", name)
        _check_name("hint distribution", distribution)
        if moved_to is not None and kind != "section":
            raise RegistrationError(f"hint {kind}:{name}: only a section can be moved_to")
        if isolating and kind != "sandbox":
            raise RegistrationError(f"hint {kind}:{name}: only a sandbox can be isolating")
        extra: dict[str, Any] = {"kind": kind}
        if moved_to:
            extra["moved_to"] = moved_to
        if isolating:
            extra["isolating"] = True
        staged.append(
            (
                catalog.hints.entries,
                Registration("hint", f"{kind}:{name}", distribution, plugin, extra=extra),
            )
        )

    return register


def _not_collected(hook: str) -> Callable[[str, Catalog, _Staged], Callable[..., None]]:
    """Registrar of a hook the host calls with its own ``register`` (see its method)."""

    def make(plugin: str, catalog: Catalog, staged: _Staged) -> Callable[..., None]:
        raise PluginError(f"{hook} is not collected into a catalog")  # pragma: no cover

    return make


#: Every kernel hook: when it is called and how its ``register`` is built. A test
#: keeps this table equal to :data:`koboi.hookspecs.HOOK_NAMES`.
HOOKS: Mapping[str, HookDispatch] = {
    "koboi_register_hookspecs": HookDispatch("load", _not_collected("koboi_register_hookspecs")),
    "koboi_register_hints": HookDispatch("catalog", _hint_registrar),
    "koboi_register_config_sections": HookDispatch("catalog", _section_registrar),
    "koboi_register_providers": HookDispatch("catalog", _component_registrar("providers")),
    "koboi_register_tools": HookDispatch("catalog", _tool_registrar),
    "koboi_register_toolsets": HookDispatch("catalog", _toolset_registrar),
    "koboi_register_sandboxes": HookDispatch("catalog", _component_registrar("sandboxes")),
    "koboi_register_stores": HookDispatch("catalog", _store_registrar),
    "koboi_register_runners": HookDispatch("catalog", _component_registrar("runners")),
    "koboi_register_commands": HookDispatch("catalog", _command_registrar),
    "koboi_register_run_sources": HookDispatch("catalog", _run_source_registrar),
    "koboi_register_event_summaries": HookDispatch("catalog", _event_summary_registrar),
    "koboi_register_interceptors": HookDispatch(
        "agent", _not_collected("koboi_register_interceptors")
    ),
}

CATALOG_HOOKS: tuple[str, ...] = tuple(h for h, d in HOOKS.items() if d.scope == "catalog")


# ---------------------------------------------------------------------------
# The host
# ---------------------------------------------------------------------------


class PluginHost:
    """Finds, loads and asks the plugins.

    :param load_entry_points: discover installed plugins (off in unit tests that
        register their own plugin objects with :meth:`add_plugin`).
    :param strict: raise on any plugin failure; defaults to ``KOBOI_STRICT_PLUGINS``.
    :param builtins: register the kernel's built-in plugin.
    """

    def __init__(
        self,
        *,
        load_entry_points: bool = True,
        strict: bool | None = None,
        builtins: bool = True,
    ) -> None:
        self.strict = strict_from_env() if strict is None else strict
        self.pm = pluggy.PluginManager("koboi")
        self.pm.add_hookspecs(hookspecs)
        self._load_entry_points = load_entry_points
        self._infos: dict[str, PluginInfo] = {}
        self._objects: dict[str, object] = {}
        self._order: list[str] = []
        self._loaded = False
        self._catalog: Catalog | None = None
        self._partial: dict[str, Catalog] = {}
        self._collected: dict[str, Registry[Any]] = {}
        #: Strict mode: the error a plugin-defined hook's collection raised (raised again).
        self._collect_failures: dict[str, PluginError] = {}
        #: Plugin-defined hook name -> the plugin that defines it.
        self._spec_owners: dict[str, str] = {}
        if builtins:
            from koboi import _builtin

            info = PluginInfo(
                id=BUILTIN_ID,
                dist=KERNEL_DIST,
                version=__version__,
                module=_builtin.__name__,
                builtin=True,
            )
            self._register(info, _builtin)

    # -- discovery -----------------------------------------------------------

    def discover(self) -> list[PluginInfo]:
        """Installed plugins from metadata, filters applied, nothing imported."""
        found: dict[str, PluginInfo] = {}
        allow = _env_list("KOBOI_LOAD_PLUGINS")
        deny = set(_env_list("KOBOI_DISABLE_PLUGINS") or [])
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist_name = ep.dist.name if ep.dist is not None else "<unknown>"
            version = ep.dist.version if ep.dist is not None else "0"
            info = PluginInfo(id=ep.name, dist=dist_name, version=version, module=ep.value)
            previous = found.get(ep.name)
            if previous is not None:
                if (previous.dist, previous.module) == (info.dist, info.module):
                    continue  # the same distribution seen twice (lib64 -> lib symlinks)
                info.status = "failed"
                info.reason = (
                    f"plugin id {ep.name!r} is claimed by two distributions: "
                    f"{previous.dist} and {info.dist}"
                )
                previous.status, previous.reason = "failed", info.reason
                found[ep.name] = previous
                continue
            reserved = reserved_id(ep.name)
            if reserved:
                info.status, info.reason = "failed", reserved
            elif allow is not None and ep.name not in allow:
                info.status, info.reason = "disabled", "not in KOBOI_LOAD_PLUGINS"
            elif ep.name in deny:
                info.status, info.reason = "disabled", "listed in KOBOI_DISABLE_PLUGINS"
            elif ep.dist is not None:
                info.requires_core = _core_requirement(ep.dist)
                if info.requires_core and not _compatible(info.requires_core):
                    info.status = "incompatible"
                    info.reason = (
                        f"requires {KERNEL_DIST}{info.requires_core} but {__version__} is installed"
                    )
            found[ep.name] = info
        return [found[name] for name in sorted(found)]

    def load(self) -> None:
        """Import and register every discovered, enabled, compatible plugin (once),
        then add the hooks plugins define."""
        if self._loaded:
            return
        self._loaded = True
        if self._load_entry_points:
            for info in self.discover():
                if info.id in self._infos:
                    continue
                if info.status != "not-loaded":
                    self._infos[info.id] = info
                    self._order.append(info.id)
                    if info.status in ("failed", "incompatible"):
                        self._fail(info, info.status, info.reason)
                    continue
                started = time.perf_counter()
                try:
                    target = _import_target(info.module)
                except Exception as exc:  # a broken plugin must not take the others down
                    info.load_seconds = time.perf_counter() - started
                    self._infos[info.id] = info
                    self._order.append(info.id)
                    self._fail(info, "failed", f"import failed: {_one_line(exc)}", exc)
                    continue
                info.load_seconds = time.perf_counter() - started
                self._register(info, target)
        self._add_plugin_specs(self.loaded())

    def add_plugin(
        self, plugin: object, name: str, *, dist: str = "", version: str = ""
    ) -> PluginInfo:
        """Register a plugin object directly (applications and tests)."""
        if name in self._infos:
            raise PluginError(f"a plugin named {name!r} is already registered")
        reserved = reserved_id(name)
        if reserved:
            raise PluginError(reserved)
        info = PluginInfo(
            id=name,
            dist=dist or f"<{name}>",
            version=version or "0",
            module=getattr(plugin, "__name__", type(plugin).__name__),
        )
        self._catalog = None
        self._partial.clear()
        self._collected.clear()
        self._collect_failures.clear()
        self._register(info, plugin)
        if info.id in self._objects and self._loaded:
            self._add_plugin_specs([(info, plugin)])
        return info

    def _register(self, info: PluginInfo, plugin: object) -> None:
        self._infos[info.id] = info
        self._order.append(info.id)
        marked = sorted(set(_marked_hooks(plugin)))
        newer = sorted(
            name
            for name in marked
            if name.startswith(hookspecs.KERNEL_PREFIX) and name not in HOOKS
        )
        if newer:
            self._fail(
                info,
                "incompatible",
                f"implements hook(s) this kernel ({KERNEL_DIST} {__version__}) does not "
                f"define: {', '.join(newer)}",
            )
            return
        try:
            self.pm.register(plugin, name=info.id)
        except Exception as exc:  # pluggy's validation of the kernel hooks' signatures
            self._fail(info, "incompatible", f"hook validation failed: {_one_line(exc)}", exc)
            return
        self._objects[info.id] = plugin
        info.hooks = marked
        info.status = "loaded"

    def _fail(
        self, info: PluginInfo, status: PluginStatus, reason: str, exc: BaseException | None = None
    ) -> None:
        info.status, info.reason = status, reason
        obj = self._objects.pop(info.id, None)
        if obj is not None and self.pm.is_registered(obj):
            self.pm.unregister(name=info.id)
        # A plugin that fails after it registered things (a later collector hook) leaves
        # nothing behind: neither its catalog entries nor what other hooks collected.
        built = [*(self._catalog.registries().values() if self._catalog else ())]
        for registry in [*built, *self._collected.values()]:
            registry.drop_plugin(info.id)
        if self.strict:
            raise PluginError(f"plugin {info.id!r} ({info.dist} {info.version}): {reason}") from exc

    # -- plugins' own hooks --------------------------------------------------------------

    def _add_plugin_specs(self, plugins: Sequence[tuple[PluginInfo, object]]) -> None:
        """Ask ``plugins`` for the hooks they define, add them, and check who implements them."""
        for info, _plugin in plugins:
            found: list[object] = []
            try:
                for impl in self._impls_of("koboi_register_hookspecs", only=info.id):
                    _call(impl, register=found.append)
                names = self._check_specs(info, found)
            except Exception as exc:  # one plugin's bad specs must not break the others
                reason = (
                    _one_line(exc)
                    if isinstance(exc, PluginError)
                    else (f"koboi_register_hookspecs failed: {_one_line(exc)}")
                )
                self._fail(info, "failed", reason, exc)
                continue
            for specs in found:
                self._verify_implementers(specs)
                self.pm.add_hookspecs(cast("ModuleType | type", specs))
            info.defines = sorted(names)
            for name in names:
                self._spec_owners[name] = info.id
        self._note_waiting()

    def _check_specs(self, info: PluginInfo, found: Sequence[object]) -> list[str]:
        prefix = hook_namespace(info.id)
        names: list[str] = []
        for specs in found:
            defined = [
                n
                for n in _names_of(specs)
                if callable(getattr(specs, n, None)) and hasattr(getattr(specs, n), "koboi_spec")
            ]
            if not defined:
                raise RegistrationError(
                    f"plugin {info.id!r} registered hookspecs {specs!r} without any function "
                    "marked @hookspec"
                )
            for name in defined:
                if not name.startswith(prefix):
                    raise RegistrationError(
                        f"plugin {info.id!r} defines hook {name!r}; the hooks of plugin "
                        f"{info.id!r} must be named {prefix}..."
                    )
                owner = self._spec_owners.get(name)
                if owner is not None and owner != info.id:
                    raise RegistrationError(
                        f"hook {name!r} is defined by two plugins: {owner!r} and {info.id!r}"
                    )
                names.append(name)
        return names

    def _verify_implementers(self, specs: object) -> None:
        """A plugin whose implementation asks for arguments the new spec lacks fails (alone)."""
        for name in _names_of(specs):
            spec = getattr(specs, name, None)
            if not (callable(spec) and hasattr(spec, "koboi_spec")):
                continue
            caller = getattr(self.pm.hook, name, None)
            if caller is None:
                continue
            allowed = set(inspect.signature(spec).parameters)
            for impl in caller.get_hookimpls():
                extra = sorted(set(impl.argnames) - allowed)
                info = self._infos.get(impl.plugin_name)
                if extra and info is not None:
                    self._fail(
                        info,
                        "incompatible",
                        f"implements {name} with argument(s) {', '.join(extra)} that its "
                        "definition does not offer",
                    )

    def _note_waiting(self) -> None:
        for info, _plugin in self.loaded():
            info.waiting = sorted(
                h for h in info.hooks if h not in HOOKS and h not in self._spec_owners
            )

    def hook_owner(self, hook: str) -> str | None:
        """The plugin that defines ``hook`` (``builtin`` for the kernel's), or None."""
        self.load()
        if hook in HOOKS:
            return BUILTIN_ID
        return self._spec_owners.get(hook)

    def implementers(self, hook: str) -> list[str]:
        """Ids of the loaded plugins implementing ``hook``, in calling order."""
        self.load()
        return [impl.plugin_name for impl in self._impls_of(hook)]

    def collect(
        self,
        hook: str,
        *,
        kind: str | None = None,
        validate: Callable[[Registration[Any]], None] | None = None,
    ) -> Registry[Any]:
        """Call a plugin-defined collector hook and return what its implementations registered.

        Each implementation receives ``register(name, target, *, description="",
        **extra)`` bound to its plugin (:class:`koboi.hookspecs.RegisterEntry`); a name
        registered by two plugins is an error naming both, and a plugin whose
        implementation fails (or whose entry ``validate`` refuses with a
        :class:`~koboi.errors.RegistrationError`) is marked failed with the reason (an
        error in strict mode, every time the hook is collected), its entries dropped.
        ``kind`` names what is registered in messages (``"eval check"``). Collected
        once per host; later calls return the same registry.
        """
        self.load()
        cached = self._collected.get(hook)
        if cached is not None:
            if kind is not None:
                cached.kind = kind
            failure = self._collect_failures.get(hook)
            if failure is not None and self.strict:
                raise failure
            return cached
        if hook not in self._spec_owners:
            raise PluginError(
                f"no loaded plugin defines the hook {hook!r}"
                + ("" if hook not in HOOKS else " (it is a kernel hook: use the catalog)")
            )
        registry: Registry[Any] = Registry(kind or hook.removeprefix("koboi_"))
        self._collected[hook] = registry
        for impl in self._impls_of(hook):
            info = self._infos[impl.plugin_name]
            entries: list[Registration[Any]] = []

            def register(
                name: str,
                target: object,
                *,
                description: str = "",
                _plugin: str = info.id,
                _entries: list[Registration[Any]] = entries,
                **extra: Any,
            ) -> None:
                _check_name(registry.kind, name)
                entry = Registration(
                    registry.kind, name, target, _plugin, description=description, extra=dict(extra)
                )
                if validate is not None:
                    validate(entry)
                _entries.append(entry)

            try:
                _call(impl, register=register)
                seen: set[str] = set()
                for entry in entries:
                    if entry.name in seen or entry.name in registry:
                        other = registry.get(entry.name)
                        raise RegistrationError(
                            f"{registry.kind} {entry.name!r} is registered by two plugins: "
                            f"{other.plugin if other else info.id!r} and {info.id!r}; disable "
                            "one of them (KOBOI_DISABLE_PLUGINS)"
                        )
                    seen.add(entry.name)
            except Exception as exc:  # isolate the plugin; its failure is shown, never lost
                try:
                    self._fail(info, "failed", f"{hook} failed: {_one_line(exc)}", exc)
                except PluginError as strict:
                    self._collect_failures[hook] = strict
                    raise
                continue
            for entry in entries:
                registry.add(entry)
        return registry

    # -- inspection ----------------------------------------------------------

    @property
    def plugins(self) -> list[PluginInfo]:
        """Every plugin seen, built-ins first, then by entry-point name."""
        self.load()
        builtin = [self._infos[i] for i in self._order if self._infos[i].builtin]
        others = sorted(
            (self._infos[i] for i in self._order if not self._infos[i].builtin),
            key=lambda p: p.id,
        )
        return builtin + others

    def get(self, plugin_id: str) -> PluginInfo | None:
        self.load()
        return self._infos.get(plugin_id)

    def loaded(self) -> list[tuple[PluginInfo, object]]:
        builtin = [i for i in self._order if self._infos[i].builtin]
        others = sorted(i for i in self._order if not self._infos[i].builtin)
        return [
            (self._infos[i], self._objects[i]) for i in [*builtin, *others] if i in self._objects
        ]

    # -- asking plugins ------------------------------------------------------

    def catalog(self) -> Catalog:
        """Collect every catalog hook from every loaded plugin (once)."""
        if self._catalog is None:
            self.load()
            self._catalog = self._collect(CATALOG_HOOKS)
            self._partial.clear()
        return self._catalog

    def _part(self, hook: str) -> Catalog:
        """Only one catalog hook (``koboi --help`` needs the commands and nothing more)."""
        if self._catalog is not None:
            return self._catalog
        part = self._partial.get(hook)
        if part is None:
            self.load()
            part = self._partial[hook] = self._collect((hook,))
        return part

    def commands(self) -> Registry[str]:
        """Only the CLI commands plugins add: what ``koboi --help`` needs, nothing more."""
        return self._part("koboi_register_commands").commands

    def run_sources(self) -> Registry[str]:
        """Only the run sources plugins add (``koboi run`` asks before loading a config)."""
        return self._part("koboi_register_run_sources").run_sources

    def event_summaries(self) -> Registry[str]:
        """Only the plugins' event summaries (``koboi show`` needs nothing more)."""
        return self._part("koboi_register_event_summaries").event_summaries

    def summarize_event(self, event_type: str, data: Mapping[str, Any]) -> str | None:
        """The one-line summary a plugin gives of its event ``event_type`` (``data``
        already redacted), or None: no summary registered, or it failed (logged)."""
        namespace = event_type.partition(".")[0]
        entry = self.event_summaries().get(namespace)
        if entry is None:
            return None
        try:
            module, _, attribute = entry.target.partition(":")
            summary = getattr(importlib.import_module(module), attribute)
            text = summary(event_type, data)
        except Exception as exc:  # a plugin's summary never stops a journal being shown
            log.warning(
                "the event summary of plugin %r (%s) failed on %s: %s",
                entry.plugin,
                entry.target,
                event_type,
                describe_error(exc),
            )
            return None
        return text if isinstance(text, str) else None

    def run_source_for(self, path: str | os.PathLike[str]) -> Registration[str] | None:
        """The run source claiming ``path`` by its file-name ending (the longest wins), or None."""
        name = os.fspath(path).lower()
        best: tuple[int, Registration[str]] | None = None
        for entry in self.run_sources():
            for suffix in entry.extra.get("suffixes", ()):
                if name.endswith(suffix) and (best is None or len(suffix) > best[0]):
                    best = (len(suffix), entry)
        return best[1] if best is not None else None

    def _impls_of(self, hook: str, *, only: str | None = None) -> list[Any]:
        """The hook's implementations (pluggy ``HookImpl``), in the host's plugin order."""
        caller = getattr(self.pm.hook, hook, None)
        if caller is None:
            return []
        rank = {info.id: n for n, (info, _) in enumerate(self.loaded())}
        impls = [
            impl
            for impl in caller.get_hookimpls()
            if impl.plugin_name in rank and (only is None or impl.plugin_name == only)
        ]
        return sorted(impls, key=lambda impl: rank[impl.plugin_name])

    def _collect(self, hooks: Sequence[str]) -> Catalog:
        catalog = Catalog()
        for info, _plugin in self.loaded():
            staged: _Staged = []
            try:
                for hook in hooks:
                    dispatch = HOOKS[hook]
                    for impl in self._impls_of(hook, only=info.id):
                        _call(impl, register=dispatch.registrar(info.id, catalog, staged))
                keep: _Staged = []
                seen: set[tuple[str, str]] = set()
                for registry, entry in staged:
                    key = (registry.kind, entry.name)
                    other = registry.get(entry.name)
                    if (
                        registry is catalog.hints.entries
                        and other is not None
                        and other.target == entry.target
                    ):
                        continue  # two plugins agreeing on a hint: nothing to choose
                    if key in seen or other is not None:
                        owner = other.plugin if other is not None else info.id
                        raise RegistrationError(
                            f"{registry.kind} {entry.name!r} is registered by two plugins: "
                            f"{owner!r} and {info.id!r}; disable one of them "
                            "(KOBOI_DISABLE_PLUGINS)"
                        )
                    seen.add(key)
                    keep.append((registry, entry))
            except Exception as exc:  # isolate the plugin; `koboi plugins list` shows why
                reason = (
                    _one_line(exc)
                    if isinstance(exc, RegistrationError)
                    else (f"registration failed: {_one_line(exc)}")
                )
                self._fail(info, "failed", reason, exc)
                continue
            for registry, entry in keep:
                registry.add(entry)
        return catalog

    def interceptors(self, config: AgentConfig) -> list[Interceptor]:
        """Ask every plugin for its interceptors for one agent, ordered by priority.

        Each interceptor is tagged with the id of the plugin that registered it
        (``Interceptor.plugin``), which the journal and the logs use.
        """
        from koboi.interceptors import Interceptor

        self.load()
        found: list[Interceptor] = []
        for impl in self._impls_of("koboi_register_interceptors"):
            plugin = impl.plugin_name

            def register(obj: object, _plugin: str = plugin) -> None:
                if not isinstance(obj, Interceptor):
                    raise RegistrationError(
                        f"plugin {_plugin!r} registered {obj!r}, which is not a koboi.Interceptor"
                    )
                if not obj.plugin:
                    obj.plugin = _plugin
                found.append(obj)

            try:
                _call(impl, register=register, config=config)
            except Exception as exc:
                # Never run an agent without an interceptor a plugin meant to add.
                raise PluginError(
                    f"plugin {plugin!r} failed to register its interceptors: {_one_line(exc)}"
                ) from exc
        return sorted(found, key=lambda i: i.priority)


def _call(impl: Any, **kwargs: Any) -> Any:
    """Call a pluggy ``HookImpl`` with only the arguments it declares (pluggy's own rule:
    an implementation may accept fewer arguments than its spec offers)."""
    declared = set(impl.argnames) | set(impl.kwargnames)
    return impl.function(**{k: v for k, v in kwargs.items() if k in declared})


def _import_target(path: str) -> object:
    module = importlib.import_module(path.split(":", 1)[0])
    target: object = module
    if ":" in path:
        for attr in path.split(":", 1)[1].split("."):
            target = getattr(target, attr)
    return target


def _names_of(obj: object) -> list[str]:
    return list(vars(obj)) if isinstance(obj, ModuleType) else dir(obj)


def _marked_hooks(plugin: object) -> Iterable[str]:
    for name in _names_of(plugin):
        if not name.startswith("koboi_"):
            continue
        try:
            value = getattr(plugin, name)
        except Exception:  # a property that raises is simply not a hook
            continue
        if callable(value) and hasattr(value, "koboi_impl"):
            yield name


def _core_requirement(dist: metadata.Distribution) -> str | None:
    for requirement in dist.requires or []:
        spec = requirement_specifier(requirement, KERNEL_DIST)
        if spec is not None:
            return spec
    return None


def _compatible(spec: str) -> bool:
    try:
        return satisfies(__version__, spec)
    except ValueError:
        return False


def _env_list(name: str) -> list[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


# ---------------------------------------------------------------------------
# The process-wide host
# ---------------------------------------------------------------------------

_default_host: PluginHost | None = None
_injected: list[PluginHost] = []


def default_host() -> PluginHost:
    """The process-wide plugin host used by the CLI and ``KoboiAgent`` by default.

    Inside :func:`use_host` it is the host given there.
    """
    global _default_host
    if _injected:
        return _injected[-1]
    if _default_host is None:
        host = PluginHost()
        host.load()  # in strict mode this may raise: then nothing half-loaded is kept
        _default_host = host
    return _default_host


def injected_host() -> PluginHost | None:
    """The host :func:`use_host` made the default, or None outside it."""
    return _injected[-1] if _injected else None


@contextlib.contextmanager
def use_host(host: PluginHost) -> Iterator[PluginHost]:
    """Make ``host`` the default host for the block (tests, and applications that
    assemble their own plugin set): the CLI's commands and every agent built without
    ``host=`` use it."""
    host.load()
    _injected.append(host)
    try:
        yield host
    finally:
        _injected.remove(host)


def reset_default_host() -> None:
    """Forget the process-wide host (tests that install or disable plugins)."""
    global _default_host
    _default_host = None


def plugin_ids(infos: Sequence[PluginInfo]) -> list[str]:
    return [p.id for p in infos]


def registered_hooks(host: PluginHost) -> Mapping[str, str]:
    """Every hook the host knows, kernel and plugin-defined, with the id of its owner."""
    host.load()
    return {**dict.fromkeys(HOOKS, BUILTIN_ID), **host._spec_owners}
