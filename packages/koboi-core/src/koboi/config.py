"""Loading and validating the one YAML file that configures an agent.

The kernel owns the sections ``agent``, ``llm``, ``providers``, ``tools``, ``cache``,
``store`` and ``sandbox``; every other top-level section belongs to the plugin
that registered a model for it. Validation collects *every* problem before
failing, each with the file, the key path and a hint.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from koboi import _hints
from koboi.errors import ConfigError, ConfigProblem
from koboi.interpolation import interpolate, load_dotenv
from koboi.plugins import Catalog
from koboi.registry import Registry
from koboi.tools import Risk

if TYPE_CHECKING:
    from koboi.store import Store

Mode = Literal["chat", "plan", "act", "auto", "yolo"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentSection(_Section):
    """The agent itself: who it is and how its loop runs."""

    name: str = Field(
        default="agent", description="Name shown in logs, the journal and the server."
    )
    system_prompt: str = Field(
        default="", description="System prompt sent before the conversation."
    )
    mode: Mode = Field(
        default="act",
        description="Autonomy mode (see docs/governance.md): chat (read-only tools), plan "
        "(read-only and planning tools), act (every tool; moderate and destructive ones need "
        "approval), auto (moderate ones run without asking inside an isolating sandbox), yolo "
        "(no approval prompts; the sandbox and hard denies still apply).",
    )
    max_iterations: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description="Most model calls in one run; reaching it ends the run as 'max_iterations'.",
    )
    parallel_tool_calls: bool = Field(
        default=False,
        description="Run the tool calls of one model turn concurrently instead of in order.",
    )
    approval_risk: Risk = Field(
        default=Risk.MODERATE,
        description="Tools at or above this risk need an approver's yes before they run.",
    )
    approval_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How long a tool call waits for an approver; no decision by then is a "
        "'no'. The deadline is journaled, so it also holds across a crash and resume.",
    )
    stream: bool = Field(
        default=True, description="Ask the provider to stream text as it is produced."
    )
    on_interrupted_tool: Literal["tell_model", "ask", "fail"] = Field(
        default="tell_model",
        description=(
            "On resume, what to do with a non-idempotent tool call that started and never "
            "finished: tell_model (its result says the outcome is unknown), ask (the approver "
            "decides whether to run it again) or fail (end the run)."
        ),
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description=(
            "How long a run's hold on its session lasts without renewal; another process may "
            "take an interrupted session over once it has expired."
        ),
    )
    max_total_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Budget: a run stops (outcome 'budget_exceeded') once its model calls have "
        "used this many tokens, input and output together.",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="Budget: a run stops (outcome 'budget_exceeded') once its model calls have "
        "cost this much, at the prices in the providers' 'pricing'.",
    )


class Pricing(_Section):
    """What a model's tokens cost, in US dollars per million tokens."""

    input: float = Field(default=0.0, ge=0, description="Per million uncached input tokens.")
    output: float = Field(
        default=0.0, ge=0, description="Per million output tokens (reasoning tokens included)."
    )
    cache_read: float | None = Field(
        default=None,
        ge=0,
        description="Per million input tokens read from the cache; default: input.",
    )
    cache_write: float | None = Field(
        default=None,
        ge=0,
        description="Per million input tokens written to the cache; default: input.",
    )


class ProviderSection(BaseModel):
    """A model provider, or a pool of named providers.

    ``provider`` names the plugin and every key the kernel does not own is that
    provider's option. ``pool`` instead lists names from the ``providers`` map,
    tried in order with a circuit breaker.
    """

    model_config = ConfigDict(extra="allow")

    provider: str | None = Field(
        default=None, description="Registered provider name (scripted, openai, anthropic...)."
    )
    pool: list[str] | None = Field(
        default=None,
        description="Instead of 'provider': names from the providers map, tried in order; a "
        "member that fails is skipped for the rest of the call (failover).",
    )
    failure_threshold: int = Field(
        default=3,
        ge=1,
        description="Pool only: consecutive failures after which a member is skipped for "
        "'cooldown_seconds' (the circuit breaker opens).",
    )
    cooldown_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Pool only: how long a member whose breaker opened is skipped before one "
        "trial call is let through.",
    )
    pricing: Pricing | None = Field(
        default=None,
        description="Token prices of this provider's model, for cost accounting and max_cost_usd.",
    )

    @property
    def is_pool(self) -> bool:
        return self.pool is not None


