from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # chat_pilot, the tests' helpers

#: The offline agent every test talks to: the scripted model answers by rules, with the
#: real calculator and file tools; act mode, so file changes need approval.
CHAT_CONFIG = r"""
agent:
  name: chat_test
  mode: act
llm:
  provider: scripted
  model: demo
  rules:
    - match: '\bedit\s+(?P<path>[\w./-]+)\s*:\s*(?P<old>.+?)\s*->\s*(?P<new>.+)'
      tool: edit_file
      arguments: {path: "{path}", old_text: "{old}", new_text: "{new}"}
      reply: "{result}"
    - match: '\bwrite\s+(?P<path>[\w./-]+)\s*:\s*(?P<content>.+)'
      tool: write_file
      arguments: {path: "{path}", content: "{content}"}
      reply: "{result}"
    - match: '(?P<expr>\d[\d\s+*/().-]*\d)'
      tool: calculator
      arguments: {expression: "{expr}"}
      reply: "{expr} = {result}"
  fallback: "I can do arithmetic and change files."
tools:
  builtin: [calculator, write_file, edit_file]
sandbox:
  backend: passthrough
  workdir: work
store:
  url: "sqlite:///koboi.db"
"""


@pytest.fixture(autouse=True)
def _isolated(koboi_clean_environment: None) -> None:
    """koboi-testing's clean environment for every test."""


@pytest.fixture
def chat_config(tmp_path: Path) -> Path:
    """The test agent's config in ``tmp_path`` (its store and workdir beside it)."""
    (tmp_path / "work").mkdir()
    path = tmp_path / "chat.yaml"
    path.write_text(textwrap.dedent(CHAT_CONFIG), encoding="utf-8")
    return path


@pytest.fixture
def make_app(chat_config: Path) -> Callable[..., object]:
    """A ``ChatApp`` for the test config (a new one per call, as a new ``koboi chat``)."""
    from koboi.config import load_config
    from koboi_cli.api import get_host
    from koboi_tui.app import ChatApp

    def make(session: str | None = None) -> ChatApp:
        host = get_host()
        return ChatApp(load_config(chat_config, host.catalog()), host, session=session)

    return make
