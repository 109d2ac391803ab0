"""The memory store: scopes that never meet, limits, search, and vectors from a plugin's
embedder found through the plugin host (koboi-rag's hook, defined here by a stand-in)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import pytest

from koboi import PluginHost, hookimpl
from koboi.errors import KoboiError
from koboi.hookspecs import hookspec
from koboi.store import InMemoryStore
from koboi_memory.embedders import embedder_named
from koboi_memory.store import MemoryStore, Scope

pytestmark = pytest.mark.anyio

ALICE, BOB = Scope("helper", "alice"), Scope("helper", "bob")


async def test_what_one_user_saved_is_never_found_for_another() -> None:
    memory = MemoryStore(InMemoryStore())
    await memory.add(ALICE, "Alice's locker code is 4711.")
    await memory.add(BOB, "Bob prefers tea over coffee.")
    assert [f.text for f in await memory.facts(ALICE)] == ["Alice's locker code is 4711."]
    assert [h.fact.text for h in await memory.search(ALICE, "locker code")] == [
        "Alice's locker code is 4711."
    ]
    assert await memory.search(BOB, "locker code") == []  # Bob's memory has no locker
    assert await memory.search(Scope("other-agent", "alice"), "locker code") == []
    # A name that another's key starts with, or that holds the separator, stays apart.
    tricky = [Scope("helper", "ali"), Scope("helper", "alice|x"), Scope("helper|alice", None)]
    for scope in tricky:
        assert await memory.facts(scope) == []
        assert await memory.search(scope, "locker") == []
    # Forgetting in the wrong scope forgets nothing.
    alices = (await memory.facts(ALICE))[0]
    assert await memory.forget(BOB, [alices.id]) == []
    assert await memory.forget(ALICE, [alices.id]) == [alices.id]
    assert await memory.facts(ALICE) == []


async def test_limits_on_size_and_count() -> None:
    memory = MemoryStore(InMemoryStore(), max_facts=3, max_fact_chars=40)
    with pytest.raises(KoboiError, match="memory keeps facts of at most 40"):
        await memory.add(ALICE, "x" * 41)
    for n in range(3):
        await memory.add(ALICE, f"fact number {n}")
    fact, dropped = await memory.add(ALICE, "fact number 3")
    assert [d.text for d in dropped] == ["fact number 0"]  # the oldest goes
    assert [f.text for f in await memory.facts(ALICE)] == [f"fact number {n}" for n in (1, 2, 3)]
    again, none = await memory.add(ALICE, "FACT   number 3")  # the same fact: kept once
    assert again.id == fact.id and none == []
    # A per-source limit (what extraction keeps) drops only that source's oldest.
    _, dropped = await memory.add(ALICE, "extracted one", source="extracted", limit=1)
    _, dropped = await memory.add(ALICE, "extracted two", source="extracted", limit=1)
    assert [d.text for d in dropped] == ["extracted one"]


async def test_search_ranks_by_words_and_sees_another_process_writes() -> None:
    records = InMemoryStore()
    here, there = MemoryStore(records), MemoryStore(records)  # two replicas, one store
    await here.add(ALICE, "The deploy key lives in the vault under ops/deploy.")
    await here.add(ALICE, "Alice walks her dog at seven.")
    assert (await here.search(ALICE, "where is the deploy key"))[0].fact.text.startswith(
        "The deploy key"
    )
    await there.add(ALICE, "The staging deploy uses the blue cluster.")
    found = [h.fact.text for h in await here.search(ALICE, "staging cluster")]
    assert found[0] == "The staging deploy uses the blue cluster."
    assert await here.search(ALICE, "nothing matches zebra") == []


class HashingEmbedder:
    """A small deterministic embedder for tests: words hashed into 64 buckets, with a
    synonym table, so a vector can find what no word of the query matches."""

    SYNONYMS = {"automobile": "car", "vehicle": "car", "feline": "cat", "kitty": "cat"}

    def __init__(self, dimensions: int = 64) -> None:
        self._dimensions = dimensions
        self.fitted: list[int] = []

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def fit(self, corpus: Sequence[str]) -> None:
        self.fitted.append(len(corpus))

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self._dimensions
        for word in text.casefold().replace(".", " ").split():
            word = self.SYNONYMS.get(word, word)
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self._dimensions] += 1.0
        return vector

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    async def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


class RagStandIn:
    """Defines koboi-rag's hook (as plugin 'rag') and registers the hashing embedder."""

    class Specs:
        @hookspec
        def koboi_rag_register_embedders(self, register: Any) -> None:
            """Add embedders (koboi-rag's hook)."""

    def __init__(self) -> None:
        self.made: list[HashingEmbedder] = []

    @hookimpl
    def koboi_register_hookspecs(self, register: Any) -> None:
        register(self.Specs)

    @hookimpl
    def koboi_rag_register_embedders(self, register: Any) -> None:
        def factory(options: dict[str, Any]) -> HashingEmbedder:
            made = HashingEmbedder(int(options.get("dimensions", 64)))
            self.made.append(made)
            return made

        register("hashing", factory, description="Hashed words (tests).")


def rag_host() -> tuple[PluginHost, RagStandIn]:
    host = PluginHost(load_entry_points=False, strict=True)
    rag = RagStandIn()
    host.add_plugin(rag, "rag", dist="koboi-rag-stand-in")
    return host, rag


async def test_vectors_come_from_the_embedder_the_host_finds() -> None:
    host, rag = rag_host()
    embedder = embedder_named(host, "hashing", {"dimensions": 32})
    assert embedder.dimensions == 32 and rag.made == [embedder]
    memory = MemoryStore(InMemoryStore(), embedder=embedder)
    await memory.add(ALICE, "Alice drives a red car to work.")
    await memory.add(ALICE, "Alice has a grey cat named Ash.")
    await memory.add(ALICE, "Alice's office is on the third floor.")
    # No word of the query is in the fact: words alone find nothing, the vectors do.
    lexical = MemoryStore(memory.records)
    assert await lexical.search(ALICE, "which automobile") == []
    hits = await memory.search(ALICE, "which automobile", k=1)
    assert [h.fact.text for h in hits] == ["Alice drives a red car to work."]
    assert (await memory.search(ALICE, "a feline", k=1))[0].fact.text.startswith("Alice has a grey")
    # Fitted once, on the corpus it first indexed; a new fact is embedded, not refitted.
    await memory.add(ALICE, "Alice's kitty sleeps all day.")
    assert (await memory.search(ALICE, "kitty", k=1))[
        0
    ].fact.text == "Alice's kitty sleeps all day."
    assert embedder.fitted == [3]  # type: ignore[attr-defined]
    assert math.isclose(hits[0].score, 1 / 61) or hits[0].score > 0


def test_an_embedder_without_koboi_rag_or_unknown_is_a_clear_error() -> None:
    bare = PluginHost(load_entry_points=False, strict=True)
    with pytest.raises(
        KoboiError, match=r"no installed plugin provides embedders \(install koboi-rag\)"
    ):
        embedder_named(bare, "hashing", {})
    host, _ = rag_host()
    with pytest.raises(KoboiError, match=r"unknown embedder 'minilm' \(installed: hashing\)"):
        embedder_named(host, "minilm", {})
