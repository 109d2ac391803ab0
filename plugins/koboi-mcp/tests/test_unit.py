"""The parts of koboi-mcp that need no server: config, names, risk, results, elicitation
replies, the token store, the SSRF guard's refusal. Fast; the servers are in the other files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from pydantic import ValidationError

from koboi.store import InMemoryStore
from koboi.tools import Risk
from koboi_mcp.auth import StoreTokenStorage, record_key
from koboi_mcp.config import McpSettings, ServerSettings
from koboi_mcp.elicitation import answer_from_reply
from koboi_mcp.tools import content_text, idempotent_of, risk_of
from koboi_mcp.toolset import offered
from koboi_mcp.transport import guarded_http_client


def _tool(name: str = "t", **hints: Any) -> types.Tool:
    return types.Tool(
        name=name,
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations(**hints) if hints else None,
    )


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, koboi_mcp.plugin\n"
        "heavy = [m for m in ('mcp', 'httpx2', 'pydantic', 'koboi_mcp.config', 'koboi.loop') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == ""


def test_risk_comes_from_the_annotations_and_the_config_overrides_it() -> None:
    assert risk_of(_tool(read_only_hint=True), {}) == Risk.SAFE
    assert risk_of(_tool(destructive_hint=True), {}) == Risk.DESTRUCTIVE
    assert risk_of(_tool(read_only_hint=False, destructive_hint=False), {}) == Risk.MODERATE
    # No annotations: the spec's defaults (not read-only, possibly destructive) are not
    # trusted either way: moderate, asked about under the default approval risk.
    assert risk_of(_tool(), {}) == Risk.MODERATE
    assert risk_of(_tool("t", read_only_hint=True), {"t": Risk.DESTRUCTIVE}) == Risk.DESTRUCTIVE
    assert idempotent_of(_tool(idempotent_hint=True), {}) is True
    assert idempotent_of(_tool(read_only_hint=True), {}) is True
    assert idempotent_of(_tool(), {}) is False
    assert idempotent_of(_tool("t", idempotent_hint=True), {"t": False}) is False


def test_allow_and_deny_lists_filter_by_the_servers_names() -> None:
    remote = [_tool("a"), _tool("b"), _tool("c")]
    every = ServerSettings(command="x")
    assert [t.name for t in offered(every, remote)] == ["a", "b", "c"]
    some = ServerSettings(command="x", allow=["a", "b"], deny=["b"])
    assert [t.name for t in offered(some, remote)] == ["a"]


def test_each_servers_tools_are_offered_in_a_namespace_of_their_own() -> None:
    settings = McpSettings.model_validate({"servers": {"gh": {"command": "x"}}})
    assert settings.namespace_of("gh") == "gh"  # offered as gh__<tool>
    custom = McpSettings.model_validate(
        {
            "namespace": "mcp_{server}",
            "servers": {"gh": {"command": "x"}, "b": {"command": "y", "namespace": "books"}},
        }
    )
    assert custom.namespace_of("gh") == "mcp_gh"
    assert custom.namespace_of("b") == "books"
    with pytest.raises(ValueError, match=r"namespace 'no\.dots' is not 1-32 letters"):
        McpSettings.model_validate({"servers": {"a": {"command": "x", "namespace": "no.dots"}}})


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ({"transport": "stdio"}, "a stdio server needs 'command'"),
        ({"transport": "http"}, "an http server needs 'url'"),
        ({"transport": "http", "url": "ftp://x"}, "must start with http"),
        ({"command": "x", "auth": {"type": "bearer", "token_env": "T"}}, "'auth' is for transport"),
        ({"command": "x", "pass_env": ["NOT A NAME"]}, "not an environment variable name"),
        ({"command": "x", "risk": {"t": "lethal"}}, "risk"),
    ],
)
def test_a_bad_server_entry_says_what_to_fix(server: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        McpSettings.model_validate({"servers": {"s": server}})


def test_a_bad_server_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="server name 'a b'"):
        McpSettings.model_validate({"servers": {"a b": {"command": "x"}}})


def test_results_read_as_text_for_the_model() -> None:
    blocks = [
        types.TextContent(text="hello"),
        types.ImageContent(data="aGVsbG8=", mime_type="image/png"),
        types.EmbeddedResource(
            resource=types.TextResourceContents(uri="file:///a.txt", text="inside")
        ),
        types.ResourceLink(uri="file:///b", name="b"),
    ]
    text = content_text(blocks)
    assert text.splitlines() == [
        "hello",
        "[image: image/png, 5 bytes]",
        "[resource file:///a.txt]",
        "inside",
        "[resource link: file:///b (b)]",
    ]
    assert content_text([], {"answer": 42}) == '{"answer": 42}'
    # A server's escape sequences and control characters never reach the model.
    hostile = [types.TextContent(text="ok\x1b[2J\x1b]0;pwned\x07 done\x00")]
    assert content_text(hostile) == "ok done"


def _form(**properties: Any) -> types.ElicitRequestFormParams:
    return types.ElicitRequestFormParams(
        message="?",
        requested_schema={"type": "object", "properties": properties},  # type: ignore[typeddict-item]
    )


def test_a_reply_answers_an_elicitation() -> None:
    one = _form(confirm={"type": "boolean"})
    assert answer_from_reply("yes", one).content == {"confirm": True}
    assert answer_from_reply("decline", one).action == "decline"
    assert answer_from_reply({"action": "cancel"}, one).action == "cancel"
    two = _form(name={"type": "string"}, age={"type": "integer"})
    accepted = answer_from_reply('{"name": "Ada", "age": "36"}', two)
    assert accepted.action == "accept" and accepted.content == {"name": "Ada", "age": 36}
    # Text for a form of several fields cannot be read: declined, not guessed.
    assert answer_from_reply("Ada", two).action == "decline"


@pytest.mark.anyio
async def test_tokens_live_in_the_stores_keyed_records() -> None:
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

    store = InMemoryStore()
    await store.open()
    storage = StoreTokenStorage(store, record_key("gh", "https://mcp.example/mcp"))
    assert await storage.get_tokens() is None
    await storage.set_tokens(OAuthToken(access_token="at-1", refresh_token="rt-1", expires_in=3600))
    await storage.set_client_info(
        OAuthClientInformationFull(client_id="c1", redirect_uris=None)  # type: ignore[arg-type]
    )
    again = StoreTokenStorage(store, record_key("gh", "https://mcp.example/mcp"))
    token = await again.get_tokens()
    assert token is not None and token.access_token == "at-1" and token.refresh_token == "rt-1"
    assert token.expires_in is not None and 3590 <= token.expires_in <= 3600
    info = await again.get_client_info()
    assert info is not None and info.client_id == "c1"
    # Another URL for the same name is another server: no tokens sent there.
    moved = StoreTokenStorage(store, record_key("gh", "https://elsewhere.example/mcp"))
    assert await moved.get_tokens() is None
    assert await again.forget() is True
    assert await again.get_tokens() is None


@pytest.mark.anyio
async def test_the_ssrf_guard_refuses_a_loopback_server_unless_it_is_allowed() -> None:
    from koboi_http.pinning import AddressRefused

    async with guarded_http_client(allow_private=False, headers={}, timeout=2) as client:
        with pytest.raises(AddressRefused, match="loopback"):
            await client.get("http://127.0.0.1:9/mcp")
        with pytest.raises(AddressRefused, match="metadata"):
            await client.get("http://169.254.169.254/latest")
    async with guarded_http_client(allow_private=True, headers={}, timeout=2) as client:
        # Allowed: it is tried (nothing listens on port 9: refused by the peer, not the guard).
        with pytest.raises(httpx2.ConnectError):
            await client.get("http://127.0.0.1:9/mcp")
        # Cloud metadata stays refused even for an allowed server.
        with pytest.raises(AddressRefused, match="metadata"):
            await client.get("http://169.254.169.254/latest")


def test_the_demo_config_validates(kit: Any) -> None:
    from koboi.config import load_config
    from koboi.plugins import default_host

    config = load_config(Path(kit.root) / "configs" / "mcp_demo.yaml", default_host().catalog())
    section = config.section("mcp")
    assert isinstance(section, McpSettings) and "notes" in section.servers
