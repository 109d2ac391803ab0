"""docs/server.md cannot drift from the code, and composition in code works as documented."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Depends

from koboi.tools import Risk, tool
from koboi_server import Principal, ServerSettings, create_app, current_principal
from koboi_server.sse import EVENT_NAMES

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "server.md"
SOURCE = Path(__file__).resolve().parents[1] / "src" / "koboi_server"


@pytest.fixture
def doc() -> str:
    if not DOC.exists():
        pytest.skip("runs from the repository only")
    return DOC.read_text(encoding="utf-8")


def test_every_setting_is_documented(doc: str) -> None:
    for name in ServerSettings.model_fields:
        assert f"| `{name}` |" in doc, name


def test_every_sse_event_is_documented(doc: str) -> None:
    for name in EVENT_NAMES:
        assert f"| `{name}` |" in doc, name


def test_every_error_code_is_documented(doc: str) -> None:
    codes: set[str] = set()
    for path in SOURCE.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        codes |= set(re.findall(r'ApiError\(\s*\d{3},\s*"(\w+)"', text))
        codes |= set(re.findall(r'envelope\(\s*"(\w+)"', text))
    assert len(codes) > 10
    table = doc.split("### Errors", 1)[1].split("## Streaming", 1)[0]
    for code in codes:
        assert f"`{code}`" in table, code


def test_every_route_is_documented(doc: str, write_config: Any) -> None:
    spec = create_app(write_config()).openapi()
    for path, item in spec["paths"].items():
        for method in item:
            shown = re.sub(r"\{\w+\}", "{id}", path)
            assert f"`{method.upper()} {shown}" in doc, (method, path)


@tool(risk=Risk.SAFE)
def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: what to shout.
    """
    return text.upper()


SHOUTING = """
    agent: {name: shouting, mode: act}
    llm:
      provider: scripted
      rules:
        - match: 'shout (?P<t>\\w+)'
          tool: shout
          arguments: {text: "{t}"}
          reply: "{result}!"
    store: {url: "sqlite:///koboi.db"}
"""


def test_extra_routes_and_tools(
    write_config: Any, thread_server: Any, client: Any, make_key: Any
) -> None:
    config = write_config(SHOUTING, name="shouting.yaml")
    router = APIRouter(prefix="/v1/mine")

    @router.get("/whoami")
    async def whoami(
        principal: Annotated[Principal, Depends(current_principal)],
    ) -> dict[str, str]:
        return {"principal": principal.name}

    server = thread_server(config, extra_tools=[shout], extra_routes=[router])
    key = make_key("carol", config=config)
    assert client(server.base_url).get("/v1/mine/whoami").status_code == 401
    assert client(server.base_url, key).get("/v1/mine/whoami").json() == {"principal": "carol"}
    answer = client(server.base_url, key).post("/v1/chat", json={"message": "shout hey"})
    assert answer.json()["output"] == "HEY!"
