"""Plugin discovery and the plugin host.

Discovery reads the ``koboi.plugins`` entry points from metadata without
importing anything, applies ``KOBOI_LOAD_PLUGINS`` / ``KOBOI_DISABLE_PLUGINS``,
checks each plugin's declared ``koboi-core`` range against this kernel, and
only then imports each plugin inside its own error boundary. A plugin that
fails is listed with its reason and everything else keeps working;
``KOBOI_STRICT_PLUGINS=1`` turns every such failure into an error.

Order is deterministic: the kernel's built-in plugin first, then installed
plugins sorted by entry-point name.
"""

from __future__ import annotations

import importlib
import inspect
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, cast

import pluggy

from koboi import hookspecs
from koboi._version import __version__
from koboi.errors import PluginError, RegistrationError
from koboi.registry import Registration, Registry
from koboi.versions import requirement_specifier, satisfies

if TYPE_CHECKING:
    from pydantic import BaseModel

    from koboi.config import AgentConfig
    from koboi.interceptors import Interceptor

ENTRY_POINT_GROUP = "koboi.plugins"
KERNEL_DIST = "koboi-core"
BUILTIN_ID = "builtin"

PluginStatus = Literal["loaded", "failed", "disabled", "incompatible", "not-loaded"]

#: Hooks that are collected once per host (all but the per-agent ones).
_CATALOG_HOOKS = (
    "koboi_register_config_sections",
    "koboi_register_providers",
    "koboi_register_tools",
    "koboi_register_sandboxes",
    "koboi_register_stores",
    "koboi_register_commands",
    "koboi_register_run_sources",
)


def strict_from_env() -> bool:
    """True when ``KOBOI_STRICT_PLUGINS`` asks for plugin failures to be errors."""
    return os.environ.get("KOBOI_STRICT_PLUGINS", "").strip().lower() in ("1", "true", "yes", "on")


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
    hooks: list[str] = field(default_factory=list)
    load_seconds: float = 0.0


