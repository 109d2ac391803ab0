"""Fixtures of the koboi-a2a tests (the helpers are in ``a2a_testkit``: pytest's
importlib mode cannot import a conftest by name)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from a2a_testkit import Callee, serve_callee

from koboi.plugins import reset_default_host


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("KOBOI_STRICT_PLUGINS", "1")
    for name in list(os.environ):
        if name.startswith("KOBOI_DEMO_") or name in (
            "KOBOI_STORE",
            "KOBOI_CACHE_MODE",
            "KOBOI_DEBUG",
            "KOBOI_LOAD_PLUGINS",
            "KOBOI_DISABLE_PLUGINS",
        ):
            monkeypatch.delenv(name, raising=False)
    reset_default_host()
    yield
    reset_default_host()


@pytest.fixture
def callee(tmp_path: Path) -> Iterator[Callee]:
    served = serve_callee(tmp_path)
    yield served
    served.server.stop()
