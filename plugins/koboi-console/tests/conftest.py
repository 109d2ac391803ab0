"""Fixtures of koboi-console's tests (the pieces are in console_support.py, a module name
no other member's tests use, so the whole suite can import it beside theirs)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from console_support import _isolated, config_path, serve

__all__ = ["_isolated", "config_path", "serve"]
