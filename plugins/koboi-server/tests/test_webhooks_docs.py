"""docs/webhooks.md promises a self-contained verifier: run that very block on real deliveries."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from koboi.store import InMemoryStore
from koboi_server.webhooks import (
    Backoff,
    WebhookDispatcher,
    WebhookSettings,
    generate_secret,
    verify,
)
from koboi_testing.wire import Reply, WireServer

pytestmark = pytest.mark.anyio

DOC = Path(__file__).resolve().parents[3] / "docs" / "webhooks.md"


@pytest.fixture
def receiver() -> Iterator[WireServer]:
    with WireServer() as server:
        server.default = Reply.json({"ok": True})
        yield server


def documented_verifier() -> Callable[..., Any]:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- receiver-verifier -->\s*```python\n(.*?)```", text, re.S)
    assert match, "docs/webhooks.md lost its receiver-verifier block"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), str(DOC), "exec"), namespace)
    verifier: Callable[..., Any] = namespace["verify_koboi_webhook"]
    return verifier


async def test_the_documented_verifier_agrees_with_the_shipped_one(receiver: WireServer) -> None:
    secret = generate_secret()
    async with InMemoryStore() as store:
        dispatcher = WebhookDispatcher(store, allow=["127.0.0.0/8"], backoff=Backoff(base=0))
        await dispatcher.enqueue(receiver.url, secret, "job.finished", {"job_id": "j1"})
        await dispatcher.deliver_due()
    [request] = receiver.requests
    documented = documented_verifier()

    event = documented(secret, request.headers, request.body)
    assert event == verify(secret, request.headers, request.body)
    assert event["data"] == {"job_id": "j1"}
    with pytest.raises(ValueError, match="bad webhook signature"):
        documented(secret, request.headers, request.body.replace(b"j1", b"j2"))
    with pytest.raises(ValueError, match="bad webhook signature"):
        documented(generate_secret(), request.headers, request.body)
    stale = {
        **request.headers,
        "webhook-timestamp": str(int(request.headers["webhook-timestamp"]) - 301),
    }
    with pytest.raises(ValueError, match="stale"):
        documented(secret, stale, request.body)


def test_the_documented_settings_example_is_valid() -> None:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"```yaml\nwebhooks:\n(.*?)```", text, re.S)
    assert match
    import yaml

    secret = generate_secret()
    section = yaml.safe_load(match.group(1).replace("${KOBOI_WEBHOOK_SECRET}", secret))
    settings = WebhookSettings.model_validate(section)
    assert settings.model_dump(exclude={"endpoints"}) == WebhookSettings(
        allow=["10.20.0.0/16", "hooks.corp"]
    ).model_dump(exclude={"endpoints"})
    assert [e.events for e in settings.endpoints] == [["job.*"]]
