from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from koboi import plugins
from koboi.plugins import PluginHost

WriteConfig = Callable[[str], Path]


@pytest.fixture(autouse=True)
def _isolated_env(koboi_clean_environment: None) -> None:
    """koboi-testing's clean environment for every test."""


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def write_config(tmp_path: Path) -> WriteConfig:
    """Write a YAML config (dedented) into ``tmp_path`` and return its path."""
    counter = iter(range(1000))

    def write(text: str) -> Path:
        path = tmp_path / f"config{next(counter)}.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def use_host() -> Iterator[Callable[[PluginHost], PluginHost]]:
    """Make every CLI command use ``host``: injected through the kernel
    (:func:`koboi.plugins.use_host`), as any application would."""
    with contextlib.ExitStack() as stack:

        def install(host: PluginHost) -> PluginHost:
            stack.enter_context(plugins.use_host(host))
            return host

        yield install
