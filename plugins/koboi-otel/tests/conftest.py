"""Fixtures of koboi-otel's tests; what the tests share is in otel_kit.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def fresh_pipelines() -> Iterator[None]:
    """Each test exports through pipelines of its own (its own receiver)."""
    from koboi_otel import exporting

    exporting.shutdown_all()
    yield
    exporting.shutdown_all()
