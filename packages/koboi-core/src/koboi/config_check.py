"""Validating a config mapping against the kernel's sections and the installed plugins.

Every problem is collected before failing, each with its key path and a hint:
"did you mean ...", the known names, or "install <distribution>" when an installed
plugin (koboi-agent ships the first-party list) says who provides the name.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from koboi.config import (
    KERNEL_SECTIONS,
    AgentConfig,
    AgentSection,
    CacheSection,
    ProviderSection,
    SandboxSection,
    Spelling,
    StoreSection,
    ToolsSection,
)
from koboi.errors import ConfigProblem
from koboi.models import CACHE_MODES
from koboi.store_url import store_hint, store_scheme

if TYPE_CHECKING:
    from koboi.plugins import Catalog
    from koboi.registry import Registry

#: The kernel's own runner: valid even when no plugin host registered it.
KERNEL_RUNNER = "loop"


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    text = prefix
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _merge_alias(
    base: Mapping[str, Any], fragment: Mapping[str, Any], path: str, clashes: list[str]
) -> dict[str, Any]:
    """``fragment`` merged into ``base``; a leaf both set (differently) goes to ``clashes``."""
    merged = dict(base)
    for key, value in fragment.items():
        here = f"{path}.{key}"
        if key not in merged:
            merged[key] = value
        elif isinstance(value, Mapping) and isinstance(merged[key], Mapping):
            merged[key] = _merge_alias(merged[key], value, here, clashes)
        elif merged[key] != value:
            clashes.append(here)
    return merged


def _suggest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


class Checker:
    """Collects every problem of one config mapping (see the module doc)."""

    def __init__(
        self,
        catalog: Catalog,
        problems: list[ConfigProblem],
        env: Mapping[str, str],
        *,
        cache_mode: str | None = None,
    ) -> None:
        self.catalog = catalog
        self.problems = problems
        self.env = env
        self.cache_mode = cache_mode
        #: Key paths whose ${VAR} was unset: already reported, with the variable's name.
        self.unset = {p.path for p in problems}
        #: Handed to plugin option models as pydantic's validation context.
        self.context: dict[str, Any] = {}
        #: Aliased sections found (``koboi validate --suggest`` shows the preferred spelling).
        self.spellings: list[Spelling] = []

    def add(self, path: str, message: str, hint: str = "") -> None:
        self.problems.append(ConfigProblem(path, message, hint))

    def model(
        self, prefix: str, model: type[BaseModel], value: Any, *, plugin: bool = False
    ) -> BaseModel | None:
        if value is None:
            value = {}
        try:
            return model.model_validate(value, context=self.context if plugin else None)
        except ValidationError as exc:
            fields = list(model.model_fields)
            for err in exc.errors(include_url=False):
                loc = tuple(err["loc"])
                if err["type"] == "extra_forbidden":
                    key = str(loc[-1]) if loc else ""
                    hint = _suggest(key, fields) or (
                        f"known keys: {', '.join(fields)}" if fields else ""
                    )
                    self.add(_path(prefix, loc), "unknown key", hint)
                elif err["type"] == "missing":
                    self.add(_path(prefix, loc), "is required")
                elif err["type"] == "value_error":
                    if self._interpolation_failed_under(prefix):
                        # e.g. api_key: ${KEY} with KEY unset is reported once, by name;
                        # a validator's "no key" on top of it would only mislead.
                        continue
                    # A validator's own message: drop pydantic's "Value error, " prefix.
                    message = str(err.get("ctx", {}).get("error", "")) or err["msg"]
                    self.add(_path(prefix, loc), message)
                else:
                    self.add(_path(prefix, loc), err["msg"])
            return None

    def _interpolation_failed_under(self, prefix: str) -> bool:
        return any(
            path == prefix or path.startswith((prefix + ".", prefix + "[")) for path in self.unset
        )

    def aliases(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` with each registered alias (a top-level spelling of part of a plugin's
        section) converted and merged into its section; the alias keys removed."""
        result = dict(data)
        registry = self.catalog.section_aliases
        for key in list(data):
            entry = registry.get(key) if isinstance(key, str) else None
            if entry is None or key in self.catalog.sections or key in KERNEL_SECTIONS:
                continue
            section = str(entry.extra["section"])
            value = result.pop(key)
            try:
                fragment = entry.target(value)
            except ValueError as exc:
                self.add(key, str(exc), f"or write it as '{section}' (see koboi config schema)")
                continue
            own = result.get(section) or {}
            if not isinstance(own, Mapping):
                continue  # the section's own model reports its shape
            clashes: list[str] = []
            result[section] = _merge_alias(own, fragment, section, clashes)
            for clash in clashes:
                self.add(key, f"sets {clash}, which the config also sets", "keep one of the two")
            self.spellings.append(Spelling(key, section, dict(fragment)))
        return result

    def check(self, data: Mapping[str, Any]) -> AgentConfig | None:
        data = self.aliases(data)
        # First, so that plugin option models can see it (an HTTP provider needs no
        # key when every answer comes from the cache).
        cache = self.model("cache", CacheSection, data.get("cache"))
        mode = (self.cache_mode or str(self.env.get("KOBOI_CACHE_MODE", ""))).strip().lower()
        if mode and mode not in CACHE_MODES:
            self.add(
                "KOBOI_CACHE_MODE",
                f"'{mode}' is not a cache mode",
                f"use one of {', '.join(CACHE_MODES)}",
            )
            mode = ""
        if not mode and isinstance(cache, CacheSection):
            mode = cache.mode
        self.context["cache_mode"] = mode or "live"
        known = sorted({*KERNEL_SECTIONS, *self.catalog.sections.names()})
        sections: dict[str, BaseModel] = {}
        for key in data:
            if not isinstance(key, str):
                self.add(str(key), "section names must be strings")
                continue
            if key in KERNEL_SECTIONS:
                continue
            owner = self.catalog.sections.get(key)
            if owner is not None:
                result = self.model(key, owner.target, data[key], plugin=True)
                if result is not None:
                    sections[key] = result
                continue
            hints = self.catalog.hints
            dist = hints.distribution("section", key)
            moved = hints.moved_to(key)
            if moved is not None:
                parent = moved.split(".", 1)[0]
                hint = f"write it as '{moved}'"
                if dist and self.catalog.sections.get(parent) is None:
                    hint += f" (install {dist})"
                self.add(key, "not a top-level section", hint)
            elif dist:
                self.add(key, "no installed plugin owns this section", f"install {dist}")
            else:
                self.add(
                    key,
                    "unknown section",
                    _suggest(key, known) or f"known sections: {', '.join(known)}",
                )

        agent = self.model("agent", AgentSection, data.get("agent"))
        tools = self.model("tools", ToolsSection, data.get("tools"))
        store = self.model("store", StoreSection, data.get("store"))
        sandbox = self.model("sandbox", SandboxSection, data.get("sandbox"))
        providers, provider_options = self.providers(data.get("providers"))
        llm, llm_options = self.llm(data.get("llm"), providers, provider_options)
        sandbox_options = self.sandbox(sandbox) if isinstance(sandbox, SandboxSection) else None
        runner_name, runner_options = (
            self.runner(agent.runner) if isinstance(agent, AgentSection) else (KERNEL_RUNNER, None)
        )
        if isinstance(tools, ToolsSection):
            self.tools(tools)
        if isinstance(store, StoreSection):
            self.store(store)
        if self.problems:
            return None
        assert isinstance(agent, AgentSection) and isinstance(tools, ToolsSection)
        assert isinstance(store, StoreSection) and isinstance(sandbox, SandboxSection)
        assert llm is not None and isinstance(cache, CacheSection)
        llm_value = data.get("llm")
        return AgentConfig(
            agent=agent,
            llm=llm,
            llm_options=llm_options,
            tools=tools,
            store=store,
            sandbox=sandbox,
            sandbox_options=sandbox_options,
            providers=providers,
            provider_options=provider_options,
            llm_name=llm_value if isinstance(llm_value, str) else None,
            cache=cache,
            sections=sections,
            runner_name=runner_name,
            runner_options=runner_options,
            cache_mode=self.context["cache_mode"],
            spellings=list(self.spellings),
        )

    def runner(self, value: str | Mapping[str, Any]) -> tuple[str, Any]:
        """``agent.runner``: a name, or ``{name: ..., <options>}``; its options validated."""
        if isinstance(value, str):
            name, options = value, {}
        else:
            options = dict(value)
            name = options.pop("name", None)
            if not isinstance(name, str) or not name:
                self.add("agent.runner.name", "is required", "e.g. agent.runner: {name: dag, ...}")
                return KERNEL_RUNNER, None
        registration = self.catalog.runners.get(name)
        if registration is None:
            if name == KERNEL_RUNNER:
                return name, None
            known = sorted({KERNEL_RUNNER, *self.catalog.runners.names()})
            hint = self.catalog.hint("runner", name) or (
                _suggest(name, known) or f"installed: {', '.join(known)}"
            )
            self.add("agent.runner", f"unknown runner '{name}'", hint)
            return KERNEL_RUNNER, None
        if registration.options is None:
            if options and name == KERNEL_RUNNER:
                self.add("agent.runner", "the loop runner takes no options")
            return name, options
        return name, self.model("agent.runner", registration.options, options, plugin=True)

    def providers(self, value: Any) -> tuple[dict[str, ProviderSection], dict[str, Any]]:
        if value is None:
            return {}, {}
        if not isinstance(value, Mapping):
            self.add("providers", "must be a mapping of name -> provider settings")
            return {}, {}
        found: dict[str, ProviderSection] = {}
        options: dict[str, Any] = {}
        for name, settings in value.items():
            path = f"providers.{name}"
            section = self.model(path, ProviderSection, settings)
            if isinstance(section, ProviderSection):
                options[str(name)] = self.provider_options(path, section)
                found[str(name)] = section
        for name, section in found.items():
            if section.pool is not None:
                self.pool_members(f"providers.{name}", section, found)
        return found, options

    def pool_members(
        self, path: str, section: ProviderSection, providers: Mapping[str, ProviderSection]
    ) -> None:
        members = section.pool or []
        if not members:
            self.add(f"{path}.pool", "must name at least one provider")
        for index, member in enumerate(members):
            target = providers.get(member)
            if target is None:
                names = sorted(n for n, p in providers.items() if not p.is_pool)
                self.add(
                    f"{path}.pool[{index}]",
                    f"names provider '{member}', which the providers map does not define",
                    _suggest(member, names) or f"defined: {', '.join(names) or 'none'}",
                )
            elif target.is_pool:
                self.add(
                    f"{path}.pool[{index}]",
                    f"'{member}' is itself a pool; a pool lists providers, not pools",
                )
        if len(set(members)) != len(members):
            self.add(f"{path}.pool", "names a provider more than once")

    def component_options(
        self,
        path: str,
        key: str,
        name: str,
        registry: Registry[Any],
        hint_kind: str,
        section: BaseModel,
    ) -> Any:
        """Validate the options of a section that names a registered component.

        ``key`` is the selector key (``provider``, ``backend``); every other key of
        ``section`` is an option, checked against the component's options model.
        """
        registration = registry.get(name)
        if registration is None:
            known = registry.names()
            hint = self.catalog.hint(hint_kind, name) or (
                _suggest(name, known) or f"installed: {', '.join(known) or 'none'}"
            )
            self.add(f"{path}.{key}", f"unknown {registry.kind} '{name}'", hint)
            return None
        options = dict(section.model_extra or {})
        if registration.options is None:
            return options
        return self.model(path, registration.options, options, plugin=True)

    def provider_options(self, path: str, section: ProviderSection) -> Any:
        if section.provider is not None and section.pool is not None:
            self.add(path, "has both 'provider' and 'pool'", "a section is one provider or a pool")
            return None
        if section.pool is not None:
            extra = sorted(section.model_extra or {})
            if extra:
                self.add(
                    f"{path}.{extra[0]}",
                    "unknown key for a pool",
                    "a pool takes pool, failure_threshold, cooldown_seconds, context_window; "
                    "give options to its members",
                )
            return None
        if section.provider is None:
            self.add(
                f"{path}.provider",
                "is required",
                "name a provider (provider: openai) or list providers (pool: [a, b])",
            )
            return None
        return self.component_options(
            path, "provider", section.provider, self.catalog.providers, "provider", section
        )

    def llm(
        self, value: Any, providers: dict[str, ProviderSection], options: Mapping[str, Any]
    ) -> tuple[ProviderSection | None, Any]:
        if value is None:
            self.add("llm", "is required", "add an llm section, e.g. llm: {provider: scripted}")
            return None, None
        if isinstance(value, str):
            section = providers.get(value)
            if section is None:
                names = sorted(providers)
                self.add(
                    "llm",
                    f"names provider '{value}', which the providers map does not define",
                    _suggest(value, names) or f"defined: {', '.join(names) or 'none'}",
                )
                return None, None
            return section, options.get(value)
        parsed = self.model("llm", ProviderSection, value)
        if not isinstance(parsed, ProviderSection):
            return None, None
        llm_options = self.provider_options("llm", parsed)
        if parsed.pool is not None:
            self.pool_members("llm", parsed, providers)
        return parsed, llm_options

    def sandbox(self, section: SandboxSection) -> Any:
        return self.component_options(
            "sandbox",
            "backend",
            section.backend,
            self.catalog.sandboxes,
            "sandbox",
            section,
        )

    def tools(self, section: ToolsSection) -> None:
        known = self.catalog.tools.names()
        seen: set[str] = set()
        for index, name in enumerate(section.builtin):
            path = f"tools.builtin[{index}]"
            if name in seen:
                self.add(path, f"tool '{name}' is listed twice")
            seen.add(name)
            if name in self.catalog.tools:
                continue
            close = _suggest(name, known)
            hint = close or self.catalog.hint("tool", name)
            listing = f"known tools: {', '.join(known) or 'none'}"
            self.add(path, f"unknown tool '{name}'", f"{hint}; {listing}" if hint else listing)

    def store(self, section: StoreSection) -> None:
        if section.url is None:
            return
        scheme = store_scheme(section.url)
        if scheme is None:
            self.add(
                "store.url",
                f"'{section.url}' is not a URL",
                "e.g. memory:// or sqlite:///.koboi/koboi.db",
            )
            return
        if scheme not in self.catalog.stores:
            self.add(
                "store.url",
                f"no installed store handles '{scheme}://' URLs",
                store_hint(scheme, self.catalog),
            )
