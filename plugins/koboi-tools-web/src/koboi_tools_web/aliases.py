"""koboi-agent's top-level ``websearch`` section, as a fragment of ``tools_web``
(registered as its alias).

Keys with no counterpart are a ``ValueError`` naming the key and what to write
instead, never silently dropped. Pydantic-free: a config is converted before
anything is validated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: koboi-agent's search providers -> koboi's web_search backends. ``mock`` answered
#: without the network, as koboi's ``offline`` backend does.
_BACKENDS = {"mock": "offline", "ddg": "duckduckgo", "brave": "brave", "firecrawl": "firecrawl"}
#: Keys of a provider's own block (``search.brave: {...}``) that koboi's backend takes.
_PROVIDER_KEYS = ("api_key", "base_url", "timeout")
#: ``fetch`` keys spelled the same in ``tools_web``.
_FETCH_KEYS = ("timeout", "max_chars", "user_agent")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be a mapping")
    return value


def _refuse(where: str, instead: str) -> ValueError:
    return ValueError(f"{where}: has no counterpart in koboi; {instead}")


def _search(value: Any) -> dict[str, Any]:
    section = _mapping(value, "websearch.search")
    provider = section.get("provider", "mock")
    backend = _BACKENDS.get(str(provider))
    if backend is None:
        raise _refuse(
            f"websearch.search.provider {provider!r}",
            f"write tools_web.search.backend ({', '.join(sorted(set(_BACKENDS.values())))})",
        )
    search: dict[str, Any] = {"backend": backend}
    for key, item in section.items():
        where = f"websearch.search.{key}"
        if key == "provider":
            continue
        if key == "max_results":
            search["max_results"] = item
        elif key == provider:  # the chosen provider's own block
            for name, setting in _mapping(item, where).items():
                if name not in _PROVIDER_KEYS:
                    raise _refuse(f"{where}.{name}", "see tools_web.search in koboi config schema")
                search[name] = setting
        elif key in _BACKENDS:
            raise _refuse(where, f"settings of a provider other than {provider!r} are unused")
        else:
            raise _refuse(where, "see tools_web.search in koboi config schema")
    return search


def _fetch(value: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, item in _mapping(value, "websearch.fetch").items():
        where = f"websearch.fetch.{key}"
        if key == "provider":
            if item != "httpx":
                raise _refuse(
                    f"{where} {item!r}", "koboi's web_fetch reads pages itself (write httpx)"
                )
        elif key in _FETCH_KEYS:
            found[key] = item
        else:
            raise _refuse(where, "see tools_web in koboi config schema")
    return found


def websearch(value: Any) -> dict[str, Any]:
    """koboi-agent's ``websearch`` section (``search``, ``fetch``) as a fragment of
    ``tools_web``."""
    fragment: dict[str, Any] = {}
    for key, item in _mapping(value, "websearch").items():
        if key == "search":
            fragment["search"] = _search(item)
        elif key == "fetch":
            fragment.update(_fetch(item))
        elif key == "custom_modules":
            raise _refuse(
                "websearch.custom_modules",
                "a search backend is code: register its tool from a koboi plugin",
            )
        else:
            raise _refuse(f"websearch.{key}", "see tools_web in koboi config schema")
    return fragment
