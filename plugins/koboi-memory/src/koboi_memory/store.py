"""Facts kept in the store's keyed records, per principal and agent.

Why keyed records rather than tables of our own: the capability is the store
contract every durable store already passes (SQLite, PostgreSQL, the in-memory
store, and any third party's), it needs no migration in another distribution's
schema, and it is shared by every process using the store, so several ``koboi
serve`` replicas see the same memory. Search is done here, over an index kept in
the process per scope and validated on every search by one read of the scope's
version record: a write (by any process) puts a new random version after the
fact itself, so a reader that sees the version it indexed has seen every fact
written before it.

Scopes: every key starts with the agent's name and the principal, each
percent-encoded (so no name can be a prefix of another's keys): what one user
saved is never listed, searched or forgotten for another.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from koboi.errors import KoboiError
from koboi_memory import search

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from koboi.store import KeyedRecords
    from koboi_memory.embedders import Embedder

FACT = "memory.fact"
VERSION = "memory.version"
LOCAL = "-"


@dataclass(frozen=True)
class Scope:
    """Whose memory: an agent and a principal (``-``: a local run without one)."""

    agent: str
    owner: str | None

    @property
    def key(self) -> str:
        return f"{quote(self.agent, safe='')}|{quote(self.owner or LOCAL, safe='')}|"


@dataclass
class Fact:
    id: str
    text: str
    source: str = "tool"
    core: bool = False
    session: str | None = None
    created_at: float = 0.0

    def data(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "source": self.source,
            "core": self.core,
            "session": self.session,
            "created_at": self.created_at,
        }

    @classmethod
    def of(cls, data: dict[str, Any]) -> Fact:
        return cls(
            id=str(data["id"]),
            text=str(data["text"]),
            source=str(data.get("source", "tool")),
            core=bool(data.get("core", False)),
            session=data.get("session"),
            created_at=float(data.get("created_at", 0.0)),
        )


@dataclass
class Hit:
    fact: Fact
    score: float


def fact_id(*parts: object) -> str:
    """A fact id derived from where it was made, so storing it again is harmless."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:16]


@dataclass
class _Index:
    version: str
    facts: dict[str, Fact]
    lexical: search.LexicalIndex
    ids: list[str] = field(default_factory=list)
    vectors: npt.NDArray[np.float32] | None = None


