"""koboi hooks of koboi-http (plugin id ``http``).

It defines the hook ``koboi_http_register_request_hooks`` (:mod:`koboi_http.hookspecs`),
owns the ``http:`` config section (:mod:`koboi_http.settings`) and registers its own
request hook, W3C trace propagation (:mod:`koboi_http.trace`). Imports nothing heavy:
the section's model and the hook are imported when asked for, and httpx never here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterHookspecs
    from koboi_http.hookspecs import RegisterRequestHook


@hookimpl
def koboi_register_hookspecs(register: RegisterHookspecs) -> None:
    from koboi_http import hookspecs

    register(hookspecs)


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_http.settings import SECTION, HTTPSettings

    register(
        SECTION,
        HTTPSettings,
        description="Outbound HTTP: which peers receive the run's W3C trace context.",
    )


@hookimpl
def koboi_http_register_request_hooks(register: RegisterRequestHook) -> None:
    from koboi_http.trace import TRACE_HOOK, TracePropagation

    register(
        TRACE_HOOK,
        TracePropagation(),
        description="Sends the run's traceparent/tracestate to model providers and the "
        "peers http.trace_peers and http.trace_hosts name.",
    )
