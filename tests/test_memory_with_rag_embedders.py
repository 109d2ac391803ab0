"""koboi-memory's vector recall on koboi-rag's real embedders.

koboi-memory never imports koboi-rag: it finds embedders through the plugin host, by
the hook koboi-rag defines (``koboi_rag_register_embedders``), and is tested alone
against a stand-in. This test puts the two real plugins together, so the contract
(factory options, ``fit``, ``embed_documents``, ``embed_query``, ``dimensions``) is
the one both sides keep.
"""

from __future__ import annotations

import anyio
import pytest

from koboi.plugins import default_host
from koboi.store import InMemoryStore
from koboi_memory.embedders import embedder_named
from koboi_memory.store import MemoryStore, Scope

ALICE, BOB = Scope("helper", "alice"), Scope("helper", "bob")
FACTS = [
    "Alice drives a red car to work every morning.",
    "Alice's cat is called Ash and sleeps on the sofa.",
    "The staging database listens on port 5433.",
    "Alice prefers tea to coffee in the afternoon.",
]


@pytest.mark.parametrize("name", ["lsa", "hashing"])
def test_memory_recalls_through_koboi_rags_embedder(name: str) -> None:
    async def main() -> None:
        embedder = embedder_named(default_host(), name, {})
        assert type(embedder).__module__.startswith("koboi_rag.")  # the real plugin's
        memory = MemoryStore(InMemoryStore(), embedder=embedder)
        for fact in FACTS:
            await memory.add(ALICE, fact)
        await memory.add(BOB, "Bob's car is a blue van.")
        hits = await memory.search(ALICE, "which port does the staging database use", k=1)
        assert [h.fact.text for h in hits] == ["The staging database listens on port 5433."]
        assert embedder.dimensions > 0  # fitted (LSA) on the facts memory indexed first
        hits = await memory.search(ALICE, "car", k=4)
        assert hits and hits[0].fact.text.startswith("Alice drives a red car")
        # Vectors never cross scopes: Bob's car is not among Alice's hits.
        assert all("Bob" not in h.fact.text for h in hits)

    anyio.run(main)
