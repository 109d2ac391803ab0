"""``koboi rag ingest|search|stats|forget``: the commands in-process, and as a user
runs them (a real ``koboi`` process) for the error boundary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import koboi_store_sql.plugin
from koboi import PluginHost
from koboi.plugins import use_host

from .conftest import write_docs

KOBOI = str(Path(sys.executable).with_name("koboi"))


def test_ingest_search_stats_forget(
    tmp_path: Path, host: PluginHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    from koboi_rag.cli import app

    host.add_plugin(koboi_store_sql.plugin, "store-sql", dist="koboi-store-sql")
    write_docs(tmp_path)
    (tmp_path / "guide" / "logo.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    config: dict[str, Any] = {
        "llm": {"provider": "scripted"},
        "store": {"url": "sqlite:///.koboi/koboi.db"},
        "rag": {"documents": ["guide", "notes"], "embedder": "hashing"},
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def koboi_rag(*args: str) -> Any:
        with use_host(host):
            return runner.invoke(app, list(args))

    ingested = koboi_rag("ingest", "agent.yaml", "--json")
    assert ingested.exit_code == 1  # one document failed; the others are indexed
    report = json.loads(ingested.stdout)
    assert report["added"] == 4 and report["stats"]["documents"] == 4
    assert report["failed"] == [
        {
            "document": "guide/logo.txt",
            "error": "binary content (NUL bytes), not text; add a parser for this format",
        }
    ]
    assert "indexed  guide/refunds.txt: 1 chunks" in ingested.stderr  # progress as it goes
    assert report["stats"]["index"].endswith(".koboi/koboi.db")  # the store's own database

    found = koboi_rag("search", "agent.yaml", "refund within 30 days", "-k", "1", "--json")
    assert found.exit_code == 0, found.output
    result = json.loads(found.stdout)["results"][0]
    assert result["source"] == "guide/refunds.txt" and result["position"] == 0
    shown = koboi_rag("search", "agent.yaml", "support hours", "--retriever", "keyword")
    assert "[1] guide/support.txt chunk 0 chars 0-" in shown.stdout

    stats = json.loads(koboi_rag("stats", "agent.yaml", "--json").stdout)
    assert stats["documents"] == 4 and stats["embedded"] == stats["chunks"]
    assert json.loads(koboi_rag("forget", "agent.yaml", "guide/support.txt", "--json").stdout) == {
        "removed": 1
    }
    refused = koboi_rag("forget", "agent.yaml")
    assert refused.exit_code != 0 and "--all" in str(refused.exception)


@pytest.mark.slow
def test_errors_are_one_line_from_the_real_command(tmp_path: Path) -> None:
    memory = {
        "llm": {"provider": "scripted"},
        "store": {"url": "memory://"},
        "rag": {"documents": ["x"]},
    }
    (tmp_path / "memory.yaml").write_text(yaml.safe_dump(memory))
    refused = subprocess.run(
        [KOBOI, "rag", "ingest", "memory.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1", "NO_COLOR": "1"},
    )
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "keeps nothing after this command" in refused.stderr
