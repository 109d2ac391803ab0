"""Checks other plugins provide, used by name: ``plugin_check("name", ...)``.

A plugin provides checks by implementing koboi-eval's hook
``koboi_eval_register_checks`` (:mod:`koboi_eval.hookspecs`). koboi-eval collects
it from the plugin host (:meth:`koboi.plugins.PluginHost.collect`) the first time
an eval file asks for a check by name, so check providers are plugins like any
other: ``koboi plugins`` lists them, one that fails is isolated with its reason
(an error under ``KOBOI_STRICT_PLUGINS=1``), and a name two plugins register is
refused, naming both.

A check nobody provides is an error when the eval file loads, naming the check
and those that are installed: a check nobody can perform must not be counted as
passed, nor quietly skipped.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from koboi_eval.checks import Check
from koboi_eval.errors import EvalDefinitionError
from koboi_eval.hookspecs import CHECK_KIND, REGISTER_CHECKS

if TYPE_CHECKING:
    from koboi.plugins import PluginHost
    from koboi.registry import Registration, Registry

#: The plugin that defines the hook (its namespace, ``koboi_eval_``, is this id's).
EVAL_PLUGIN = "eval"
#: The check reserved for a retrieval (RAG) plugin.
RETRIEVED_CHUNK = "retrieved_chunk"

CheckFactory = Callable[..., Check]


class CheckNotProvided(EvalDefinitionError):
    """No plugin of the host provides the check asked for by name."""


def installed_checks(host: PluginHost | None = None) -> Registry[CheckFactory]:
    """The checks the plugins of ``host`` (default: the CLI's, or the kernel's default
    host) provide, by name, each with the plugin that registered it."""
    from koboi.errors import PluginError

    if host is None:
        from koboi_eval.assembly import plugin_host

        host = plugin_host()
    if host.hook_owner(REGISTER_CHECKS) is None:
        raise EvalDefinitionError(_no_collector(host))
    try:
        return host.collect(REGISTER_CHECKS, kind=CHECK_KIND)
    except PluginError as exc:  # strict mode: a provider failed, and that is an error
        raise EvalDefinitionError(f"checks from plugins are unavailable: {exc}") from exc


def provided_check(name: str, host: PluginHost | None = None) -> Registration[CheckFactory]:
    """The registration of the check ``name``; :class:`CheckNotProvided` when no plugin
    of ``host`` provides it (the message names the installed ones)."""
    if host is None:
        from koboi_eval.assembly import plugin_host

        host = plugin_host()
    try:
        checks = installed_checks(host)
    except EvalDefinitionError as exc:
        raise EvalDefinitionError(f"{name}(): {exc}") from exc
    entry = checks.get(name)
    if entry is None:
        raise CheckNotProvided(_not_provided(name, checks, host))
    return entry


def plugin_check(name: str, *args: Any, **kwargs: Any) -> Check:
    """The check a plugin provides under ``name``, made with ``args`` and ``kwargs``.

    Plugins provide checks with the hook ``koboi_eval_register_checks`` (see
    :mod:`koboi_eval.hookspecs`). An error when no installed plugin provides it.
    """
    if not isinstance(name, str) or not name:
        raise EvalDefinitionError("plugin_check(): give the name of the check first")
    entry = provided_check(name)
    factory = entry.target
    if not callable(factory):
        raise EvalDefinitionError(
            f"{CHECK_KIND} {name!r} of plugin {entry.plugin!r} is {factory!r}, not a function "
            "that makes a Check"
        )
    made = factory(*args, **kwargs)
    if not isinstance(made, Check):
        raise EvalDefinitionError(
            f"the factory of {CHECK_KIND} {name!r} (plugin {entry.plugin!r}) returned "
            f"{made!r}, not a Check"
        )
    return made


def retrieved_chunk(*args: Any, **kwargs: Any) -> Check:
    """A retriever returned a given chunk for the case's input.

    A retrieval plugin provides the check under the name ``retrieved_chunk`` (hook
    ``koboi_eval_register_checks``) and journals what it retrieved (its own events,
    ``trace.plugin_events(...)``) so the check can read it: koboi-rag does. Without
    one installed, using it is an error that says so.
    """
    try:
        provided_check(RETRIEVED_CHUNK)
    except CheckNotProvided as exc:
        raise CheckNotProvided(
            f"{exc}; no retrieval (RAG) plugin is installed, so nothing can check what "
            "was retrieved: remove retrieved_chunk() or install koboi-rag"
        ) from None
    return plugin_check(RETRIEVED_CHUNK, *args, **kwargs)


def _no_collector(host: PluginHost) -> str:
    info = host.get(EVAL_PLUGIN)
    where = "checks from plugins need koboi-eval's plugin (id 'eval'), which collects them"
    if info is None:
        return f"{where}, and this plugin host has none: add koboi_eval.plugin to it"
    state = f"{info.status}: {info.reason}" if info.reason else info.status
    return f"{where}, and it is {state}"


def _not_provided(name: str, checks: Registry[CheckFactory], host: PluginHost) -> str:
    shown = ", ".join(f"{e.name} (plugin {e.plugin!r})" for e in sorted(checks, key=_by_name))
    message = (
        f"{name}(): no installed plugin provides the {CHECK_KIND} {name!r} (plugins provide "
        f"checks with the hook {REGISTER_CHECKS}); installed {CHECK_KIND}s: {shown or 'none'}"
    )
    close = difflib.get_close_matches(name, checks.names(), n=1)
    if close:
        message += f"; did you mean {close[0]!r}?"
    broken = [p for p in host.plugins if REGISTER_CHECKS in p.hooks and p.status != "loaded"]
    for info in broken:
        message += f"; plugin {info.id!r} would provide checks but is {info.status}: {info.reason}"
    return message


def _by_name(entry: Registration[CheckFactory]) -> str:
    return entry.name
