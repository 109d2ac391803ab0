"""The hook koboi-http defines for other plugins: request hooks.

koboi-http (plugin id ``http``) publishes it through the kernel's
``koboi_register_hookspecs`` (see :mod:`koboi_http.plugin`), so it lives in its
namespace, ``koboi_http_...``. A plugin implements it like any kernel hook,
with ``from koboi import hookimpl``; when koboi-http's plugin is not loaded
(``KOBOI_DISABLE_PLUGINS=http``, or a host without it) the implementation is
never called, no request hook runs, and every request is sent as it would be
without hooks (``koboi plugins inspect`` lists the hook as waiting for its
owner).

This module imports nothing but the hook marker: the kernel imports it while
loading plugins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from koboi.hookspecs import hookspec

if TYPE_CHECKING:
    from koboi_http.hooks import RequestHook

#: The hook a plugin implements to add request hooks.
REGISTER_REQUEST_HOOKS = "koboi_http_register_request_hooks"
#: What the registered things are called in errors and listings.
REQUEST_HOOK_KIND = "request hook"


class RegisterRequestHook(Protocol):
    """``register(name, hook, *, description="")`` of
    :func:`koboi_http_register_request_hooks`; ``hook`` is a
    :class:`koboi_http.RequestHook` instance."""

    def __call__(
        self, name: str, hook: RequestHook, *, description: str = "", **extra: Any
    ) -> None: ...


@hookspec
def koboi_http_register_request_hooks(register: RegisterRequestHook) -> None:
    """Add request hooks: code that sees every outbound HTTP request koboi makes.

    A *request hook* is a :class:`koboi_http.RequestHook` (import it from
    ``koboi_http.hooks``, which loads neither httpx nor anything heavy). Every
    client koboi-http builds calls it for each request it sends: the model
    providers (``HTTPProvider``: openai, anthropic, cloudflare and third-party
    ones), ``web_fetch`` and ``web_search`` (koboi-tools-web), the server's
    webhook deliveries (:func:`koboi_http.pinning.pinned_client`) and anything
    made with :func:`koboi_http.client`. Its two methods, both optional:

    - ``on_request(request)``, just before the request is sent: it may add or
      change headers (``request.headers["x-tenant"] = ...``), never the URL or
      the body. ``request`` is a :class:`koboi_http.hooks.OutboundRequest`:
      the ``httpx.Request``, the ``peer`` (``"provider"``, ``"search"``,
      ``"fetch"``, ``"webhook"``, ``"other"``), the ``host``, and the ``run``
      and its ``trace`` when the request is made during a run (None outside);
    - ``on_response(request, response, seconds)``, when the response's status
      and headers have arrived: it observes (status, headers, ``seconds`` since
      sending); the body may still be streaming and must not be read. Not
      called for a request that got no response.

    Both are sync and must be cheap: they run on the event loop for every
    request (a provider's retry is a new request). Neither can break a request:
    an exception is logged (``koboi_http.hooks`` logger: a warning the first
    time a hook fails in each method, then at debug level; the request's method
    and host, never its path or query) and counted
    (:func:`koboi_http.outbound.hook_failures`), and the request goes on
    without that hook.

    :param register: ``register(name, hook, *, description="")``, once per
        hook. ``name`` labels it in logs, counts and ``koboi plugins inspect``;
        it must be unique among every installed plugin's request hooks (a name
        registered by two plugins is an error naming both). ``hook`` is a
        ``RequestHook`` instance whose methods are plain (not ``async``)
        functions; anything else is a registration error. ``description`` is
        one line saying what the hook does.

    Order: hooks run in the plugin host's order (the built-in plugin, then by
    entry-point id), a plugin's own in the order it registered them, and
    ``on_response`` in the same order as ``on_request``. koboi-http's own hook
    (``trace_propagation``, which adds the run's ``traceparent``) runs after
    every other, so a hook that sets ``traceparent`` itself (a tracing plugin
    with spans of its own) is never overwritten.

    Collected once per plugin host (again only if its plugins change), lazily,
    the first time a client sends a request for a run of that host (outside a
    run: the host the client was made for, else the kernel's default host) —
    never while the CLI starts, so import what the hook needs
    inside the implementation, not at the top of ``plugin.py``. An
    implementation that raises, or registers something that is not a
    ``RequestHook``, is isolated: its plugin is marked failed with the reason
    (``koboi plugins list`` shows it) and its hooks are not used; under
    ``KOBOI_STRICT_PLUGINS=1`` that is an error, raised by the request that
    collected the hooks. Sync only.
    """
