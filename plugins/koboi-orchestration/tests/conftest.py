"""Fixtures of koboi-orchestration's tests (helpers: orchestration_kit.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from koboi.plugins import reset_default_host

# The tests import their helpers (orchestration_kit) from this directory.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _memory_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests never write a database into the working directory."""
    monkeypatch.setenv("KOBOI_STORE", "memory://")
    reset_default_host()
    yield
    reset_default_host()
