"""Property test: whatever a client with a valid key sends to any route of the OpenAPI spec,
the answer is never a 5xx, and every error is the one envelope."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "message": st.text(max_size=40) | JSON,
        "session_id": st.text(max_size=40) | JSON,
        "decision": st.sampled_from(["approve", "deny", "maybe"]) | JSON,
        "scope": st.sampled_from(["once", "always", "never"]) | JSON,
        "reason": st.text(max_size=20) | JSON,
    },
)
BODIES = FIELDS | JSON | st.binary(max_size=40)
IDS = st.text(max_size=60) | st.sampled_from(["ap_" + "0" * 32, "0" * 32, "..", "%00", "last"])
HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "Last-Event-ID": st.text(
            alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=12
        ),
        "content-type": st.sampled_from(["application/json", "text/plain", "application/x+json"]),
    },
)
QUERIES = st.dictionaries(
    st.sampled_from(["after", "status", "limit", "x"]), st.text(max_size=8), max_size=3
)


def test_no_input_makes_a_5xx(thread_server: Any, make_key: Any) -> None:
    server = thread_server(settings={"chat_wait_seconds": 2, "max_body_bytes": 2048})
    key = make_key()
    spec = httpx.get(server.base_url + "/openapi.json").json()
    operations = [(m, p) for p, item in spec["paths"].items() for m in item]
    client = httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        operation=st.sampled_from(operations),
        ident=IDS,
        body=BODIES,
        headers=HEADERS,
        params=QUERIES,
    )
    def check(
        operation: tuple[str, str],
        ident: str,
        body: Any,
        headers: dict[str, str],
        params: dict[str, str],
    ) -> None:
        method, path = operation
        url = re.sub(r"\{\w+\}", lambda _: quote(ident, safe="") or "x", path)
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        with client.stream(
            method.upper(), url, content=content, headers=headers, params=params
        ) as response:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                return  # a stream that started: its status is 200
            response.read()
        assert response.status_code < 500, (method, url, body, response.text)
        if response.status_code >= 400:
            error = response.json()["error"]
            assert error["code"] and error["message"]
            assert "Traceback" not in response.text

    try:
        check()
    finally:
        client.close()