class CacheSection(_Section):
    """The response cache: model answers kept in the store, keyed by a hash of the request."""

    mode: Literal["live", "record", "replay", "cache"] = Field(
        default="live",
        description="live: no cache. record: call the model and keep every answer. replay: "
        "answer only from the cache, a miss is an error. cache: answer from the cache when "
        "it can, else call the model and keep the answer. KOBOI_CACHE_MODE overrides it.",
    )


class ToolsSection(_Section):
    """Which tools the agent may use."""

    builtin: list[str] = Field(
        default_factory=list,
        description="Names of registered tools to enable, exactly as registered.",
    )
    timeout_seconds: float | None = Field(
        default=300.0, gt=0, description="Wall-clock limit of one tool call; None for no limit."
    )
    max_argument_bytes: int = Field(
        default=256 * 1024,
        gt=0,
        description="Largest arguments of one tool call (UTF-8 bytes of their canonical JSON); "
        "larger ones are refused before any other check.",
    )


class StoreSection(_Section):
    """Where sessions and their journals are kept."""

    url: str | None = Field(
        default=None,
        description=(
            "Store URL; the scheme picks the store plugin (memory://, sqlite:///path, "
            "postgresql+psycopg://...). Unset: KOBOI_STORE, else the default of the installed "
            "durable store (.koboi/koboi.db beside the config), else memory://."
        ),
    )


class SandboxSection(BaseModel):
    """Where tools run: ``backend`` names the sandbox, other keys are its options."""

    model_config = ConfigDict(extra="allow")

    backend: str = Field(default="passthrough", description="Registered sandbox backend name.")


KERNEL_SECTIONS: dict[str, type[BaseModel]] = {
    "agent": AgentSection,
    "llm": ProviderSection,
    "providers": ProviderSection,
    "tools": ToolsSection,
    "store": StoreSection,
    "sandbox": SandboxSection,
    "cache": CacheSection,
}


@dataclass
class AgentConfig:
    """A validated config: kernel sections, plugin sections and where it came from."""

    agent: AgentSection
    llm: ProviderSection
    llm_options: Any
    tools: ToolsSection
    store: StoreSection
    sandbox: SandboxSection
    sandbox_options: Any
    providers: dict[str, ProviderSection] = field(default_factory=dict)
    provider_options: dict[str, Any] = field(default_factory=dict)
    llm_name: str | None = None
    cache: CacheSection = field(default_factory=CacheSection)
    sections: dict[str, BaseModel] = field(default_factory=dict)
    source: Path | None = None
    base_dir: Path = field(default_factory=Path.cwd)
    raw: dict[str, Any] = field(default_factory=dict)
    config_hash: str = ""

    def section(self, name: str) -> BaseModel | None:
        """The validated model of a plugin-owned section, or None when absent."""
        return self.sections.get(name)

    @property
    def name(self) -> str:
        return self.agent.name


