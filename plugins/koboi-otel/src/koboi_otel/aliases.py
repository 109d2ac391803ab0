"""koboi-agent's top-level ``tracing`` section, as a fragment of ``telemetry``
(registered as its alias).

koboi-agent sent its traces to Langfuse with Langfuse's own client; Langfuse also
ingests OpenTelemetry (OTLP over HTTP, traces only) at ``<base_url>/api/public/otel``
with HTTP Basic auth of ``public_key:secret_key``, so the same settings become an
OTLP exporter of koboi-otel. The credentials end up only in
``telemetry.headers`` (secrets: never shown or logged). Pydantic-free: a config is
converted before anything is validated.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

#: koboi-agent's default ``tracing.base_url`` (a local Langfuse).
DEFAULT_BASE_URL = "http://localhost:3300"
#: Where Langfuse ingests OTLP, under its base URL.
OTLP_PATH = "/api/public/otel"


def tracing(value: Any) -> dict[str, Any]:
    """``{provider, public_key, secret_key, base_url}`` -> ``telemetry``.

    ``provider: null`` (koboi-agent's default: no tracing) turns telemetry off.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ValueError("tracing: must be a mapping")
    unknown = sorted(set(value) - {"provider", "public_key", "secret_key", "base_url"})
    if unknown:
        raise ValueError(
            f"tracing.{unknown[0]}: has no counterpart in koboi; see telemetry in koboi "
            "config schema"
        )
    provider = value.get("provider")
    if provider is None:
        return {"enabled": False}
    if provider != "langfuse":
        raise ValueError(
            f"tracing.provider: {provider!r} has no counterpart in koboi; write "
            "telemetry.endpoint (any OTLP backend) and telemetry.headers"
        )
    keys = {}
    for key in ("public_key", "secret_key"):
        item = value.get(key)
        if not isinstance(item, str) or not item:
            raise ValueError(f"tracing.{key}: is required with provider langfuse")
        keys[key] = item
    base_url = value.get("base_url") or DEFAULT_BASE_URL
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"tracing.base_url: {base_url!r} is not an http(s) URL")
    token = base64.b64encode(f"{keys['public_key']}:{keys['secret_key']}".encode()).decode()
    return {
        "traces": "otlp",
        "metrics": "none",  # Langfuse ingests OTLP traces, not metrics
        "protocol": "http/protobuf",  # and only over HTTP
        "endpoint": base_url.rstrip("/") + OTLP_PATH,
        "headers": {"Authorization": f"Basic {token}"},
    }
