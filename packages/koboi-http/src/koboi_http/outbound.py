"""The one place koboi's outbound HTTP clients are made, and where request hooks run.

:func:`client` makes an ``httpx.AsyncClient`` and :func:`instrument` equips
one already made; ``HTTPProvider``, :func:`koboi_http.pinning.pinned_client`
(web_fetch, webhooks) and web_search use them. An instrumented client runs,
for every request, the request hooks (:class:`koboi_http.RequestHook`) of the
plugin host of the run the request is made for — the host of
:func:`koboi.tracing.current_run`; outside a run, the host the client was
made for (``host=``), else the kernel's default host — through httpx's event
hooks.

The hooks are resolved lazily, on a client's first request for a host, and
kept per host (until the host's plugin set changes); a host on which
koboi-http's plugin is not loaded has none. Finding them costs a
context-variable read and a few dictionary look-ups per request.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import httpx

from koboi.errors import RegistrationError
from koboi.logs import get_logger
from koboi.plugins import default_host
from koboi.tracing import current_run
from koboi_http.hooks import OTHER, OutboundRequest, RequestHook
from koboi_http.hookspecs import REGISTER_REQUEST_HOOKS, REQUEST_HOOK_KIND

if TYPE_CHECKING:
    from koboi.interceptors import RunInfo
    from koboi.plugins import PluginHost
    from koboi.registry import Registration, Registry

__all__ = ["ActiveHook", "client", "hook_failures", "hooks_for", "instrument"]

log = get_logger("koboi_http.hooks")

#: The request extension carrying what ``on_response`` needs (the hooks, the start time).
_PENDING = "koboi_http.request_hooks"
#: Marks a client already instrumented (its peer), so hooks are never installed twice.
_PEER_ATTRIBUTE = "_koboi_http_peer"
_MAX_ERROR_TEXT = 200


@dataclass(frozen=True)
class ActiveHook:
    """A request hook as a host's requests run it: its registered name and its plugin."""

    name: str
    plugin: str
    hook: RequestHook


_by_host: WeakKeyDictionary[PluginHost, tuple[Registry[Any], tuple[ActiveHook, ...]]] = (
    WeakKeyDictionary()
)
_failures: Counter[str] = Counter()
_warned: set[tuple[str, str]] = set()


def client(*, peer: str, host: PluginHost | None = None, **options: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient(**options)`` whose requests run the request hooks.

    ``peer`` says whom it talks to (:data:`koboi_http.hooks.PROVIDER`,
    ``SEARCH``, ``FETCH``, ``WEBHOOK``, ``OTHER``, or a name of your own): hooks
    see it, and the built-in trace propagation sends the run's trace only to
    the peers the config trusts (``http.trace_peers``). ``host`` is the plugin
    host whose hooks run for requests made outside a run (default: the
    kernel's default host); during a run, the run's host decides.
    """
    return instrument(httpx.AsyncClient(**options), peer=peer, host=host)


def instrument(
    target: httpx.AsyncClient, *, peer: str = OTHER, host: PluginHost | None = None
) -> httpx.AsyncClient:
    """Install the request hooks on ``target`` (after its own event hooks); return it.

    ``peer`` and ``host`` as for :func:`client`. A client instrumented already
    is returned unchanged.
    """
    if getattr(target, _PEER_ATTRIBUTE, None) is not None:
        return target

    async def on_request(request: httpx.Request) -> None:
        before(request, peer, host)

    async def on_response(response: httpx.Response) -> None:
        after(response)

    hooks = target.event_hooks
    target.event_hooks = {
        "request": [*hooks.get("request", []), on_request],
        "response": [*hooks.get("response", []), on_response],
    }
    setattr(target, _PEER_ATTRIBUTE, peer)
    return target


def before(request: httpx.Request, peer: str, host: PluginHost | None = None) -> None:
    """Run every hook's ``on_request`` for ``request`` (httpx's request event)."""
    run = current_run()
    hooks = hooks_for(run, host)
    if not hooks:
        return
    outbound = OutboundRequest(request, peer, run)
    for active in hooks:
        try:
            active.hook.on_request(outbound)
        except Exception as exc:  # a hook never breaks the request
            _failed(active, "on_request", outbound, exc)
    # A copy: the dict given to build_request may be shared by several requests.
    request.extensions = {**request.extensions, _PENDING: (outbound, hooks, time.perf_counter())}


def after(response: httpx.Response) -> None:
    """Run every hook's ``on_response`` (httpx's response event, at the response's head)."""
    pending = response.request.extensions.get(_PENDING)
    if pending is None:
        return
    outbound, hooks, started = pending
    seconds = time.perf_counter() - started
    for active in hooks:
        try:
            active.hook.on_response(outbound, response, seconds)
        except Exception as exc:  # a hook never breaks the request
            _failed(active, "on_response", outbound, exc)


def hooks_for(
    run: RunInfo | None = None, outside: PluginHost | None = None
) -> tuple[ActiveHook, ...]:
    """The request hooks of ``run``'s plugin host, in order; without a run (or a run
    without a host), those of ``outside``, else of the kernel's default host.

    Collected once per host (again only when the host's plugins change). Empty
    when koboi-http's plugin is not loaded on the host. Under
    ``KOBOI_STRICT_PLUGINS=1`` a plugin whose registration fails raises
    :class:`koboi.errors.PluginError` here, as every collection of the hook does.
    """
    if run is not None and run.host is not None:
        host = run.host
    else:
        host = outside if outside is not None else default_host()
    owner = host.hook_owner(REGISTER_REQUEST_HOOKS)
    if owner is None:
        return ()
    registry = host.collect(REGISTER_REQUEST_HOOKS, kind=REQUEST_HOOK_KIND, validate=_validate)
    cached = _by_host.get(host)
    if cached is not None and cached[0] is registry:
        return cached[1]
    entries = [e for e in registry if e.plugin != owner] + [
        e for e in registry if e.plugin == owner
    ]
    hooks = tuple(ActiveHook(e.name, e.plugin, e.target) for e in entries)
    _by_host[host] = (registry, hooks)
    return hooks


def hook_failures() -> dict[str, int]:
    """How many times each request hook (by registered name) raised, in this process."""
    return dict(_failures)


def _validate(entry: Registration[Any]) -> None:
    hook = entry.target
    if not isinstance(hook, RequestHook):
        raise RegistrationError(
            f"{REQUEST_HOOK_KIND} {entry.name!r} of plugin {entry.plugin!r} is {hook!r}, "
            "not a koboi_http.RequestHook"
        )
    for method in ("on_request", "on_response"):
        if inspect.iscoroutinefunction(getattr(hook, method)):
            raise RegistrationError(
                f"{REQUEST_HOOK_KIND} {entry.name!r} of plugin {entry.plugin!r}: {method} is "
                "async; request hooks are sync (they run on the event loop for every request)"
            )


def _failed(active: ActiveHook, method: str, request: OutboundRequest, exc: Exception) -> None:
    _failures[active.name] += 1
    text = " ".join(str(exc).split())
    if len(text) > _MAX_ERROR_TEXT:
        text = text[:_MAX_ERROR_TEXT] + "..."
    # Method and host only: a URL's path or query may hold a token.
    first = (active.name, method) not in _warned
    _warned.add((active.name, method))
    log.log(
        logging.WARNING if first else logging.DEBUG,
        "request hook %r of plugin %r failed in %s for %s %s (%s%s); the request went on "
        "without it%s",
        active.name,
        active.plugin,
        method,
        request.method,
        request.host,
        type(exc).__name__,
        f": {text}" if text else "",
        " (later failures of this hook are logged at debug level)" if first else "",
    )
