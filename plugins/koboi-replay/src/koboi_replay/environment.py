"""What a bundle records of its environment (koboi, Python, every plugin, the model's cache
identity) and how a replay compares it."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost


def plugin_uses(host: PluginHost, config: AgentConfig | None) -> dict[str, list[str]]:
    """For each plugin id: what ``config`` uses of it (``provider scripted``, ``tool calculator``)."""
    uses: dict[str, list[str]] = {}
    if config is None:
        return uses
    catalog = host.catalog()

    def note(registry: Any, name: str | None, label: str) -> None:
        entry = registry.get(name) if name else None
        if entry is not None:
            uses.setdefault(entry.plugin, []).append(f"{label} {name}")

    sections = [config.llm, *config.providers.values()]
    for section in sections:
        note(catalog.providers, section.provider, "provider")
    for tool in config.tools.builtin:
        note(catalog.tools, tool, "tool")
    note(catalog.sandboxes, config.sandbox.backend, "sandbox")
    for name in config.sections:
        note(catalog.sections, name, "section")
    for info, _ in host.loaded():
        if "koboi_register_interceptors" in info.hooks:
            uses.setdefault(info.id, []).append("interceptors")
    return {plugin: sorted(set(found)) for plugin, found in uses.items()}


def describe(host: PluginHost, config: AgentConfig | None) -> dict[str, Any]:
    """The ``versions`` block of a manifest."""
    from koboi import __version__ as core_version

    uses = plugin_uses(host, config)
    return {
        "koboi-core": core_version,
        "python": platform.python_version(),
        "plugins": [
            {
                "id": info.id,
                "dist": info.dist,
                "version": info.version,
                "uses": uses.get(info.id, []),
            }
            for info, _ in host.loaded()
        ],
    }


def differences(recorded: Mapping[str, Any], host: PluginHost) -> list[str]:
    """What differs between the versions a bundle recorded and this installation.

    Only what can change behaviour is listed: koboi-core, and the plugins the
    config used (a plugin the config never touched does not matter).
    """
    from koboi import __version__ as core_version

    notes: list[str] = []
    if recorded.get("koboi-core") and recorded["koboi-core"] != core_version:
        notes.append(f"recorded with koboi-core {recorded['koboi-core']}, this is {core_version}")
    installed = {info.id: info for info, _ in host.loaded()}
    for plugin in recorded.get("plugins") or []:
        if not isinstance(plugin, Mapping) or not plugin.get("uses"):
            continue
        current = installed.get(str(plugin.get("id")))
        label = f"{plugin.get('dist')} (plugin {plugin.get('id')})"
        if current is None:
            notes.append(f"recorded with {label} {plugin.get('version')}, not installed here")
        elif current.version != plugin.get("version"):
            notes.append(
                f"recorded with {label} {plugin.get('version')}, this is {current.version}"
            )
    return notes


async def model_identity(
    config: AgentConfig, host: PluginHost
) -> tuple[dict[str, Any] | None, str]:
    """The cache identity of the provider ``config`` builds, and a note when there is none.

    The kernel hashes it into the request keys it journals (``side_call_started.key``,
    a rewritten request's ``key``); a replay's provider reports it, so those keys come
    out as recorded. The provider is built (never called) and closed again. An
    identity that would carry a credential (the contract forbids it, a plugin may
    still) is not kept: secrets never enter a bundle.
    """
    from koboi.errors import describe_error
    from koboi.models import build_model
    from koboi_replay.config_text import remove_secrets

    try:
        provider = build_model(config, host.catalog(), None, mode="live")
    except Exception as exc:  # capture goes on without the identity, and says why
        return (
            None,
            f"the model could not be built here to take its identity ({describe_error(exc)})",
        )
    try:
        identity = provider.cache_identity()
    finally:
        await provider.aclose()
    if remove_secrets({"identity": identity}).redactions:
        return None, "the model's cache identity looks like it holds a credential; it is left out"
    return identity, ""


async def model_window(config: AgentConfig, host: PluginHost) -> int | None:
    """The context window the provider ``config`` builds states (None when it states
    none or cannot be built here): a replay's model states it as the recorded one did,
    so a plugin that fits requests to the window (a context strategy) decides the same."""
    from koboi.models import build_model

    try:
        provider = build_model(config, host.catalog(), None, mode="live")
    except Exception:  # no window to state: the config's own, if it has one, still applies
        return None
    try:
        return provider.context_window()
    finally:
        await provider.aclose()
