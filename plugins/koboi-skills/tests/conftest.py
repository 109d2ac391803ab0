"""A plugin host with this plugin and the scripted model; skills written into tmp folders."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import koboi_scripted.plugin
import koboi_skills.plugin
from koboi import AllowAllApprover, KoboiAgent, PluginHost
from koboi.plugins import use_host
from koboi.store import InMemoryStore
from koboi_testing.models import InOrderModel


@pytest.fixture
def host() -> Iterator[PluginHost]:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_skills.plugin, "skills", dist="koboi-skills")
    with use_host(host):
        yield host


def write_skill(
    root: Path, name: str, description: str, body: str, files: dict[str, str] | None = None
) -> Path:
    """A skill folder ``root/name`` with its SKILL.md and ``files`` (relative path: text)."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    front = f"---\nname: {name}\ndescription: {description}\n---\n"
    (folder / "SKILL.md").write_text(front + textwrap.dedent(body), encoding="utf-8")
    for relative, text in (files or {}).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


def make_agent(
    skills: dict[str, Any],
    turns: Sequence[Any],
    tmp_path: Path,
    *,
    store: InMemoryStore | None = None,
    extra: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[KoboiAgent, InOrderModel]:
    model = InOrderModel(list(turns))
    (tmp_path / "work").mkdir(exist_ok=True)
    config = {
        "llm": {"provider": "scripted"},
        "agent": {"stream": False},
        "sandbox": {"backend": "passthrough", "workdir": str(tmp_path / "work")},
        "skills": skills,
        **(extra or {}),
    }
    kwargs.setdefault("approver", AllowAllApprover())
    agent = KoboiAgent.from_dict(
        config, base_dir=tmp_path, provider=model, store=store or InMemoryStore(), **kwargs
    )
    return agent, model


def call(tool_name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool_name, "arguments": arguments}


class Kit:
    """The helpers above, for test modules (pytest's importlib mode keeps conftest private)."""

    write_skill = staticmethod(write_skill)
    make_agent = staticmethod(make_agent)
    call = staticmethod(call)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
