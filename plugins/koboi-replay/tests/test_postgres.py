"""Capture from a PostgreSQL store (what several replicas share), replay with none."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from koboi_cli.app import app

pytestmark = pytest.mark.postgres

SERVER = os.environ.get(
    "KOBOI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture
def store_url() -> Iterator[str]:
    """A private schema on the test server, dropped after the test."""
    psycopg = pytest.importorskip("psycopg")
    schema = f"koboi_replay_{uuid.uuid4().hex[:10]}"
    conninfo = SERVER.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield f"{SERVER}?options={quote(f'-csearch_path={schema}')}"
        finally:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_capture_from_postgres_and_replay(
    store_url: str, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    config = write_config(
        f"""
        agent: {{name: pg-replay, mode: act, approval_risk: safe}}
        llm:
          provider: scripted
          script:
            - tool_calls: [{{name: calculator, arguments: {{expression: "6 * 7"}}}}]
            - reply: "42"
        tools: {{builtin: [calculator]}}
        store: {{url: "{store_url}"}}
        """
    )
    runner = CliRunner()
    ran = runner.invoke(app, ["run", str(config), "-m", "go", "--yes"])
    assert ran.exit_code == 0, ran.stderr
    bundle = tmp_path / "pg.koboi"
    captured = runner.invoke(app, ["capture", "last", "--config", str(config), "-o", str(bundle)])
    assert captured.exit_code == 0, captured.stderr
    replayed = runner.invoke(app, ["run", str(bundle), "--replay-mode", "replay"])
    assert replayed.exit_code == 0, replayed.stdout
    assert replayed.stdout.startswith("replay: identical")
    # Stored workflows live in PostgreSQL too.
    flow = tmp_path / "flow.koboi"
    assert runner.invoke(app, ["export", str(config), "-o", str(flow)]).exit_code == 0
    imported = runner.invoke(app, ["import", str(flow), "--config", str(config)])
    assert imported.exit_code == 0, imported.stderr
    listed = runner.invoke(app, ["workflows", "list", "--config", str(config), "--json"])
    assert '"name": "pg-replay"' in listed.stdout
