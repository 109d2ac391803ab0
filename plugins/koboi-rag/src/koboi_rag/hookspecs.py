"""The hooks koboi-rag defines for other plugins: embedders, parsers and document sources.

koboi-rag (plugin id ``rag``) publishes them through the kernel's
``koboi_register_hookspecs``, so they live in its namespace, ``koboi_rag_...``.
A plugin implements one like any kernel hook (``from koboi import hookimpl``);
when koboi-rag is not installed the implementation is never called, so a plugin
can offer an embedder (koboi-embed-minilm), parsers (koboi-rag-parsers) or a
source (koboi-rag-s3) without depending on koboi-rag.

This module imports nothing but the hook marker and typing: the kernel imports
it while loading plugins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from koboi.hookspecs import hookspec

#: The hooks, by name (what ``host.collect`` is given).
REGISTER_EMBEDDERS = "koboi_rag_register_embedders"
REGISTER_PARSERS = "koboi_rag_register_parsers"
REGISTER_SOURCES = "koboi_rag_register_sources"


# -- embedders ------------------------------------------------------------------------


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. Made by a factory from its options in the config.

    ``fit(corpus)`` is awaited once before the first ``embed_documents`` of an
    index with the texts of the collection: an embedder that learns its space
    from the collection (LSA) learns it there; a pretrained model does nothing.
    ``dimensions`` is valid after ``fit``. Vectors need not be normalised (the
    index normalises them); every vector of one embedder has ``dimensions``
    numbers.
    """

    @property
    def dimensions(self) -> int: ...

    async def fit(self, corpus: Sequence[str]) -> None: ...

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...


@runtime_checkable
class FittedEmbedder(Embedder, Protocol):
    """An embedder whose learned space can be kept and loaded again (an addition to
    :class:`Embedder`, optional): koboi-rag keeps the state in the index, so that
    documents added later are embedded in the same space and a query after a restart
    is embedded as the documents were, without fitting again.

    ``identity`` names the space: two embedders with equal identities give the same
    vectors for the same text (for LSA, a digest of the fitted state; for a
    pretrained model, its name and version). Vectors made under another identity are
    made again.
    """

    @property
    def identity(self) -> str: ...

    def export_state(self) -> bytes: ...

    def import_state(self, state: bytes) -> None: ...


class RegisterEmbedder(Protocol):
    """``register(name, factory, *, description="")`` of :func:`koboi_rag_register_embedders`.

    ``factory(options)`` receives the embedder's options from the config (the keys
    of ``rag.embedder`` besides ``name``, as a plain mapping) and returns an
    :class:`Embedder`.
    """

    def __call__(
        self, name: str, factory: Callable[[Mapping[str, Any]], Embedder], *, description: str = ""
    ) -> None: ...


@hookspec
def koboi_rag_register_embedders(register: RegisterEmbedder) -> None:
    """Provide embedders that a config selects by name with ``rag.embedder``.

    :param register: ``register(name, factory, *, description="")``, once per
        embedder. ``name`` is what a config writes (``rag.embedder: lsa`` or
        ``rag.embedder: {name: lsa, dimensions: 200}``); it must be unique among
        the installed plugins' embedders (a name registered by two plugins is an
        error naming both). ``factory(options)`` gets the other keys of
        ``rag.embedder`` as a mapping and returns an :class:`Embedder`; it runs
        when an index is opened, so import heavy libraries inside it, and raise
        ``koboi.errors.KoboiError`` with what to fix for bad options.
        ``description`` is one line for listings.

    Called at most once per plugin host, the first time an index needs an
    embedder (never while the CLI starts). Other plugins that need embeddings
    (long-term memory) use the same registry (:func:`koboi_rag.embedders.embedder_from`).
    Sync only.
    """


# -- parsers --------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedSection:
    """A stretch of a document's text with what a chunk of it should carry.

    ``heading`` is the section's title path (``"Install > Linux"``), ``page`` the
    page number of a paged format; ``metadata`` anything else to keep on the chunks.
    """

    text: str
    heading: str = ""
    page: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedDocument:
    """What a parser makes of a document: its text in sections, a title, metadata."""

    sections: Sequence[ParsedSection]
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


class ParseError(Exception):
    """A parser cannot read this document: the message says why, in one line
    (``"not a PDF file (no %PDF header)"``). Ingestion reports it for the document
    and goes on with the others."""


