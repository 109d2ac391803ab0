"""``koboi plugins list`` / ``inspect`` and ``koboi --version``.

These always use a tolerant host (a broken plugin is listed with its reason,
whatever ``KOBOI_STRICT_PLUGINS`` says): they are how a user finds out what is
broken, so they must never fail because something is.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
from typing import TYPE_CHECKING, Any

from koboi_cli import __version__, host
from koboi_cli.errors import CliError
from koboi_cli.style import Style, table, write

if TYPE_CHECKING:
    from koboi.plugins import PluginHost, PluginInfo
    from koboi.registry import Registration


def tolerant_host(*, register: bool = True, plugin_hooks: bool = False) -> PluginHost:
    """A loaded host; with ``register`` its catalog is collected too, so plugins whose
    registration hooks fail show as failed (this builds every plugin's models); with
    ``plugin_hooks`` every hook a plugin defines is collected as well."""
    plugin_host = host.get_host(tolerant=True)
    if register:
        plugin_host.catalog()
    if plugin_hooks:
        from koboi.errors import PluginError
        from koboi.plugins import registered_hooks

        for hook, owner in registered_hooks(plugin_host).items():
            if owner == "builtin":
                continue
            # A hook that is not a collector, or a failure already shown on its plugin.
            with contextlib.suppress(PluginError):
                plugin_host.collect(hook)
    return plugin_host


def info_json(info: PluginInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "dist": info.dist,
        "version": info.version,
        "builtin": info.builtin,
        "status": info.status,
        "reason": info.reason,
        "defines": list(info.defines),
        "implements": list(info.hooks),
        "waiting": list(info.waiting),
    }


def list_plugins(*, as_json: bool, check: bool = False) -> None:
    """Every plugin and its status. Registration always runs (a plugin whose registration
    fails is listed as failed, not as loaded); ``check`` also collects the hooks plugins
    define for each other."""
    plugins = tolerant_host(register=True, plugin_hooks=check).plugins
    if as_json:
        write(sys.stdout, json.dumps([info_json(p) for p in plugins], indent=2) + "\n")
        return
    style = Style(sys.stdout)
    rows = [
        [
            p.id,
            f"{p.dist} (built-in)" if p.builtin else p.dist,
            p.version,
            p.status,
            p.reason or "-",
        ]
        for p in plugins
    ]
    header = ["ID", "DISTRIBUTION", "VERSION", "STATUS", "REASON"]
    write(sys.stdout, table(header, rows, style, {3: style.status}))


def _entry(entry: Registration[Any], **extra: Any) -> dict[str, Any]:
    return {"name": entry.name, "description": entry.description, **extra}


def _tool_details(target: Any) -> dict[str, Any]:
    from koboi.tools import Tool

    if isinstance(target, Tool):
        return {"risk": target.risk.value, "idempotent": target.idempotent, "factory": False}
    # Built per agent by a factory: risk and idempotency are known only once it is called.
    return {"risk": None, "idempotent": None, "factory": True}


def registrations(plugin_host: PluginHost, plugin_id: str) -> dict[str, list[dict[str, Any]]]:
    """What one plugin registered, by kind, as JSON-able data: the kernel's kinds, then
    what it registered through other plugins' hooks, under each hook's name."""
    return {
        **_kernel_registrations(plugin_host, plugin_id),
        **_hook_registrations(plugin_host, plugin_id),
    }


def _hook_registrations(plugin_host: PluginHost, plugin_id: str) -> dict[str, list[dict[str, Any]]]:
    from koboi.errors import PluginError

    info = plugin_host.get(plugin_id)
    found: dict[str, list[dict[str, Any]]] = {}
    for hook in info.hooks if info is not None else ():
        owner = plugin_host.hook_owner(hook)
        if owner is None or owner == "builtin":
            continue
        try:
            entries = plugin_host.collect(hook).by_plugin(plugin_id)
        except PluginError:  # not a collector hook, or its failure is the plugin's reason
            continue
        found[hook] = [_entry(e, target=target_name(e.target)) for e in entries]
    return found


def target_name(target: Any) -> str:
    """What a registration's target is, for a person: a value as written (``18.0``), a
    class or function by its import path, an object by its class
    (``koboi_http.trace.TracePropagation instance``) unless it says more itself."""
    if isinstance(target, type) or inspect.isroutine(target):
        module = getattr(target, "__module__", None)
        name = getattr(target, "__qualname__", None) or getattr(target, "__name__", "?")
        return f"{module}.{name}" if module else str(name)
    kind = type(target)
    if "__repr__" not in _defined_on(kind):  # <... object at 0x...>: says nothing to a reader
        return f"{kind.__module__}.{kind.__qualname__} instance"
    return repr(target)


def _defined_on(kind: type) -> set[str]:
    """The names the classes of ``kind``'s method resolution order define, ``object`` aside."""
    return {name for cls in kind.__mro__ if cls is not object for name in vars(cls)}


def _kernel_registrations(
    plugin_host: PluginHost, plugin_id: str
) -> dict[str, list[dict[str, Any]]]:
    catalog = plugin_host.catalog()
    return {
        "sections": [
            _entry(e, schema=e.target.model_json_schema())
            for e in catalog.sections.by_plugin(plugin_id)
        ],
        "providers": [
            _entry(e, options=e.options.model_json_schema() if e.options else None)
            for e in catalog.providers.by_plugin(plugin_id)
        ],
        "tools": [_entry(e, **_tool_details(e.target)) for e in catalog.tools.by_plugin(plugin_id)],
        "toolsets": [_entry(e) for e in catalog.toolsets.by_plugin(plugin_id)],
        "runners": [
            _entry(e, options=e.options.model_json_schema() if e.options else None)
            for e in catalog.runners.by_plugin(plugin_id)
        ],
        "sandboxes": [
            _entry(e, options=e.options.model_json_schema() if e.options else None)
            for e in catalog.sandboxes.by_plugin(plugin_id)
        ],
        "stores": [_entry(e) for e in catalog.stores.by_plugin(plugin_id)],
        "commands": [_entry(e, target=e.target) for e in catalog.commands.by_plugin(plugin_id)],
        "run_sources": [
            _entry(e, target=e.target, suffixes=list(e.extra.get("suffixes", ())))
            for e in catalog.run_sources.by_plugin(plugin_id)
        ],
        "event_summaries": [
            _entry(e, target=e.target) for e in catalog.event_summaries.by_plugin(plugin_id)
        ],
        "hints": [
            {"name": e.name, "distribution": e.target, **{k: v for k, v in e.extra.items() if v}}
            for e in catalog.hints.entries.by_plugin(plugin_id)
        ],
    }


def inspect_plugin(plugin_id: str, *, as_json: bool) -> None:
    plugin_host = tolerant_host(plugin_hooks=True)
    info = plugin_host.get(plugin_id)
    if info is None:
        known = ", ".join(p.id for p in plugin_host.plugins) or "none"
        raise CliError(f"unknown plugin {plugin_id!r}; known plugins: {known}")
    registered = registrations(plugin_host, plugin_id)
    details = {
        **info_json(info),
        "module": info.module,
        "requires_core": info.requires_core,
        "hooks": list(info.hooks),
        "hook_owners": {hook: plugin_host.hook_owner(hook) for hook in info.hooks},
        "load_seconds": round(info.load_seconds, 6),
        "registered": registered,
    }
    if as_json:
        write(sys.stdout, json.dumps(details, indent=2) + "\n")
        return
    write(sys.stdout, render_inspection(info, registered, Style(sys.stdout)))


def render_inspection(
    info: PluginInfo, registered: dict[str, list[dict[str, Any]]], style: Style
) -> str:
    lines = [
        f"{style.bold(info.id)}{' (built-in)' if info.builtin else ''}",
        f"  status:        {style.status(info.status)}",
    ]
    if info.reason:
        lines.append(f"  reason:        {info.reason}")
    lines += [
        f"  distribution:  {info.dist} {info.version}",
        f"  module:        {info.module}",
        f"  koboi-core:    {info.requires_core or 'any (not declared)'}",
        f"  implements:    {', '.join(_implemented(info)) or 'none'}",
        f"  defines:       {', '.join(info.defines) or 'none'}",
    ]
    if info.waiting:
        lines.append(
            f"  waiting:       {', '.join(info.waiting)} (their owner is not installed: "
            "never called)"
        )
    lines.append(f"  load time:     {info.load_seconds * 1000:.1f} ms")
    if not any(registered.values()):
        lines.append("  registered:    nothing")
    for kind, entries in registered.items():
        if not entries:
            continue
        lines.append(f"  {kind}:")
        for entry in entries:
            lines.append(f"    {style.bold(entry['name'])}{_suffix(kind, entry)}")
    return "\n".join(lines) + "\n"


def _implemented(info: PluginInfo) -> list[str]:
    return [h for h in info.hooks if h not in info.waiting]


def _suffix(kind: str, entry: dict[str, Any]) -> str:
    parts: list[str] = []
    if kind == "tools":
        if entry["factory"]:
            parts.append("built per agent")
        else:
            parts.append(f"risk {entry['risk']}")
            parts.append("idempotent" if entry["idempotent"] else "not idempotent")
    if kind in ("commands", "event_summaries") or kind.startswith("koboi_"):
        parts.append(entry["target"])
    if kind == "run_sources":
        parts.append(", ".join(entry["suffixes"]))
        parts.append(entry["target"])
    if kind == "hints":
        parts.append(entry["distribution"])
        if entry.get("moved_to"):
            parts.append(f"moved to {entry['moved_to']}")
    text = f" [{', '.join(parts)}]" if parts else ""
    description = " ".join(str(entry.get("description") or "").split())
    if description:
        cut = description if len(description) <= 90 else description[:89].rstrip() + "…"
        text += f" - {cut}"
    return text


def version_text() -> str:
    """The kernel's, the CLI's and every installed plugin's version, from package
    metadata alone: no plugin is imported (``koboi plugins list`` loads them)."""
    from koboi import __version__ as core_version
    from koboi.plugins import BUILTIN_ID, KERNEL_DIST, PluginHost

    lines = [f"koboi-core {core_version}", f"koboi-cli {__version__}"]
    try:
        found = PluginHost(builtins=False, strict=False).discover()
    except Exception as exc:  # --version must answer even if plugin discovery breaks
        lines.append(f"plugins: unavailable ({type(exc).__name__}: {exc})")
        return "\n".join(lines) + "\n"
    rows = [[BUILTIN_ID, KERNEL_DIST, core_version, "built-in"]]
    rows += [
        [p.id, p.dist, p.version, "installed" if p.status == "not-loaded" else p.status]
        for p in found
    ]
    plain = Style(sys.stdout, color=False)
    listing = table(["PLUGIN", "DISTRIBUTION", "VERSION", "STATUS"], rows, plain)
    return "\n".join(lines) + "\n" + listing