@dataclass
class Catalog:
    """Everything the loaded plugins registered, with owners."""

    sections: Registry[type[BaseModel]] = field(default_factory=lambda: Registry("config section"))
    providers: Registry[Callable[..., Any]] = field(default_factory=lambda: Registry("provider"))
    tools: Registry[Any] = field(default_factory=lambda: Registry("tool"))
    sandboxes: Registry[Callable[..., Any]] = field(
        default_factory=lambda: Registry("sandbox backend")
    )
    stores: Registry[Callable[..., Any]] = field(default_factory=lambda: Registry("store"))
    commands: Registry[str] = field(default_factory=lambda: Registry("command"))
    run_sources: Registry[str] = field(default_factory=lambda: Registry("run source"))

    def registries(self) -> dict[str, Registry[Any]]:
        return {
            "sections": self.sections,
            "providers": self.providers,
            "tools": self.tools,
            "sandboxes": self.sandboxes,
            "stores": self.stores,
            "commands": self.commands,
            "run_sources": self.run_sources,
        }


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
        self._commands: Registry[str] | None = None
        self._run_sources: Registry[str] | None = None
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
            if ep.name == BUILTIN_ID:
                info.status, info.reason = "failed", f"plugin id {BUILTIN_ID!r} is reserved"
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
        """Import and register every discovered, enabled, compatible plugin (once)."""
        if self._loaded:
            return
        self._loaded = True
        if not self._load_entry_points:
            return
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
                module = importlib.import_module(info.module.split(":", 1)[0])
                target: object = module
                if ":" in info.module:
                    for attr in info.module.split(":", 1)[1].split("."):
                        target = getattr(target, attr)
            except Exception as exc:
                info.load_seconds = time.perf_counter() - started
                self._infos[info.id] = info
                self._order.append(info.id)
                self._fail(info, "failed", f"import failed: {_one_line(exc)}", exc)
                continue
            info.load_seconds = time.perf_counter() - started
            self._register(info, target)

    def add_plugin(
        self, plugin: object, name: str, *, dist: str = "", version: str = ""
    ) -> PluginInfo:
        """Register a plugin object directly (applications and tests)."""
        if name in self._infos:
            raise PluginError(f"a plugin named {name!r} is already registered")
        info = PluginInfo(
            id=name,
            dist=dist or f"<{name}>",
            version=version or "0",
            module=getattr(plugin, "__name__", type(plugin).__name__),
        )
        self._catalog = None
        self._commands = None
        self._run_sources = None
        self._register(info, plugin)
        return info

    def _register(self, info: PluginInfo, plugin: object) -> None:
        self._infos[info.id] = info
        self._order.append(info.id)
        unknown = sorted(name for name in _marked_hooks(plugin) if name not in hookspecs.HOOK_NAMES)
        if unknown:
            self._fail(
                info,
                "incompatible",
                f"implements hook(s) this kernel ({KERNEL_DIST} {__version__}) does not "
                f"define: {', '.join(unknown)}",
            )
            return
        try:
            self.pm.register(plugin, name=info.id)
        except Exception as exc:
            self._fail(info, "incompatible", f"hook validation failed: {_one_line(exc)}", exc)
            return
        self._objects[info.id] = plugin
        info.hooks = sorted(_marked_hooks(plugin))
        info.status = "loaded"

    def _fail(
        self, info: PluginInfo, status: PluginStatus, reason: str, exc: BaseException | None = None
    ) -> None:
        info.status, info.reason = status, reason
        if self.pm.is_registered(self._objects.get(info.id)):
            self.pm.unregister(name=info.id)
        self._objects.pop(info.id, None)
        if self.strict:
            raise PluginError(f"plugin {info.id!r} ({info.dist} {info.version}): {reason}") from exc

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
        return [(p, self._objects[p.id]) for p in self.plugins if p.id in self._objects]

    # -- asking plugins ------------------------------------------------------

    def catalog(self) -> Catalog:
        """Collect every registration hook from every loaded plugin (once)."""
        if self._catalog is None:
            self._catalog = self._collect(_CATALOG_HOOKS)
        return self._catalog

    def commands(self) -> Registry[str]:
        """Only the CLI commands plugins add: what ``koboi --help`` needs, nothing more."""
        if self._catalog is not None:
            return self._catalog.commands
        if self._commands is None:
            self._commands = self._collect(("koboi_register_commands",)).commands
        return self._commands

    def run_sources(self) -> Registry[str]:
        """Only the run sources plugins add (``koboi run`` asks before loading a config)."""
        if self._catalog is not None:
            return self._catalog.run_sources
        if self._run_sources is None:
            self._run_sources = self._collect(("koboi_register_run_sources",)).run_sources
        return self._run_sources

    def run_source_for(self, path: str | os.PathLike[str]) -> Registration[str] | None:
        """The run source claiming ``path`` by its file-name ending (the longest wins), or None."""
        name = os.fspath(path).lower()
        best: tuple[int, Registration[str]] | None = None
        for entry in self.run_sources():
            for suffix in entry.extra.get("suffixes", ()):
                if name.endswith(suffix) and (best is None or len(suffix) > best[0]):
                    best = (len(suffix), entry)
        return best[1] if best is not None else None

    def _collect(self, hooks: Sequence[str]) -> Catalog:
        catalog = Catalog()
        for info, plugin in self.loaded():
            staged: list[tuple[Registry[Any], Registration[Any]]] = []
            try:
                for hook in hooks:
                    impl = _impl(plugin, hook)
                    if impl is None:
                        continue
                    impl(register=_registrar(hook, info.id, catalog, staged))
                seen: set[tuple[str, str]] = set()
                for registry, entry in staged:
                    key = (registry.kind, entry.name)
                    if key in seen or entry.name in registry:
                        other = registry.get(entry.name)
                        owner = other.plugin if other is not None else info.id
                        raise RegistrationError(
                            f"{registry.kind} {entry.name!r} is registered by two plugins: "
                            f"{owner!r} and {info.id!r}; disable one of them "
                            "(KOBOI_DISABLE_PLUGINS)"
                        )
                    seen.add(key)
            except Exception as exc:
                reason = (
                    _one_line(exc)
                    if isinstance(exc, RegistrationError)
                    else (f"registration failed: {_one_line(exc)}")
                )
                self._fail(info, "failed", reason, exc)
                continue
            for registry, entry in staged:
                registry.add(entry)
        return catalog

    def interceptors(self, config: AgentConfig) -> list[Interceptor]:
        """Ask every plugin for its interceptors for one agent, ordered by priority."""
        from koboi.interceptors import Interceptor

        found: list[Interceptor] = []
        for info, plugin in self.loaded():
            impl = _impl(plugin, "koboi_register_interceptors")
            if impl is None:
                continue

            def register(obj: object, _plugin: str = info.id) -> None:
                if not isinstance(obj, Interceptor):
                    raise RegistrationError(
                        f"plugin {_plugin!r} registered {obj!r}, which is not a koboi.Interceptor"
                    )
                found.append(obj)

            try:
                impl(register=register, config=config)
            except Exception as exc:
                # Never run an agent without an interceptor a plugin meant to add.
                raise PluginError(
                    f"plugin {info.id!r} failed to register its interceptors: {_one_line(exc)}"
                ) from exc
        return sorted(found, key=lambda i: i.priority)


