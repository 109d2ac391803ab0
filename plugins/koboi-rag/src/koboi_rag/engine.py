"""The RAG engine of one config: ingest documents into its index, search it.

:meth:`RagEngine.ingest` lists every ``rag.documents`` entry, skips what did not
change (same version, or same content hash), parses, chunks and indexes the rest
one document per transaction, removes what a complete listing no longer has,
then fits the embedder when it learns from the collection (LSA) and embeds the
chunks that have no vector in the current space, batch by batch. Every step is
committed as it ends: a process killed at any point is resumed by running
ingestion again, which redoes only what was not committed.

:meth:`RagEngine.search` runs the configured pipeline: an optional query rewrite
and HyDE (side calls of the agent's model), the retriever, an optional reranker,
the score floor and ``top_k``; each result carries its citation (source, position
in the document, character span, heading, page, score).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import numpy as np

from koboi.errors import KoboiError
from koboi.logs import get_logger
from koboi_rag.analysis import Analyzer, analyzer_for
from koboi_rag.chunking import chunk_document
from koboi_rag.filters import compile_filter, merge_filters
from koboi_rag.hookspecs import ParseError
from koboi_rag.index import ChunkRecord, DocumentRecord, IndexStore
from koboi_rag.retrieval import (
    Memory,
    Ranking,
    bm25_ranking,
    filter_mask,
    fuse,
    keyword_ranking,
    semantic_ranking,
)

if TYPE_CHECKING:
    from koboi.plugins import PluginHost
    from koboi.store import Store
    from koboi_rag.config import RagSettings
    from koboi_rag.hookspecs import Embedder

log = get_logger("koboi_rag.engine")

#: One process's in-memory view of every index it searched.
MEMORY = Memory()
_EMBED_BATCH = 256


class EmptyCollection(KoboiError):
    """Nothing to search: the collection has no documents."""


@dataclass
class Progress:
    """One step of ingestion, for whoever shows progress."""

    stage: str  # "document", "skipped", "failed", "deleted", "fit", "embed", "done"
    key: str = ""
    message: str = ""
    done: int = 0
    total: int = 0


@dataclass
class IngestReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks: int = 0
    embedded: int = 0
    fitted: bool = False
    failed: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def data(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SearchResult:
    """One retrieved chunk and its citation."""

    n: int
    chunk_id: int
    source: str
    title: str
    position: int
    start: int
    end: int
    heading: str
    page: int | None
    score: float
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def citation(self) -> dict[str, Any]:
        """Where it came from, without the text (what events and evals keep)."""
        cited: dict[str, Any] = {
            "n": self.n,
            "source": self.source,
            "position": self.position,
            "chars": [self.start, self.end],
            "score": round(self.score, 6),
        }
        if self.title:
            cited["title"] = self.title
        if self.heading:
            cited["heading"] = self.heading
        if self.page is not None:
            cited["page"] = self.page
        return cited

    def data(self) -> dict[str, Any]:
        return {**self.citation(), "text": self.text}

    def label(self) -> str:
        where = [self.source]
        if self.heading:
            where.append(f"§ {self.heading}")
        if self.page is not None:
            where.append(f"p. {self.page}")
        where.append(f"chunk {self.position}")
        return ", ".join(where)


@dataclass
class SearchOutcome:
    query: str
    searched: str
    retriever: str
    results: list[SearchResult]
    notes: list[str] = field(default_factory=list)
    hyde: bool = False

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": self.query,
            "retriever": self.retriever,
            "results": [r.data() for r in self.results],
        }
        if self.searched != self.query:
            out["rewritten"] = self.searched
        if self.hyde:
            out["hyde"] = True
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def citations(self) -> list[dict[str, Any]]:
        return [r.citation() for r in self.results]


def content_signature(settings: RagSettings, analyzer: Analyzer) -> str:
    """What, besides a document's bytes, decides its chunks: a change re-indexes it."""
    parts = [
        settings.chunker,
        str(settings.chunk_size),
        str(settings.chunk_overlap),
        settings.chunk_unit,
        analyzer.describe(),
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


def _unit_vectors(vectors: Sequence[Sequence[float]]) -> list[bytes]:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        raise KoboiError("the embedder returned vectors of different lengths")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return [row.tobytes() for row in (matrix / norms).astype(np.float32)]


class RagEngine:
    """Ingestion and search for one config's ``rag`` section over one index."""

    def __init__(
        self,
        settings: RagSettings,
        index: IndexStore,
        *,
        host: PluginHost,
        base_dir: Path,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        self.index = index
        self.host = host
        self.base_dir = base_dir
        self.collection = settings.collection
        self.analyzer = analyzer_for(settings)
        self.extras = dict(extras or {})
        self._embedder: Embedder | None = None
        self._space = ""
        self._embedder_generation = -2
        self._filter = compile_filter(settings.filter, "rag.filter") if settings.filter else None
        for unused in settings.unused_keys():
            log.info("rag: %s is accepted for compatibility and not used", unused)

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def for_store(
        cls,
        settings: RagSettings,
        store: Store | None,
        *,
        host: PluginHost,
        base_dir: Path,
        extras: Mapping[str, Any] | None = None,
    ) -> RagEngine:
        from koboi_rag.location import index_for_store, index_for_url

        if settings.index != "store":
            index = index_for_url(settings.index, base_dir)
        elif store is None:
            raise KoboiError("rag.index is 'store' but there is no store to keep the index in")
        else:
            index = index_for_store(store)
        return cls(settings, index, host=host, base_dir=base_dir, extras=extras)

    async def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(function, *args)

    # -- the embedder -------------------------------------------------------------------

    @property
    def uses_vectors(self) -> bool:
        return self.settings.retriever in ("semantic", "hybrid")

    def _make_embedder(self) -> Embedder:
        if self._embedder is None:
            from koboi_rag.embedders import embedder_from

            spec = self.settings.embedder.model_dump()
            options = dict(spec)
            # The LSA and hashing embedders analyse text like the index does, unless told.
            if options.get("name") in ("lsa", "hashing"):
                options.setdefault("language", self.settings.language)
            self._embedder = embedder_from(options, self.host)
        return self._embedder

    def _space_of(self, embedder: Embedder) -> str:
        identity = getattr(embedder, "identity", "")
        if identity:
            return str(identity)
        options = self.settings.embedder.model_dump()
        return "embedder:" + json.dumps(options, sort_keys=True, default=str)

    async def _load_embedder(self) -> tuple[Embedder, str]:
        """The embedder with the collection's fitted state loaded; its space ('' when the
        collection has no fitted state and the embedder needs one)."""
        embedder = self._make_embedder()
        generation = await self._call(self.index.generation, self.collection)
        if generation == self._embedder_generation and self._space:
            return embedder, self._space  # nothing changed: no need to read the state again
        info = await self._call(self.index.collection, self.collection)
        if info is None:
            return embedder, ""
        space = ""
        if info.embedder:  # fitted before: load what it learned, if it learns
            importer = getattr(embedder, "import_state", None)
            if info.state and importer is not None:
                await self._call(importer, bytes(info.state))
            space = self._space_of(embedder)
            if space != info.embedder:
                space = ""  # another embedder (or other options) than the vectors': fit again
        self._space, self._embedder_generation = space, info.generation
        return embedder, space

    # -- ingestion ----------------------------------------------------------------------

    async def ingest(
        self, progress: Callable[[Progress], None] | None = None, *, refit: bool = False
    ) -> IngestReport:
        from koboi_rag.parsing import Parsers, parse_with
        from koboi_rag.sources import SourceContext, entry_label, source_for

        report = IngestReport()
        began = time.perf_counter()
        say = progress or (lambda _: None)
        analyzer_name = self.analyzer.describe()
        info = await self._call(self.index.collection, self.collection)
        if info is not None and info.analyzer != analyzer_name:
            report.notes.append(
                f"the analyser changed ({info.analyzer} -> {analyzer_name}): every document is "
                "indexed again"
            )
            await self._call(self.index.drop_collection, self.collection)
            info = None
        if info is None:
            await self._call(self.index.create_collection, self.collection, analyzer_name)
        if not self.settings.documents:
            report.notes.append("rag.documents lists nothing to index")
        parsers = Parsers(self.host, self.settings.parsers)
        signature = content_signature(self.settings, self.analyzer)
        context = SourceContext(
            base_dir=self.base_dir,
            settings=self.settings,
            max_bytes=int(self.settings.max_document_size_mb * 1_000_000),
            extras=self.extras,
        )
        known = await self._call(self.index.documents, self.collection)
        for entry in self.settings.documents:
            label = entry_label(entry)
            try:
                source = source_for(entry, context, self.host)
                listed: set[str] = set()
                async for document in source.documents():
                    listed.add(document.key)
                    await self._ingest_one(
                        document, label, known, parsers, parse_with, signature, context, report, say
                    )
            except KoboiError as exc:
                report.failed.append({"document": label, "error": str(exc)})
                say(Progress("failed", label, str(exc)))
                continue
            if not listed:
                report.notes.append(f"{label}: matches no document")
            if source.complete:
                gone = [k for k, (_, _, src) in known.items() if src == label and k not in listed]
                if gone:
                    report.deleted += await self._call(
                        self.index.delete_documents, self.collection, gone
                    )
                    for key in gone:
                        say(Progress("deleted", key, "no longer in its source"))
        total = await self._call(self.index.stats, self.collection)
        if total["documents"] == 0:
            report.notes.append(
                "the collection is empty: no document of rag.documents could be indexed"
            )
        elif self.uses_vectors:
            await self._embed_all(report, say, refit=refit)
        report.seconds = round(time.perf_counter() - began, 3)
        say(Progress("done", message=_summary(report)))
        return report

    async def _ingest_one(
        self,
        document: Any,
        label: str,
        known: dict[str, tuple[str, str, str]],
        parsers: Any,
        parse_with: Any,
        signature: str,
        context: Any,
        report: IngestReport,
        say: Callable[[Progress], None],
    ) -> None:
        key = document.key
        previous = known.get(key)
        if (
            previous is not None
            and document.version
            and previous[1] == document.version
            and previous[0].endswith(":" + signature)
            and previous[2] == label
        ):
            report.unchanged += 1
            say(Progress("skipped", key, "unchanged"))
            return
        if document.size is not None and document.size > context.max_bytes:
            self._fail(report, say, key, _too_large(document.size, context.max_bytes))
            return
        try:
            got = document.read()
            if inspect.isawaitable(got):
                got = await got
            data, media_type = got if isinstance(got, tuple) else (got, document.media_type)
            if len(data) > context.max_bytes:
                raise ParseError(_too_large(len(data), context.max_bytes))
            content_hash = hashlib.sha256(data).hexdigest() + ":" + signature
            if previous is not None and previous[0] == content_hash and previous[2] == label:
                # Same bytes (a touched file): only its version moves, nothing is re-embedded.
                report.unchanged += 1
                say(Progress("skipped", key, "same content"))
                await self._call(self._touch, key, previous, document.version)
                return
            parser = parsers.choose(key, media_type)
            if parser is None:
                from koboi_rag.parsing import PARSERS_HINT

                raise ParseError(
                    f"no parser for this kind of document ({media_type or 'unknown type'}); "
                    f"{PARSERS_HINT}"
                )
            parsed = await parse_with(parser, data, key, media_type)
        except ParseError as exc:
            self._fail(report, say, key, str(exc))
            return
        chunks = chunk_document(
            parsed,
            chunker=self.settings.chunker,
            size=self.settings.chunk_size,
            overlap=self.settings.chunk_overlap,
            unit=self.settings.chunk_unit,
        )
        records = [
            ChunkRecord(
                position=c.position,
                start=c.start,
                end=c.end,
                text=c.text,
                terms=" ".join(self.analyzer.terms(c.text)),
                heading=c.heading,
                page=c.page,
                metadata=c.metadata,
            )
            for c in chunks
        ]
        metadata = {**dict(document.metadata), **dict(parsed.metadata)}
        record = DocumentRecord(
            key=key,
            source=label,
            content_hash=content_hash,
            version=document.version,
            title=parsed.title,
            metadata=metadata,
        )
        await self._call(self.index.replace_document, self.collection, record, records)
        known[key] = (content_hash, document.version, label)
        report.chunks += len(records)
        if previous is None:
            report.added += 1
        else:
            report.updated += 1
        note = f"{len(records)} chunks" if records else "no text to index"
        say(Progress("document", key, note))

    def _touch(self, key: str, previous: tuple[str, str, str], version: str) -> None:
        # Only the version changes; the chunks and vectors stay as they are.
        if not version or version == previous[1]:
            return
        self.index.set_version(self.collection, key, version)

    def _fail(
        self, report: IngestReport, say: Callable[[Progress], None], key: str, message: str
    ) -> None:
        report.failed.append({"document": key, "error": message})
        say(Progress("failed", key, message))

    async def _embed_all(
        self, report: IngestReport, say: Callable[[Progress], None], *, refit: bool
    ) -> None:
        embedder, space = await self._load_embedder()
        stats = await self._call(self.index.stats, self.collection)
        learns = _learns(embedder)
        needs_refit = getattr(embedder, "needs_refit", None)
        grown = bool(needs_refit and space and needs_refit(stats["chunks"]))
        if not space or refit or grown:
            texts = await self._call(self.index.texts, self.collection)
            say(Progress("fit", message=f"fitting the embedder on {len(texts)} chunks"))
            await embedder.fit(texts)
            state = embedder.export_state() if learns else None  # type: ignore[attr-defined]
            space = self._space_of(embedder)
            await self._call(self.index.save_embedder, self.collection, space, state)
            report.fitted = True
            if grown:
                report.notes.append(
                    "the collection outgrew the embedder's space: fitted again and every chunk "
                    "embedded again"
                )
        self._space = space
        self._embedder_generation = -2
        total = await self._call(self.index.count_unembedded, self.collection, space)
        done = 0
        while True:
            batch = await self._call(self.index.unembedded, self.collection, space, _EMBED_BATCH)
            if not batch:
                break
            vectors = await embedder.embed_documents([text for _, text in batch])
            if len(vectors) != len(batch):
                raise KoboiError(
                    f"the embedder returned {len(vectors)} vectors for {len(batch)} chunks"
                )
            blobs = _unit_vectors(vectors)
            await self._call(
                self.index.store_vectors,
                self.collection,
                space,
                [(chunk_id, blob) for (chunk_id, _), blob in zip(batch, blobs, strict=True)],
            )
            done += len(batch)
            report.embedded += len(batch)
            say(Progress("embed", done=done, total=total))

    # -- search ----------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        retriever: str | None = None,
        filter: Mapping[str, Any] | None = None,
        model: Any = None,
    ) -> SearchOutcome:
        """Search the collection. ``model`` is the run's model (``run.model`` or
        ``ctx.model``), needed for query rewriting, HyDE and the LLM reranker."""
        from koboi_rag.rerank import (
            hypothetical_answer,
            needs_model,
            rerank_hosted,
            rerank_llm,
            rewrite_query,
        )

        settings = self.settings
        query = query.strip()
        if not query:
            raise KoboiError("the search query is empty")
        top_k = top_k or settings.top_k
        retriever = retriever or settings.retriever
        notes: list[str] = []
        searched = query
        if settings.query_rewrite:
            if model is None:
                raise needs_model("rag.query_rewrite")
            searched = await rewrite_query(model, query)
        hyde_text = ""
        if settings.hyde:
            if model is None:
                raise needs_model("rag.hyde")
            hyde_text = await hypothetical_answer(model, searched)
        reranker = settings.reranker
        depth = top_k * (reranker.fetch_multiplier if reranker else 1)
        predicate = None
        if filter:
            predicate = compile_filter(merge_filters(settings.filter, filter), "filter")
        elif self._filter is not None:
            predicate = self._filter
        size = await self._call(lambda: MEMORY.get(self.index, self.collection).ids.size)
        if size == 0:
            notes.append(
                f"the collection {self.collection!r} is empty: index documents with "
                "'koboi rag ingest' (rag.documents)"
            )
            return SearchOutcome(query, searched, retriever, [], notes, hyde=bool(hyde_text))
        ranking = await self._rank(searched, hyde_text, retriever, depth, predicate)
        if reranker and ranking:
            ranking, note = await self._rerank(
                reranker, searched, ranking, top_k, model, rerank_hosted, rerank_llm
            )
            if note:
                notes.append(note)
        if settings.min_score is not None:
            ranking = [(i, s) for i, s in ranking if s >= settings.min_score]
        ranking = ranking[:top_k]
        rows = await self._call(self.index.chunks, [i for i, _ in ranking])
        results: list[SearchResult] = []
        for chunk_id, score in ranking:
            row = rows.get(chunk_id)
            if row is None:
                continue  # deleted between ranking and reading
            results.append(
                SearchResult(
                    n=len(results) + 1,
                    chunk_id=chunk_id,
                    source=row.doc_key,
                    title=row.title,
                    position=row.position,
                    start=row.start,
                    end=row.end,
                    heading=row.heading,
                    page=row.page,
                    score=score,
                    text=row.text,
                    metadata=row.metadata,
                )
            )
        return SearchOutcome(query, searched, retriever, results, notes, hyde=bool(hyde_text))

    async def _rank(
        self, query: str, hyde_text: str, retriever: str, depth: int, predicate: Any
    ) -> Ranking:
        index, collection = self.index, self.collection
        terms = self.analyzer.query_terms(query)
        if retriever in ("keyword", "bm25") and hyde_text:
            terms = terms + self.analyzer.terms(hyde_text)

        def lexical(kind: str, limit: int) -> Ranking:
            allowed = filter_mask(MEMORY, index, collection, predicate)
            if kind == "keyword":
                return keyword_ranking(MEMORY, index, collection, terms, limit, allowed)
            return bm25_ranking(MEMORY, index, collection, terms, limit, allowed)

        if retriever in ("keyword", "bm25"):
            return await self._call(lexical, retriever, depth)  # type: ignore[no-any-return]
        if retriever == "semantic":
            return await self._semantic(hyde_text or query, max(depth, 1), predicate)
        fusion = self.settings.hybrid
        candidates = max(fusion.candidates, depth)
        lexical_ranking = await self._call(lexical, fusion.lexical, candidates)
        semantic = await self._semantic(hyde_text or query, candidates, predicate)
        return fuse(
            [(lexical_ranking, fusion.lexical_weight), (semantic, fusion.semantic_weight)],
            fusion.rrf_k,
            depth,
        )

    async def _semantic(self, text: str, limit: int, predicate: Any) -> Ranking:
        embedder, space = await self._load_embedder()
        if not space:
            raise KoboiError(
                f"the index has no vectors for retriever {self.settings.retriever!r}: run "
                "'koboi rag ingest' with rag.retriever semantic or hybrid"
            )
        vector = await embedder.embed_query(text)
        index, collection = self.index, self.collection

        def rank() -> Ranking:
            allowed = filter_mask(MEMORY, index, collection, predicate)
            return semantic_ranking(MEMORY, index, collection, vector, space, limit, allowed)

        return await self._call(rank)  # type: ignore[no-any-return]

    async def _rerank(
        self,
        reranker: Any,
        query: str,
        ranking: Ranking,
        top_k: int,
        model: Any,
        rerank_hosted: Any,
        rerank_llm: Any,
    ) -> tuple[Ranking, str]:
        from koboi_rag.rerank import needs_model

        rows = await self._call(self.index.chunks, [i for i, _ in ranking])
        ids = [i for i, _ in ranking if i in rows]
        texts = [rows[i].text for i in ids]
        top_n = reranker.top_n or top_k
        try:
            if reranker.provider == "llm":
                if model is None:
                    raise needs_model("rag.rerank (llm)")
                order = await rerank_llm(model, query, texts, top_n)
            else:
                order = await rerank_hosted(reranker, query, texts, top_n)
        except KoboiError as exc:
            if not reranker.fail_open or reranker.provider == "llm":
                raise
            log.warning(
                "rag: the %s reranker failed; keeping the retriever's order: %s",
                reranker.provider,
                exc,
            )
            return ranking, f"reranker {reranker.provider} failed ({exc}); retriever order kept"
        return [(ids[i], score) for i, score in order], ""

    # -- the rest ---------------------------------------------------------------------------

    async def stats(self) -> dict[str, Any]:
        numbers = await self._call(self.index.stats, self.collection)
        info = await self._call(self.index.collection, self.collection)
        return {
            "collection": self.collection,
            "index": self.index.label,
            "lexical": self.index.lexical,
            "analyzer": info.analyzer if info else self.analyzer.describe(),
            "embedder": (info.embedder if info else "") or "",
            "retriever": self.settings.retriever,
            **numbers,
        }

    async def forget(self, sources: Sequence[str] = ()) -> int:
        """Remove documents: those of the given sources (entry labels or document keys),
        or the whole collection."""
        if not sources:
            return int(await self._call(self.index.drop_collection, self.collection))
        known = await self._call(self.index.documents, self.collection)
        gone = [k for k, (_, _, src) in known.items() if k in sources or src in sources]
        return int(await self._call(self.index.delete_documents, self.collection, gone))


def _learns(embedder: Any) -> bool:
    return callable(getattr(embedder, "export_state", None)) and callable(
        getattr(embedder, "import_state", None)
    )


def _too_large(size: int, limit: int) -> str:
    return (
        f"{size / 1e6:.1f} MB is over rag.max_document_size_mb ({limit / 1e6:g} MB); skipped "
        "without reading it (raise the limit to index it)"
    )


def _summary(report: IngestReport) -> str:
    parts = [
        f"{report.added} added",
        f"{report.updated} updated",
        f"{report.unchanged} unchanged",
        f"{report.deleted} removed",
        f"{len(report.failed)} failed",
        f"{report.chunks} chunks",
        f"{report.embedded} embedded",
    ]
    return ", ".join(parts) + f" in {report.seconds:.2f} s"
