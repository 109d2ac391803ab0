"""What plugins register, and who registered it.

Each collector hook receives a ``register`` callable bound to the plugin being
asked, so every entry records its owner, and a second registration of the same
name fails with both owners named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from koboi.errors import RegistrationError

if TYPE_CHECKING:
    from pydantic import BaseModel

T = TypeVar("T")


@dataclass(frozen=True)
class Registration(Generic[T]):
    """One registered thing: its name, the object or factory, its owner plugin."""

    kind: str
    name: str
    target: T
    plugin: str
    options: type[BaseModel] | None = None
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """Registrations of one kind (providers, tools...), keyed by exact name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Registration[T]] = {}

    def add(self, entry: Registration[T]) -> None:
        existing = self._entries.get(entry.name)
        if existing is not None:
            raise RegistrationError(
                f"{self.kind} {entry.name!r} is registered by two plugins: "
                f"{existing.plugin!r} and {entry.plugin!r}; disable one of them "
                "(KOBOI_DISABLE_PLUGINS)"
            )
        self._entries[entry.name] = entry

    def get(self, name: str) -> Registration[T] | None:
        return self._entries.get(name)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def drop_plugin(self, plugin: str) -> None:
        """Forget every entry of ``plugin`` (a plugin that failed after registering)."""
        for name in [n for n, e in self._entries.items() if e.plugin == plugin]:
            del self._entries[name]

    def by_plugin(self, plugin: str) -> list[Registration[T]]:
        return [e for e in self._entries.values() if e.plugin == plugin]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Registration[T]]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)


# Factory signatures, for the docs and type checkers.
ProviderFactory = Callable[..., Any]
SandboxFactory = Callable[..., Any]
StoreFactory = Callable[..., Any]
ToolFactory = Callable[..., Any]
