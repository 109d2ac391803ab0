"""Fixtures of koboi-context's tests: the scripted long session (context_testkit.py)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from koboi import PluginHost
from koboi.plugins import use_host

HERE = Path(__file__).resolve().parent


def load_testkit() -> ModuleType:
    """context_testkit.py, loaded once by path (tests, benchmarks and scripts share it)."""
    name = "koboi_context_testkit"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "context_testkit.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def testkit() -> ModuleType:
    return load_testkit()


@pytest.fixture
def host(testkit: ModuleType) -> Iterator[PluginHost]:
    """The kernel, koboi-context and the testkit's plugin, nothing else installed."""
    import koboi_context.plugin

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_context.plugin, "context", dist="koboi-context")
    host.add_plugin(testkit.PLUGIN, "testkit", dist="koboi-context-tests")
    with use_host(host):
        yield host
