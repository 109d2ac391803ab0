from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import pluggy

from koboi import hookspecs
from koboi.tools import Tool
from koboi_tools_basic import plugin


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "tools-basic"]
    assert ep.value == "koboi_tools_basic.plugin"


def test_registers_both_tools() -> None:
    pm = pluggy.PluginManager("koboi")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    registered: list[Any] = []
    pm.hook.koboi_register_tools(register=registered.append)
    assert all(isinstance(t, Tool) for t in registered)
    assert sorted(t.name for t in registered) == ["calculator", "current_time"]
