"""Which store a command uses (one rule everywhere), and building it from its plugin."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import Catalog
    from koboi.store import Store


def store_hint(scheme: str, catalog: Catalog) -> str:
    """What to do about a store scheme no installed plugin handles."""
    return catalog.hint("store_scheme", scheme) or (
        f"installed store schemes: {', '.join(catalog.stores.names()) or 'none'}"
    )


def store_scheme(url: str) -> str | None:
    """``postgresql+psycopg://...`` -> ``postgresql``; None if ``url`` has no scheme."""
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        scheme, sep, _ = url.partition(":")
        if not sep or not scheme:
            return None
    return scheme.split("+", 1)[0].lower()


def project_dir(config: AgentConfig | None) -> Path:
    """The directory a store URL the config does not write itself is relative to.

    The working directory, when there is no config or the config file lies in it
    or below it (``koboi serve configs/x.yaml`` run from the project uses the
    project's ``.koboi/``, as ``koboi keys create`` run there does); otherwise the
    config's own directory (a config elsewhere never writes into an unrelated
    working directory).
    """
    cwd = Path.cwd().resolve()
    if config is None:
        return cwd
    base = config.base_dir.resolve()
    return cwd if base == cwd or cwd in base.parents else base


def resolve_store(config: AgentConfig | None, catalog: Catalog) -> tuple[str, Path]:
    """Which store a command uses, and the directory its relative paths resolve
    against — one rule everywhere (docs/config.md, "Finding the store").

    1. ``store.url`` of the config, when the config sets it (relative to the
       config's directory);
    2. else the ``KOBOI_STORE`` environment variable;
    3. else the default URL of an installed store plugin that declares one
       (``sqlite:///.koboi/koboi.db`` for the SQL store plugin);
    4. else ``memory://``.

    2 and 3 are relative to :func:`project_dir`: the working directory, unless the
    config lies outside it.
    """
    if config is not None and config.store.url:
        return config.store.url, config.base_dir
    project = project_dir(config)
    from_env = os.environ.get("KOBOI_STORE", "").strip()
    if from_env:
        return from_env, project
    defaults = [e for e in catalog.stores if e.extra.get("default_url")]
    defaults.sort(key=lambda e: (e.plugin == "builtin", e.plugin))
    if defaults:
        return str(defaults[0].extra["default_url"]), project
    return "memory://", project


def resolve_store_url(config: AgentConfig | None, catalog: Catalog) -> str:
    """The URL of :func:`resolve_store` (for messages; build with both parts)."""
    return resolve_store(config, catalog)[0]


def build_store(url: str, base_dir: Path, catalog: Catalog) -> Store:
    """The store the installed plugin for ``url``'s scheme makes (not yet opened)."""
    from koboi.errors import KoboiError
    from koboi.store import Store

    scheme = store_scheme(url) or ""
    entry = catalog.stores.get(scheme)
    if entry is None:
        hint = store_hint(scheme, catalog)
        raise KoboiError(f"no installed store handles '{scheme}://' URLs ({hint})")
    store = entry.target(url, base_dir)
    if not isinstance(store, Store):
        raise KoboiError(f"store plugin {entry.plugin!r} returned {store!r}, not a koboi.Store")
    return store
