"""Fixtures of the koboi-a2a tests (the helpers are in ``a2a_testkit``: pytest's
importlib mode cannot import a conftest by name)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from a2a_testkit import Callee, serve_callee


@pytest.fixture(autouse=True)
def _isolated(koboi_clean_environment: None) -> None:
    """koboi-testing's clean environment for every test."""


@pytest.fixture
def callee(tmp_path: Path) -> Iterator[Callee]:
    served = serve_callee(tmp_path)
    yield served
    served.server.stop()