@runtime_checkable
class Parser(Protocol):
    """Turns a document's bytes into text. ``parse`` may be sync or async."""

    def parse(self, data: bytes, *, name: str, media_type: str = "") -> ParsedDocument: ...


class RegisterParser(Protocol):
    """``register(name, parser, *, suffixes=(), media_types=(), priority=0, description="")``."""

    def __call__(
        self,
        name: str,
        parser: Parser,
        *,
        suffixes: Sequence[str] = (),
        media_types: Sequence[str] = (),
        priority: int = 0,
        description: str = "",
    ) -> None: ...


@hookspec
def koboi_rag_register_parsers(register: RegisterParser) -> None:
    """Provide parsers that turn documents (files, downloads, objects) into text.

    :param register: ``register(name, parser, *, suffixes=(), media_types=(),
        priority=0, description="")``. ``parser`` is a :class:`Parser`.
        ``suffixes`` (``".pdf"``) and ``media_types`` (``"application/pdf"``) say
        which documents it reads; when several parsers claim a document the one
        with the highest ``priority`` wins (koboi-rag's own plain-text parser has
        priority 0), and a config may name one outright (``rag.parsers: {".txt":
        "text"}``). ``name`` must be unique among every installed plugin's parsers.

    A parser that cannot read a document raises :class:`ParseError` with one line
    saying why; ingestion reports it for that document and goes on. Called at most
    once per plugin host, when ingestion first needs a parser. Sync only.
    """


# -- sources --------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceDocument:
    """One document a source found: ``key`` identifies it in the index (a path, a URL,
    ``s3://bucket/key``), ``read()`` (sync or async) returns its bytes, or its bytes
    and media type as a pair when reading tells the type (an HTTP answer), or raises
    :class:`ParseError` with why not, ``size`` (bytes, when known before reading) lets ingestion skip a
    document over ``rag.max_document_size_mb`` without reading it, and ``version``
    (a modification time, an ETag), when given, lets ingestion skip reading a document
    whose version it already indexed."""

    key: str
    read: Callable[[], Any]
    size: int | None = None
    media_type: str = ""
    version: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Source(Protocol):
    """Lists the documents of one ``rag.documents`` entry.

    ``documents()`` yields :class:`SourceDocument`s. ``complete`` is set True by
    the source once it listed everything it covers: only then does ingestion remove
    from the index the documents of this source that were not listed (a listing
    that failed half-way deletes nothing). ``describe()`` is what messages show.
    """

    complete: bool

    def documents(self) -> AsyncIterator[SourceDocument]: ...

    def describe(self) -> str: ...


class RegisterSource(Protocol):
    """``register(name, factory, *, schemes=(), description="")``: ``factory(entry, context)``
    gets one ``rag.documents`` entry (a URL string or a mapping) and a
    :class:`koboi_rag.sources.SourceContext`, and returns a :class:`Source`."""

    def __call__(
        self,
        name: str,
        factory: Callable[[Any, Any], Source],
        *,
        schemes: Sequence[str] = (),
        description: str = "",
    ) -> None: ...


@hookspec
def koboi_rag_register_sources(register: RegisterSource) -> None:
    """Provide document sources for ``rag.documents`` entries.

    :param register: ``register(name, factory, *, schemes=(), description="")``.
        An entry written as a URL whose scheme is in ``schemes`` (``s3://bucket/docs/``)
        or as a mapping with ``source: <name>`` goes to this source's
        ``factory(entry, context)``, which returns a :class:`Source`. koboi-rag
        itself registers ``files`` (paths, directories and globs) and ``http``
        (``http://``/``https://``, through the SSRF guard of koboi-http).

    Called at most once per plugin host, when ingestion first needs the sources.
    Sync only.
    """


__all__ = [
    "REGISTER_EMBEDDERS",
    "REGISTER_PARSERS",
    "REGISTER_SOURCES",
    "Embedder",
    "FittedEmbedder",
    "ParseError",
    "ParsedDocument",
    "ParsedSection",
    "Parser",
    "RegisterEmbedder",
    "RegisterParser",
    "RegisterSource",
    "Source",
    "SourceDocument",
    "koboi_rag_register_embedders",
    "koboi_rag_register_parsers",
    "koboi_rag_register_sources",
]
