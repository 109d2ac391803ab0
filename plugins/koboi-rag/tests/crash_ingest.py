"""Ingest a directory in a process of its own, printing progress as it goes (for the
SIGKILL test). Usage: python crash_ingest.py BASE_DIR INDEX_DB BATCH_DELAY

The embedder is the hashing one, slowed by BATCH_DELAY seconds per batch so that a
kill can land while vectors are being written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

import koboi_rag.plugin
from koboi import PluginHost, hookimpl
from koboi_rag.config import RagSettings
from koboi_rag.embedders.hashing import HashingEmbedder
from koboi_rag.engine import Progress, RagEngine
from koboi_rag.index import SQLiteIndex

DELAY = float(sys.argv[3])


class SlowHashing(HashingEmbedder):
    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        await anyio.sleep(DELAY)
        return await super().embed_documents(texts)


class SlowPlugin:
    @staticmethod
    @hookimpl
    def koboi_rag_register_embedders(register: Any) -> None:
        register("slow-hashing", lambda options: SlowHashing(dimensions=32))


def show(step: Progress) -> None:
    if step.stage in ("document", "embed", "fit"):
        print(step.stage, step.key, step.done, flush=True)


async def main() -> None:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_rag.plugin, "rag", dist="koboi-rag")
    host.add_plugin(SlowPlugin(), "slow", dist="slow")
    settings = RagSettings(documents=["docs"], embedder="slow-hashing", retriever="hybrid")
    engine = RagEngine(
        settings, SQLiteIndex(Path(sys.argv[2])), host=host, base_dir=Path(sys.argv[1])
    )
    report = await engine.ingest(show)
    print("REPORT " + json.dumps(report.data()), flush=True)


if __name__ == "__main__":
    anyio.run(main)