# -- reading files -------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate keys instead of keeping the last."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first on line {seen[key] + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def read_yaml(path: Path) -> dict[str, Any]:
    """Read one YAML mapping; errors name the file, line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [ConfigProblem("", "file not found", "check the path")], str(path)
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            [ConfigProblem("", "is a directory, not a YAML file")], str(path)
        ) from None
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem("", "is not UTF-8 text")], str(path)) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            [ConfigProblem("", f"invalid YAML: {where}{problem}")], str(path)
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                ConfigProblem(
                    "", f"the top level must be a mapping of sections, not {type(data).__name__}"
                )
            ],
            str(path),
        )
    return data


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``override`` into ``base``: mappings recursively, everything else replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_with_extends(path: Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read ``path`` and the files it ``extends`` (relative to it), merged base-first."""
    resolved = path.resolve()
    if resolved in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain, resolved))
        raise ConfigError([ConfigProblem("extends", f"extends cycle: {cycle}")], str(_chain[0]))
    data = read_yaml(path)
    parents = data.pop("extends", None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ConfigError(
            [ConfigProblem("extends", "must be a file path or a list of file paths")], str(path)
        )
    merged: dict[str, Any] = {}
    for parent in parents:
        merged = deep_merge(merged, read_with_extends(path.parent / parent, (*_chain, resolved)))
    return deep_merge(merged, data)


def load_env_files(base_dir: Path) -> None:
    """Load ``.env`` beside the config, then in the working directory; never override."""
    seen: set[Path] = set()
    for directory in (base_dir, Path.cwd()):
        candidate = (directory / ".env").resolve()
        if candidate not in seen:
            seen.add(candidate)
            load_dotenv(candidate, os.environ)


def config_hash(raw: Mapping[str, Any]) -> str:
    """A stable hash of the config as written (before interpolation)."""
    text = json.dumps(raw, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_config(
    path: str | os.PathLike[str],
    catalog: Catalog | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Read, interpolate and validate a config file. Raises :class:`ConfigError`."""
    file = Path(path)
    base_dir = file.resolve().parent
    raw = read_with_extends(file)
    if env is None:
        load_env_files(base_dir)
    return validate_config(raw, catalog, source=file, base_dir=base_dir, env=env)


def validate_config(
    raw: Mapping[str, Any],
    catalog: Catalog | None = None,
    *,
    source: Path | None = None,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Validate an already-read config mapping against the installed plugins."""
    if catalog is None:
        from koboi.plugins import default_host

        catalog = default_host().catalog()
    label = str(source) if source else None
    if not isinstance(raw, Mapping):
        raise ConfigError([ConfigProblem("", "the config must be a mapping of sections")], label)
    raw = dict(raw)
    raw.pop("extends", None)
    data, problems = interpolate(raw, os.environ if env is None else env)
    checker = _Checker(catalog, problems, os.environ if env is None else env)
    config = checker.check(data)
    if checker.problems or config is None:
        raise ConfigError(checker.problems, label)
    config.source = source
    config.base_dir = base_dir or Path.cwd()
    config.raw = dict(raw)
    config.config_hash = config_hash(raw)
    return config


# -- validation ------------------------------------------------------------------


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    text = prefix
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _suggest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


class _Checker:
    def __init__(
        self, catalog: Catalog, problems: list[ConfigProblem], env: Mapping[str, str]
    ) -> None:
        self.catalog = catalog
        self.problems = problems
        self.env = env
        #: Key paths whose ${VAR} was unset: already reported, with the variable's name.
        self.unset = {p.path for p in problems}
        #: Handed to plugin option models as pydantic's validation context.
        self.context: dict[str, Any] = {}

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

    def check(self, data: Mapping[str, Any]) -> AgentConfig | None:
        # First, so that plugin option models can see it (an HTTP provider needs no
        # key when every answer comes from the cache).
        cache = self.model("cache", CacheSection, data.get("cache"))
        mode = str(self.env.get("KOBOI_CACHE_MODE", "")).strip().lower()
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
            dist = _hints.SECTIONS.get(key)
            moved = _hints.NESTED_SECTIONS.get(key)
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
        )

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
        hints: Mapping[str, str],
        section: BaseModel,
    ) -> Any:
        """Validate the options of a section that names a registered component.

        ``key`` is the selector key (``provider``, ``backend``); every other key of
        ``section`` is an option, checked against the component's options model.
        """
        registration = registry.get(name)
        if registration is None:
            dist = hints.get(name)
            known = registry.names()
            hint = (
                f"install {dist}"
                if dist
                else (_suggest(name, known) or f"installed: {', '.join(known) or 'none'}")
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
                    "a pool takes pool, failure_threshold, cooldown_seconds; give options to "
                    "its members",
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
            path, "provider", section.provider, self.catalog.providers, _hints.PROVIDERS, section
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
            _hints.SANDBOXES,
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
            dist = _hints.TOOLS.get(name)
            close = _suggest(name, known)
            hint = f"install {dist}" if dist and not close else close
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
                _store_hint(scheme, self.catalog),
            )


def _store_hint(scheme: str, catalog: Catalog) -> str:
    """What to do about a store scheme no installed plugin handles."""
    dist = _hints.STORE_SCHEMES.get(scheme)
    if dist:
        return f"install {dist}"
    return f"installed store schemes: {', '.join(catalog.stores.names()) or 'none'}"


def store_scheme(url: str) -> str | None:
    """``postgresql+psycopg://...`` -> ``postgresql``; None if ``url`` has no scheme."""
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        scheme, sep, _ = url.partition(":")
        if not sep or not scheme:
            return None
    return scheme.split("+", 1)[0].lower()


def resolve_store_url(config: AgentConfig | None, catalog: Catalog) -> str:
    """Which store a command uses — one rule everywhere (docs/config.md, "Finding the store").

    1. ``store.url`` of the config, when the config sets it;
    2. else the ``KOBOI_STORE`` environment variable;
    3. else the default URL of an installed store plugin that declares one
       (``sqlite:///.koboi/koboi.db`` with koboi-store-sql), relative to the
       config's directory (or the working directory without a config);
    4. else ``memory://``.
    """
    if config is not None and config.store.url:
        return config.store.url
    from_env = os.environ.get("KOBOI_STORE", "").strip()
    if from_env:
        return from_env
    defaults = [e for e in catalog.stores if e.extra.get("default_url")]
    defaults.sort(key=lambda e: (e.plugin == "builtin", e.plugin))
    if defaults:
        return str(defaults[0].extra["default_url"])
    return "memory://"


def build_store(url: str, base_dir: Path, catalog: Catalog) -> Store:
    """The store the installed plugin for ``url``'s scheme makes (not yet opened)."""
    from koboi.errors import KoboiError
    from koboi.store import Store

    scheme = store_scheme(url) or ""
    entry = catalog.stores.get(scheme)
    if entry is None:
        hint = _store_hint(scheme, catalog)
        raise KoboiError(f"no installed store handles '{scheme}://' URLs ({hint})")
    store = entry.target(url, base_dir)
    if not isinstance(store, Store):
        raise KoboiError(f"store plugin {entry.plugin!r} returned {store!r}, not a koboi.Store")
    return store


def config_schema(catalog: Catalog) -> dict[str, Any]:
    """The JSON schema of a config file, for the kernel and every installed plugin."""
    properties: dict[str, Any] = {}
    for name, model in KERNEL_SECTIONS.items():
        schema = model.model_json_schema()
        if name == "providers":
            schema = {
                "type": "object",
                "additionalProperties": schema,
                "description": "Named providers; 'llm' may name one.",
            }
        elif name == "llm":
            schema = {
                "anyOf": [schema, {"type": "string", "description": "A name from 'providers'."}]
            }
        properties[name] = schema
    for entry in catalog.sections:
        schema = entry.target.model_json_schema()
        schema["description"] = entry.description or schema.get("description", "")
        schema["x-koboi-plugin"] = entry.plugin
        properties[entry.name] = schema
    properties["extends"] = {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        "description": "Config file(s) this one is based on, relative to it.",
    }
    provider_options = {
        e.name: e.options.model_json_schema() for e in catalog.providers if e.options is not None
    }
    sandbox_options = {
        e.name: e.options.model_json_schema() for e in catalog.sandboxes if e.options is not None
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "koboi config",
        "type": "object",
        "additionalProperties": False,
        "required": ["llm"],
        "properties": properties,
        "x-koboi-provider-options": provider_options,
        "x-koboi-sandbox-options": sandbox_options,
        "x-koboi-tools": catalog.tools.names(),
        "x-koboi-store-schemes": catalog.stores.names(),
    }
