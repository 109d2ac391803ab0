"""``koboi mcp``: list, tools, logout — the real command, in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _koboi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "koboi_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
    )


def _config(tmp_path: Path, kit: Any) -> Path:
    servers = {
        "notes": kit.notes_server(tmp_path),
        "broken": {"command": str(tmp_path / "no-such-server")},
        "remote": {
            "transport": "http",
            "url": "https://mcp.example.invalid/mcp",
            "auth": {"type": "authorization_code"},
            "enabled": False,
        },
    }
    config = kit.agent_config(tmp_path, servers, store=f"sqlite:///{tmp_path / 'koboi.db'}")
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_list_and_tools(tmp_path: Path, kit: Any) -> None:
    config = _config(tmp_path, kit)
    listed = _koboi("mcp", "list", "--config", str(config), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["notes"]["up"] and rows["notes"]["tools"] >= 8
    assert rows["notes"]["protocol_version"]
    assert not rows["broken"]["up"] and "could not be started" in rows["broken"]["error"]
    assert not rows["remote"]["enabled"]
    text = _koboi("mcp", "list", "--config", str(config))
    assert text.returncode == 0 and "notes" in text.stdout and "down" in text.stdout

    tools = _koboi("mcp", "tools", "notes", "--config", str(config), "--json")
    assert tools.returncode == 0, tools.stderr
    shown = {t["name"]: t for t in json.loads(tools.stdout)}
    assert shown["notes__delete_notes"]["risk"] == "destructive"
    assert shown["notes__list_notes"]["idempotent"] is True

    unknown = _koboi("mcp", "tools", "nope", "--config", str(config))
    assert unknown.returncode == 1
    assert unknown.stderr.strip().startswith("error: no MCP server named 'nope'")
    assert "Traceback" not in unknown.stderr


@pytest.mark.anyio
async def test_logout_forgets_the_tokens_kept_in_the_store(tmp_path: Path, kit: Any) -> None:
    from mcp.shared.auth import OAuthToken

    from koboi.agent import KoboiAgent
    from koboi.store import records_of
    from koboi_mcp.auth import FEATURE, StoreTokenStorage, record_key

    config = _config(tmp_path, kit)
    raw = yaml.safe_load(config.read_text())
    raw["mcp"]["servers"] = {"remote": {**raw["mcp"]["servers"]["remote"], "enabled": True}}
    raw["mcp"]["fail_fast"] = False
    del raw["mcp"]["servers"]["remote"]["enabled"]
    config.write_text(yaml.safe_dump(raw))
    nothing = _koboi("mcp", "logout", "remote", "--config", str(config), "--json")
    assert nothing.returncode == 0 and json.loads(nothing.stdout) == {
        "server": "remote",
        "forgot": False,
    }
    # Log in is a person's browser; what it leaves behind is a record of the store.
    agent = KoboiAgent.from_dict({"llm": {"provider": "scripted"}, "store": raw["store"]})
    async with agent:
        storage = StoreTokenStorage(
            records_of(agent.store, FEATURE),
            record_key("remote", "https://mcp.example.invalid/mcp"),
        )
        await storage.set_tokens(OAuthToken(access_token="secret-access-token-" + "a" * 20))
    forgot = _koboi("mcp", "logout", "remote", "--config", str(config), "--json")
    assert forgot.returncode == 0 and json.loads(forgot.stdout)["forgot"] is True
    assert "secret-access-token" not in forgot.stdout + forgot.stderr
    async with KoboiAgent.from_dict(
        {"llm": {"provider": "scripted"}, "store": raw["store"]}
    ) as agent:
        storage = StoreTokenStorage(
            records_of(agent.store, FEATURE),
            record_key("remote", "https://mcp.example.invalid/mcp"),
        )
        assert await storage.get_tokens() is None
    login = _koboi("mcp", "login", "notes", "--config", str(_config(tmp_path, kit)))
    assert login.returncode == 1 and "has no OAuth login" in login.stderr