class MemoryStore:
    """Facts of every scope, in a store with keyed records."""

    def __init__(
        self,
        records: KeyedRecords,
        *,
        max_facts: int = 1000,
        max_fact_chars: int = 500,
        embedder: Embedder | None = None,
    ) -> None:
        self.records = records
        self.max_facts = max_facts
        self.max_fact_chars = max_fact_chars
        self.embedder = embedder
        self._indexes: dict[str, _Index] = {}
        self._fitted = False

    # -- writing ----------------------------------------------------------------------

    async def add(
        self,
        scope: Scope,
        text: str,
        *,
        source: str = "tool",
        core: bool = False,
        session: str | None = None,
        id: str | None = None,
        limit: int | None = None,
    ) -> tuple[Fact, list[Fact]]:
        """Store a fact; return it and the facts dropped to stay within the limits
        (``limit``: the most facts of this ``source``; the scope's ``max_facts`` always)."""
        text = " ".join(text.split())
        if not text:
            raise KoboiError("a fact needs some text")
        if len(text) > self.max_fact_chars:
            raise KoboiError(
                f"the fact is {len(text)} characters long; memory keeps facts of at most "
                f"{self.max_fact_chars} (memory.max_fact_chars): store a shorter one"
            )
        facts = await self.facts(scope)
        same = next((f for f in facts if f.text.casefold() == text.casefold()), None)
        if same is not None:
            return same, []
        fact = Fact(
            id=id or fact_id(scope.key, text),
            text=text,
            source=source,
            core=core,
            session=session,
            created_at=time.time(),
        )
        dropped: list[Fact] = []
        oldest_first = sorted(facts, key=lambda f: (f.created_at, f.id))
        if limit is not None:
            of_source = [f for f in oldest_first if f.source == source]
            dropped.extend(of_source[: max(0, len(of_source) + 1 - limit)])
        remaining = [f for f in oldest_first if f not in dropped]
        dropped.extend(remaining[: max(0, len(remaining) + 1 - self.max_facts)])
        for old in dropped:
            await self.records.record_delete(FACT, scope.key + old.id)
        await self.records.record_put(FACT, scope.key + fact.id, fact.data())
        await self._touch(scope)
        return fact, dropped

    async def forget(self, scope: Scope, ids: Sequence[str]) -> list[str]:
        """Delete facts by id; return the ids that were there."""
        gone = [i for i in ids if await self.records.record_delete(FACT, scope.key + i)]
        if gone:
            await self._touch(scope)
        return gone

    async def _touch(self, scope: Scope) -> None:
        # Written after the facts: see the module docstring.
        await self.records.record_put(VERSION, scope.key, {"version": uuid.uuid4().hex})

    # -- reading ----------------------------------------------------------------------

    async def facts(self, scope: Scope) -> list[Fact]:
        """Every fact of the scope, oldest first."""
        rows = await self.records.record_list(FACT, prefix=scope.key)
        return sorted((Fact.of(data) for _, data in rows), key=lambda f: (f.created_at, f.id))

    async def core(self, scope: Scope) -> list[Fact]:
        return [f for f in (await self._index(scope)).facts.values() if f.core]

    async def search(
        self, scope: Scope, query: str, *, k: int = 5, min_score: float = 0.0
    ) -> list[Hit]:
        """The ``k`` facts that best match ``query``: BM25, fused with the embedder's cosine
        ranking when there is one (``min_score`` applies to the cosine then, else to BM25)."""
        index = await self._index(scope)
        if not index.facts:
            return []
        lexical = {d: s for d, s in index.lexical.scores(query).items() if s > 0}
        if self.embedder is None or index.vectors is None:
            kept = {d: s for d, s in lexical.items() if s >= min_score}
            return [Hit(index.facts[d], kept[d]) for d in search.top(kept, k)]
        cosines = search.cosine_scores(index.vectors, await self.embedder.embed_query(query))
        semantic = {index.ids[i]: float(c) for i, c in enumerate(cosines) if float(c) >= min_score}
        rankings = [search.top(lexical, 50), search.top(semantic, 50)]
        return [Hit(index.facts[d], score) for d, score in search.fuse(rankings)[:k]]

    async def _index(self, scope: Scope) -> _Index:
        version_record = await self.records.record_get(VERSION, scope.key)
        version = str(version_record["version"]) if version_record else ""
        index = self._indexes.get(scope.key)
        if index is not None and index.version == version:
            return index
        facts = {f.id: f for f in await self.facts(scope)}
        fresh = _Index(version=version, facts=facts, lexical=search.LexicalIndex())
        for fact in facts.values():
            fresh.lexical.add(fact.id, fact.text)
        if self.embedder is not None and facts:
            await self._embed(fresh, index)
        self._indexes[scope.key] = fresh
        return fresh

    async def _embed(self, fresh: _Index, previous: _Index | None) -> None:
        """Vectors of the scope's facts: those already embedded are reused, the new ones
        embedded (an embedder that learns its space, such as LSA, learns it once, from
        the first corpus it is given)."""
        import numpy as np

        assert self.embedder is not None
        known: dict[str, npt.NDArray[np.float32]] = {}
        if previous is not None and previous.vectors is not None:
            known = {d: previous.vectors[i] for i, d in enumerate(previous.ids)}
        ids = sorted(fresh.facts)
        if not self._fitted:
            await self.embedder.fit([fresh.facts[d].text for d in ids])
            self._fitted = True
        missing = [d for d in ids if d not in known]
        if missing:
            vectors = await self.embedder.embed_documents([fresh.facts[d].text for d in missing])
            for d, vector in zip(missing, vectors, strict=True):
                row = np.asarray(vector, dtype=np.float32)
                norm = float(np.linalg.norm(row))
                known[d] = row / norm if norm else row
        fresh.ids = ids
        fresh.vectors = np.stack([known[d] for d in ids]).astype(np.float32)
