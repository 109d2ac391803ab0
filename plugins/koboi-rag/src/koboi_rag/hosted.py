"""JSON over HTTP to a hosted API (embeddings, rerankers): one request, retried.

Every request goes through koboi-http's client factory (``peer="provider"``: the
plugins' request hooks run and, by default, the run's trace context is sent, as to a
model provider), with exponential backoff and jitter on connection errors, 408,
409, 429 and 5xx (``Retry-After`` honoured). Errors are one line that says what to
fix and never contain the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import httpx

from koboi.errors import KoboiError
from koboi.secrets import mask_secrets
from koboi_http import client as http_client
from koboi_http.hooks import PROVIDER
from koboi_http.retry import RetryPolicy, is_retryable_status, retry_after_seconds


class HostedAPIError(KoboiError):
    """A hosted API refused or failed a request (after its retries)."""


def api_key(configured: Any, env_vars: Sequence[str], what: str) -> str:
    """The configured key (a SecretStr or str), else the first set variable; '' when none."""
    if configured is not None:
        getter = getattr(configured, "get_secret_value", None)
        value = getter() if getter is not None else str(configured)
        if value:
            return str(value)
    for name in env_vars:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return ""


async def post_json(
    url: str,
    body: Mapping[str, Any],
    *,
    what: str,
    key: str = "",
    key_hint: str = "",
    timeout: float = 30.0,
    max_retries: int = 2,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """POST ``body`` to ``url`` and return the decoded JSON answer."""
    policy = RetryPolicy(max_retries=max_retries)
    sent = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
    if key:
        sent["Authorization"] = f"Bearer {key}"
    attempt = 0
    async with http_client(peer=PROVIDER, timeout=timeout) as session:
        while True:
            attempt += 1
            try:
                response = await session.post(url, json=dict(body), headers=sent)
            except httpx.HTTPError as exc:
                if attempt <= policy.max_retries:
                    await anyio.sleep(policy.delay(attempt))
                    continue
                raise HostedAPIError(
                    f"{what}: cannot reach {url} ({type(exc).__name__}: {exc or 'no detail'})"
                ) from None
            if response.status_code < 400:
                try:
                    return response.json()
                except ValueError:
                    raise HostedAPIError(
                        f"{what}: {url} answered {response.status_code} with a body that is not "
                        "JSON"
                    ) from None
            if is_retryable_status(response.status_code) and attempt <= policy.max_retries:
                wait = retry_after_seconds(response.headers)
                if wait is not None and wait > policy.max_retry_after:
                    raise HostedAPIError(
                        f"{what}: {url} asked to wait {wait:.0f} s before retrying (status "
                        f"{response.status_code})"
                    )
                await anyio.sleep(policy.delay(attempt, wait))
                continue
            detail = _error_detail(response)
            if response.status_code in (401, 403):
                raise HostedAPIError(
                    f"{what}: {url} refused the API key (status {response.status_code}"
                    f"{': ' + detail if detail else ''}); {key_hint or 'check the key'}"
                )
            raise HostedAPIError(
                f"{what}: {url} answered status {response.status_code}"
                f"{': ' + detail if detail else ''}"
            )


def _error_detail(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return mask_secrets(response.text[:200].strip())
    if isinstance(data, Mapping):
        error = data.get("error", data.get("message", data.get("detail", "")))
        if isinstance(error, Mapping):
            error = error.get("message", "")
        return mask_secrets(str(error)[:200])
    return ""
