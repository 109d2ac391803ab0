"""Rendering: the Jinja2 templates and static files shipped in the package, and the
headers every console response carries (a strict content-security policy).

The policy allows scripts, styles, images and connections from the server itself
only, and nothing inline: the pages hold no ``<script>`` body, no ``style=``
attribute, no event handler attribute; the live view is ``static/console.js``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.responses import Response

#: No inline script or style, nothing from another origin, no framing, forms post here only.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
#: The static files, by name, and their media types (nothing else is served).
STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}


def secured(response: Response, *, cache_seconds: int = 0) -> Response:
    """``response`` with the console's security headers (and no caching of pages)."""
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    response.headers["Cache-Control"] = (
        f"private, max-age={cache_seconds}" if cache_seconds else "no-store"
    )
    return response


def _when(value: float | None) -> str:
    if not value:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(value)))


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("koboi_console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["pretty"] = _pretty
    return env


def render(name: str, context: Mapping[str, Any], *, status: int = 200) -> Response:
    """The page ``name`` (a template of the package), with the security headers."""
    html = environment().get_template(name).render(**context)
    return secured(Response(html, status_code=status, media_type="text/html; charset=utf-8"))


@cache
def static_file(name: str) -> bytes | None:
    """A file of the package's ``static`` folder, or None when it is not one of them."""
    if name not in STATIC:
        return None
    return (resources.files("koboi_console") / "static" / name).read_bytes()
