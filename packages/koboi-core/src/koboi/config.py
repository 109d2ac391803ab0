"""Loading and validating the one YAML file that configures an agent.

The kernel owns the sections ``agent``, ``llm``, ``providers``, ``tools``, ``cache``,
``store`` and ``sandbox``; every other top-level section belongs to the plugin
that registered a model for it. Validation collects *every* problem before
failing, each with the file, the key path and a hint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from koboi.config_files import (
    config_hash,
    deep_merge,
    load_env_files,
    read_with_extends,
    read_yaml,
)
from koboi.errors import ConfigError, ConfigProblem
from koboi.interpolation import interpolate
from koboi.store_url import (
    build_store,
    project_dir,
    resolve_store,
    resolve_store_url,
    store_scheme,
)
from koboi.tools import Risk

if TYPE_CHECKING:
    from koboi.plugins import Catalog

Mode = Literal["chat", "plan", "act", "auto", "yolo"]

#: The modes from the most to the least restrictive: a sub-agent may run in its
#: parent's mode or one before it, never one after (see docs/governance.md).
MODE_ORDER: tuple[Mode, ...] = ("chat", "plan", "act", "auto", "yolo")


def mode_within(mode: str, ceiling: str) -> bool:
    """True when ``mode`` allows no more than ``ceiling`` (a child's mode and its parent's)."""
    order: tuple[str, ...] = MODE_ORDER
    return mode in order and ceiling in order and order.index(mode) <= order.index(ceiling)


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
        description="Most model calls in one run; reaching it ends the run as 'max_iterations'. "
        "With child runs (sub-agents, a runner's nodes) it bounds their model calls too: the "
        "whole tree stops 'budget_exceeded'.",
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
        "used this many tokens, input and output together (its child runs' calls included).",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="Budget: a run stops (outcome 'budget_exceeded') once its model calls have "
        "cost this much, at the prices in the providers' 'pricing' (its child runs' included).",
    )
    runner: str | dict[str, Any] = Field(
        default="loop",
        description="How the agent runs: 'loop' (the kernel's model/tool loop) or a runner a "
        "plugin registered, by name, or as {name: ..., <its options>}.",
    )
    max_continuations: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Most times per run an interceptor may send the run on with a message "
        "instead of accepting its final answer (before_finish); after that the answer stands.",
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
    context_window: int | None = Field(
        default=None,
        gt=0,
        description="Tokens the model's context window holds (prompt and answer together); "
        "overrides what the provider states (a pool: the smallest of its members').",
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


#: What a toolset namespace may be (``koboi.toolsets`` checks the same).
NAMESPACE_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"


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
    namespaces: dict[str, Annotated[str, StringConstraints(pattern=NAMESPACE_PATTERN)]] = Field(
        default_factory=dict,
        description="A namespace for a toolset, by the toolset's name: its tools are offered "
        "as <namespace>__<tool> (default: the namespace the toolset declares, else its name). "
        "Tells apart two toolsets that would share one.",
    )


class StoreSection(_Section):
    """Where sessions and their journals are kept."""

    url: str | None = Field(
        default=None,
        description=(
            "Store URL; the scheme picks the store plugin (memory://, sqlite:///path, "
            "postgresql+psycopg://...); relative paths are relative to the config's directory. "
            "Unset: KOBOI_STORE, else the default of the installed durable store "
            "(.koboi/koboi.db in the working directory, or beside a config that lies outside "
            "it), else memory://."
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


@dataclass(frozen=True)
class Spelling:
    """A top-level alias a config used (``guardrails``) and what it means in koboi's
    own spelling: ``preferred``, the fragment merged into ``section``."""

    alias: str
    section: str
    preferred: dict[str, Any]


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
    #: ``agent.runner``'s name and its validated options.
    runner_name: str = "loop"
    runner_options: Any = None
    #: The response cache mode this config was validated for (``cache.mode``, or the
    #: override given to :func:`load_config`).
    cache_mode: str = "live"
    #: Aliased sections the config used, each with koboi's preferred spelling.
    spellings: list[Spelling] = field(default_factory=list)

    def section(self, name: str) -> BaseModel | None:
        """The validated model of a plugin-owned section, or None when absent."""
        return self.sections.get(name)

    @property
    def name(self) -> str:
        return self.agent.name


def load_config(
    path: str | os.PathLike[str],
    catalog: Catalog | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cache_mode: str | None = None,
) -> AgentConfig:
    """Read, interpolate and validate a config file. Raises :class:`ConfigError`.

    ``cache_mode`` overrides ``cache.mode`` (and ``KOBOI_CACHE_MODE``), for a caller
    that runs the config with another mode (``koboi run --cache-mode replay``).
    """
    file = Path(path)
    base_dir = file.resolve().parent
    raw = read_with_extends(file)
    if env is None:
        load_env_files(base_dir)
    return validate_config(
        raw, catalog, source=file, base_dir=base_dir, env=env, cache_mode=cache_mode
    )


def validate_config(
    raw: Mapping[str, Any],
    catalog: Catalog | None = None,
    *,
    source: Path | None = None,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    cache_mode: str | None = None,
) -> AgentConfig:
    """Validate an already-read config mapping against the installed plugins."""
    from koboi.config_check import Checker

    if catalog is None:
        from koboi.plugins import default_host

        catalog = default_host().catalog()
    label = str(source) if source else None
    if not isinstance(raw, Mapping):
        raise ConfigError([ConfigProblem("", "the config must be a mapping of sections")], label)
    raw = dict(raw)
    raw.pop("extends", None)
    data, problems = interpolate(raw, os.environ if env is None else env)
    checker = Checker(catalog, problems, os.environ if env is None else env, cache_mode=cache_mode)
    config = checker.check(data)
    if checker.problems or config is None:
        raise ConfigError(checker.problems, label)
    config.source = source
    config.base_dir = base_dir or Path.cwd()
    config.raw = dict(raw)
    config.config_hash = config_hash(raw)
    return config


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
        "x-koboi-options-by-sandbox": sandbox_options,
        "x-koboi-tools": catalog.tools.names(),
        "x-koboi-store-schemes": catalog.stores.names(),
    }


__all__ = [
    "KERNEL_SECTIONS",
    "AgentConfig",
    "AgentSection",
    "CacheSection",
    "Pricing",
    "ProviderSection",
    "SandboxSection",
    "Spelling",
    "StoreSection",
    "ToolsSection",
    "build_store",
    "config_hash",
    "config_schema",
    "deep_merge",
    "load_config",
    "load_env_files",
    "project_dir",
    "read_with_extends",
    "read_yaml",
    "resolve_store",
    "resolve_store_url",
    "store_scheme",
    "validate_config",
]
