"""Document sources: what ``rag.documents`` entries stand for.

koboi-rag's own: ``files`` (a path, a directory read recursively, or a glob,
relative to the config's directory) and ``http`` (an ``http://``/``https://`` URL,
fetched through koboi-http's SSRF guard: the host's addresses are checked and
pinned, redirects are checked hop by hop, the body is read under the size cap).
Other plugins add sources through ``koboi_rag_register_sources`` (koboi-rag-s3
adds ``s3://``).
"""

from __future__ import annotations

import glob as globbing
import mimetypes
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from koboi.errors import KoboiError
from koboi_rag.hookspecs import REGISTER_SOURCES, ParseError, Source, SourceDocument

if TYPE_CHECKING:
    from koboi.plugins import PluginHost
    from koboi_rag.config import RagSettings


@dataclass
class SourceContext:
    """What a source factory is given besides its entry."""

    base_dir: Path
    settings: RagSettings
    #: Largest document read, in bytes (``rag.max_document_size_mb``).
    max_bytes: int
    #: For tests: a resolver for the SSRF guard (host -> addresses) and a transport.
    extras: dict[str, Any] = field(default_factory=dict)


def entry_label(entry: str | Mapping[str, Any]) -> str:
    """How an entry is named in the index and in messages."""
    if isinstance(entry, str):
        return entry
    label = entry.get("label") or entry.get("url") or entry.get("path")
    if label:
        return str(label)
    import json

    return json.dumps(dict(entry), sort_keys=True, default=str)


class FileSource:
    """A file, a directory (recursive; hidden names skipped) or a glob."""

    def __init__(self, pattern: str, context: SourceContext, label: str | None = None) -> None:
        self.pattern = pattern
        self.context = context
        self.label = label or pattern
        self.complete = False
        self.matched = 0

    def describe(self) -> str:
        return self.label

    def _paths(self) -> list[Path]:
        base = self.context.base_dir
        expanded = os.path.expanduser(self.pattern)
        target = Path(expanded) if os.path.isabs(expanded) else base / expanded
        if any(ch in self.pattern for ch in "*?["):
            found = [Path(p) for p in globbing.glob(str(target), recursive=True)]
            return sorted(p for p in found if p.is_file())
        if target.is_dir():
            out: list[Path] = []
            for root, dirs, files in os.walk(target):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                out.extend(Path(root) / f for f in sorted(files) if not f.startswith("."))
            return out
        if target.is_file():
            return [target]
        return []

    def _key(self, path: Path) -> str:
        # Relative to the config's directory (".." included): the same on every machine
        # that has the config and its documents side by side.
        relative = os.path.relpath(path.resolve(), self.context.base_dir.resolve())
        return Path(relative).as_posix()

    async def documents(self) -> AsyncIterator[SourceDocument]:
        paths = await anyio.to_thread.run_sync(self._paths)
        for path in paths:
            try:
                stat = path.stat()
            except OSError:
                continue  # vanished between listing and reading: not a document now
            self.matched += 1
            media_type = mimetypes.guess_type(path.name)[0] or ""
            yield SourceDocument(
                key=self._key(path),
                read=_reader(path),
                size=stat.st_size,
                media_type=media_type,
                version=f"{stat.st_mtime_ns}:{stat.st_size}",
                metadata={"path": self._key(path)},
            )
        self.complete = True


def _reader(path: Path) -> Any:
    async def read() -> bytes:
        try:
            return await anyio.Path(path).read_bytes()
        except OSError as exc:
            raise ParseError(f"cannot read {path.name}: {exc.strerror or exc}") from None

    return read


class HttpSource:
    """One http(s) URL, fetched through the SSRF guard."""

    def __init__(self, url: str, context: SourceContext) -> None:
        self.url = url
        self.context = context
        self.complete = False

    def describe(self) -> str:
        return self.url

    async def documents(self) -> AsyncIterator[SourceDocument]:
        async def read() -> tuple[bytes, str]:
            from koboi_rag.fetch import fetch_document

            return await fetch_document(self.url, self.context)

        yield SourceDocument(key=self.url, read=read, media_type="", metadata={"url": self.url})
        self.complete = True


def create_files(entry: Any, context: SourceContext) -> Source:
    if isinstance(entry, str):
        return FileSource(entry, context)
    path = entry.get("path")
    if not isinstance(path, str) or not path:
        raise KoboiError("rag.documents: a files entry needs 'path' (a file, directory or glob)")
    return FileSource(path, context, label=entry_label(entry))


def create_http(entry: Any, context: SourceContext) -> Source:
    url = entry if isinstance(entry, str) else entry.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise KoboiError("rag.documents: an http entry needs 'url' (http:// or https://)")
    return HttpSource(url, context)


def source_for(entry: str | Mapping[str, Any], context: SourceContext, host: PluginHost) -> Source:
    """The source an entry names (by URL scheme, or ``source:`` in a mapping)."""
    registry = host.collect(REGISTER_SOURCES, kind="document source")
    if isinstance(entry, Mapping):
        name = str(entry.get("source", "files" if "path" in entry else ""))
        found = registry.get(name)
        if found is None:
            raise KoboiError(
                f"rag.documents: no installed plugin provides the source {name!r} "
                f"(installed: {', '.join(sorted(registry.names()))}"
                + ("; koboi-rag-s3 provides 's3'" if name == "s3" else "")
                + ")"
            )
        return found.target(entry, context)  # type: ignore[no-any-return]
    scheme = entry.split("://", 1)[0].lower() if "://" in entry else ""
    if scheme:
        for item in registry:
            if scheme in tuple(item.extra.get("schemes", ())):
                return item.target(entry, context)  # type: ignore[no-any-return]
        hint = " (install koboi-rag-s3)" if scheme == "s3" else ""
        raise KoboiError(f"rag.documents: no installed source reads {scheme}:// URLs{hint}")
    files = registry.get("files")
    assert files is not None, "koboi-rag registers the files source itself"
    return files.target(entry, context)  # type: ignore[no-any-return]
