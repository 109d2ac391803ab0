"""From an agent's config and its store to the :class:`MemoryStore` its runs use."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from koboi.errors import KoboiError
from koboi.logs import get_logger
from koboi_memory.store import MemoryStore, Scope

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.store import KeyedRecords, Store
    from koboi_memory.config import MemorySettings

log = get_logger("koboi.memory")
FEATURE = "long-term memory (memory)"

#: Stores memory opened itself (db_path, url, backend: memory), by URL: kept open for
#: the life of the process, shared by every agent that names the same one.
_OWN_STORES: dict[str, Store] = {}
#: One MemoryStore (and its search indexes) per records store.
_MEMORIES: weakref.WeakKeyDictionary[Any, MemoryStore] = weakref.WeakKeyDictionary()


def settings_of(config: AgentConfig) -> MemorySettings:
    from koboi_memory.config import MemorySettings

    settings = config.section("memory")
    if settings is None:
        # The tools named in tools.builtin work without the section (as koboi-agent's
        # did): the defaults, facts in the agent's own store.
        return MemorySettings()
    if not isinstance(settings, MemorySettings):
        raise KoboiError("this agent's memory section is not koboi-memory's")
    return settings


def own_url(settings: MemorySettings, config: AgentConfig) -> str | None:
    """The URL of memory's own store, or None for the agent's."""
    if settings.url:
        return settings.url
    if settings.db_path:
        return f"sqlite:///{(config.base_dir / settings.db_path).resolve()}"
    if settings.backend == "memory":
        return "memory://"
    return None


async def records_for(
    settings: MemorySettings, config: AgentConfig, store: Store | None, host: PluginHost | None
) -> KeyedRecords:
    from koboi.store import records_of

    url = own_url(settings, config)
    if url is None:
        if store is None:
            raise KoboiError("memory needs the agent's store, and this run has none")
        return records_of(store, FEATURE)
    own = _OWN_STORES.get(url)
    if own is None:
        from koboi.plugins import default_host
        from koboi.store_url import build_store

        own = build_store(url, config.base_dir, (host or default_host()).catalog())
        await own.open()
        _OWN_STORES[url] = own
    return records_of(own, FEATURE)


async def memory_for(
    config: AgentConfig, store: Store | None, host: PluginHost | None
) -> MemoryStore:
    """The memory of an agent whose runs use ``store``."""
    settings = settings_of(config)
    records = await records_for(settings, config, store, host)
    memory = _MEMORIES.get(records)
    if memory is None:
        embedder = None
        if settings.embedder:
            from koboi.plugins import default_host
            from koboi_memory.embedders import embedder_named

            embedder = embedder_named(
                host or default_host(), settings.embedder, settings.embedder_options
            )
        memory = MemoryStore(
            records,
            max_facts=settings.max_facts,
            max_fact_chars=settings.max_fact_chars,
            embedder=embedder,
        )
        _MEMORIES[records] = memory
    return memory


def scope_for(config: AgentConfig, owner: str | None) -> Scope:
    """Whose memory a run uses: its principal's, else the config's ``memory.owner``."""
    return Scope(config.agent.name, owner if owner is not None else settings_of(config).owner)


def core_scope(config: AgentConfig, scope: Scope) -> Scope:
    """The core block's scope: per project too with ``proactive.repo_scoped``."""
    if not settings_of(config).proactive.repo_scoped:
        return scope
    return Scope(f"{scope.agent}@{config.base_dir}", scope.owner)
