"""A plugin host with koboi-rag (and the scripted model), small document sets, engines.

Servers here listen on 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import koboi_rag.plugin
import koboi_scripted.plugin
from koboi import PluginHost
from koboi_rag.config import RagSettings
from koboi_rag.engine import RagEngine
from koboi_rag.index import SQLiteIndex

DOCS = {
    "guide/install.md": (
        "# Installing Widgets\n\n"
        "Download the widget installer from the portal. Run it as an administrator.\n\n"
        "## Linux\n\nOn Linux, unpack the tarball into /opt/widgets and run the setup script.\n"
    ),
    "guide/refunds.txt": (
        "Refund policy. Customers may return a widget within 30 days of purchase for a full "
        "refund. Opened boxes are refunded at 80 percent. Refunds are paid to the original card."
    ),
    "guide/support.txt": (
        "Support hours are Monday to Friday, nine to five. Urgent outages are answered within "
        "one hour by the on-call engineer. Email support for anything else."
    ),
    "notes/weather.txt": (
        "The weather station on the roof measures wind speed, rain and temperature every minute."
    ),
}


def write_docs(root: Path, docs: dict[str, str] | None = None) -> Path:
    for name, text in (docs or DOCS).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def host() -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_rag.plugin, "rag", dist="koboi-rag")
    return host


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    return write_docs(tmp_path)


@pytest.fixture
def make_engine(host: PluginHost, tmp_path: Path) -> Callable[..., RagEngine]:
    """``make_engine(**settings)``: an engine over ``tmp_path/index.db`` (hashing embedder
    unless told), documents relative to ``tmp_path``."""

    def make(**options: Any) -> RagEngine:
        options.setdefault("documents", ["guide", "notes"])
        options.setdefault("embedder", {"name": "hashing", "dimensions": 64})
        settings = RagSettings(**options)
        return RagEngine(settings, SQLiteIndex(tmp_path / "index.db"), host=host, base_dir=tmp_path)

    return make
