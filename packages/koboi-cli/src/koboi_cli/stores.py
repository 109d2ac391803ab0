"""Opening a session store without running an agent (``koboi sessions``, ``koboi show``).

The store is found by the kernel's one rule, :func:`koboi.config.resolve_store`
(docs/config.md, "Finding the store"): the config's ``store.url``, else
``KOBOI_STORE``, else the installed durable store's default, else ``memory://``.
Relative paths are resolved against the config file's directory, or the
working directory when no config is given, exactly as ``koboi run`` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from koboi_cli import host

if TYPE_CHECKING:
    from koboi.store import Store


@dataclass(frozen=True)
class StoreTarget:
    """Which store a command uses and where its relative paths start."""

    url: str
    base_dir: Path

    @property
    def shown_url(self) -> str:
        """The URL without its password, for messages."""
        from koboi_cli.redact import mask_secrets

        return mask_secrets(self.url)

    @property
    def is_memory(self) -> bool:
        from koboi.config import store_scheme

        return store_scheme(self.url) == "memory"


def store_target(config: Path | None) -> StoreTarget:
    """The store of ``config`` (validated), or of the environment when there is none."""
    from koboi.config import load_config, resolve_store

    catalog = host.get_host().catalog()
    loaded = None if config is None else load_config(config, catalog)
    return StoreTarget(*resolve_store(loaded, catalog))


@asynccontextmanager
async def open_store(target: StoreTarget) -> AsyncIterator[Store]:
    """Build the store plugin's store for ``target`` and keep it open for the block."""
    from koboi.config import build_store

    store = build_store(target.url, target.base_dir, host.get_host().catalog())
    async with store:
        yield store
