"""SIGKILL during ingestion of a large directory, then run it again: no chunk twice,
nothing re-embedded that was finished, every document indexed (real processes)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("crash_ingest.py")
DOCUMENTS = 500


def start(base: Path, db: Path, delay: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(base), str(db), str(delay)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
    )


def kill_after(process: subprocess.Popen[str], stage: str, count: int) -> None:
    seen = 0
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(stage):
            seen += 1
            if seen >= count:
                process.send_signal(signal.SIGKILL)
                break
    process.wait(timeout=30)
    process.stdout.close()
    assert process.returncode == -signal.SIGKILL, "the process ended before it could be killed"


def consistent(db: Path) -> dict[str, int]:
    with closing(sqlite3.connect(db)) as c, c:
        chunks = c.execute("SELECT COUNT(*) FROM rag_chunks").fetchone()[0]
        distinct = c.execute(
            "SELECT COUNT(DISTINCT doc_key || ':' || position) FROM rag_chunks"
        ).fetchone()[0]
        fts = c.execute("SELECT COUNT(*) FROM rag_fts").fetchone()[0]
        declared = c.execute("SELECT COALESCE(SUM(chunks), 0) FROM rag_documents").fetchone()[0]
        orphans = c.execute(
            "SELECT COUNT(*) FROM rag_chunks c LEFT JOIN rag_documents d ON d.doc_key = c.doc_key "
            "WHERE d.doc_key IS NULL"
        ).fetchone()[0]
        documents = c.execute("SELECT COUNT(*) FROM rag_documents").fetchone()[0]
    assert chunks == distinct == fts == declared and orphans == 0
    return {"chunks": chunks, "documents": documents}


def vectors(db: Path) -> dict[int, bytes]:
    with closing(sqlite3.connect(db)) as c, c:
        return dict(
            c.execute("SELECT id, vector FROM rag_chunks WHERE vector IS NOT NULL").fetchall()
        )


def test_sigkill_then_rerun(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(DOCUMENTS):
        (docs / f"doc{n:05d}.txt").write_text(
            f"Document {n}. " + " ".join(f"term{(n * 7 + k) % 997}" for k in range(80)) + ".\n"
        )
    db = tmp_path / "index.db"

    # 1: killed while documents are being indexed.
    kill_after(start(tmp_path, db, 0.0), "document", 120)
    first = consistent(db)
    assert 120 <= first["documents"] < DOCUMENTS

    # 2: killed while vectors are being written (a slow embedder, 0.3 s a batch).
    kill_after(start(tmp_path, db, 0.3), "embed", 1)
    second = consistent(db)
    assert second["documents"] == DOCUMENTS
    done_before = vectors(db)
    assert 0 < len(done_before) < second["chunks"]

    # 3: to the end.
    finished = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), str(db), "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(finished.stdout.rsplit("REPORT ", 1)[1])
    assert (report["added"], report["updated"], report["unchanged"]) == (0, 0, DOCUMENTS)
    assert report["embedded"] == second["chunks"] - len(done_before)  # only what was missing
    after = vectors(db)
    assert len(after) == consistent(db)["chunks"]
    assert all(after[i] == blob for i, blob in done_before.items())  # finished vectors untouched