def _registrar(
    hook: str, plugin: str, catalog: Catalog, staged: list[tuple[Registry[Any], Registration[Any]]]
) -> Callable[..., None]:
    """The ``register`` callable handed to ``hook``, bound to ``plugin``."""

    def options_model(name: str, options: Any) -> type[BaseModel] | None:
        if options is None:
            return None
        from pydantic import BaseModel  # only when something registers a model

        if isinstance(options, type) and issubclass(options, BaseModel):
            return options
        raise RegistrationError(f"{name!r}: options must be a pydantic BaseModel class")

    if hook == "koboi_register_config_sections":

        def register_section(
            section: str, model: type[BaseModel], *, description: str = ""
        ) -> None:
            from pydantic import BaseModel

            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise RegistrationError(
                    f"config section {section!r}: model must be a BaseModel class"
                )
            staged.append(
                (
                    catalog.sections,
                    Registration("config section", section, model, plugin, description=description),
                )
            )

        return register_section

    if hook == "koboi_register_tools":

        def register_tool(
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
                raise RegistrationError(
                    "register() takes a koboi.Tool, or a tool name and a factory"
                )
            try:
                validate_tool_name(name)
            except ValueError as exc:
                raise RegistrationError(str(exc)) from None
            staged.append(
                (catalog.tools, Registration("tool", name, target, plugin, description=description))
            )

        return register_tool

    if hook == "koboi_register_commands":

        def register_command(name: str, target: str, *, help: str = "") -> None:
            if not isinstance(target, str) or ":" not in target:
                raise RegistrationError(
                    f"command {name!r}: target must be an import path 'package.module:attribute'"
                )
            staged.append(
                (catalog.commands, Registration("command", name, target, plugin, description=help))
            )

        return register_command

    if hook == "koboi_register_run_sources":

        def register_run_source(
            name: str, target: str, *, suffixes: Sequence[str], description: str = ""
        ) -> None:
            if not isinstance(target, str) or ":" not in target:
                raise RegistrationError(
                    f"run source {name!r}: target must be an import path 'package.module:attribute'"
                )
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

        return register_run_source

    if hook == "koboi_register_stores":

        def register_store(
            scheme: str,
            factory: Callable[..., Any],
            *,
            description: str = "",
            default_url: str | None = None,
        ) -> None:
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

        return register_store

    registry = catalog.providers if hook == "koboi_register_providers" else catalog.sandboxes

    def register_component(
        name: str, factory: Callable[..., Any], *, options: Any = None, description: str = ""
    ) -> None:
        if not callable(factory):
            raise RegistrationError(f"{registry.kind} {name!r}: factory must be callable")
        staged.append(
            (
                registry,
                Registration(
                    registry.kind,
                    name,
                    factory,
                    plugin,
                    options=options_model(name, options),
                    description=description,
                ),
            )
        )

    return register_component


def _impl(plugin: object, hook: str) -> Callable[..., Any] | None:
    """The plugin's implementation of ``hook``, called with only the arguments it declares.

    As with pluggy, an implementation may accept fewer arguments than the spec
    offers (``def koboi_register_interceptors(register)`` is fine).
    """
    func = getattr(plugin, hook, None)
    if func is None or not hasattr(func, "koboi_impl"):
        return None
    try:
        declared = set(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return cast("Callable[..., Any]", func)

    def call(**kwargs: Any) -> Any:
        return func(**{k: v for k, v in kwargs.items() if k in declared})

    return call


def _marked_hooks(plugin: object) -> Iterable[str]:
    names = dir(plugin) if not isinstance(plugin, ModuleType) else list(vars(plugin))
    for name in names:
        try:
            value = getattr(plugin, name)
        except Exception:
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


_default_host: PluginHost | None = None


def default_host() -> PluginHost:
    """The process-wide plugin host used by the CLI and ``KoboiAgent`` by default."""
    global _default_host
    if _default_host is None:
        host = PluginHost()
        host.load()  # in strict mode this may raise: then nothing half-loaded is kept
        _default_host = host
    return _default_host


def reset_default_host() -> None:
    """Forget the process-wide host (tests that install or disable plugins)."""
    global _default_host
    _default_host = None


def plugin_ids(infos: Sequence[PluginInfo]) -> list[str]:
    return [p.id for p in infos]
