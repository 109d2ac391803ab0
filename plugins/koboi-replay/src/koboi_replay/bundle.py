"""The bundle: one portable file (a zip archive) holding a config, and for a run its recording.

Layout (docs/replay.md, "The bundle format")::

    manifest.json        what the bundle is; versions; a SHA-256 per file; the checksum
    config.yaml          the config as written: ${VAR} references kept, literal secrets replaced
    events.jsonl         (run) the session's journal, one event per line: the expected stream
    model_calls.jsonl    (run) what each model call (the loop's, and side calls by purpose)
                         answered: served to the replayed run
    tool_results.jsonl   (run) what each tool call returned (or that it suspended the run):
                         served under --tools recorded
    approvals.jsonl      (run) what each approval decided: served to the replayed run
    audit.jsonl          (run) the session's audit records: the expected audit trail
    cache.jsonl          (run, --with-cache) response-cache entries of the session's answers

What is *served* to a replay and what is *expected* from it are kept apart on
purpose: a changed tool result in ``tool_results.jsonl`` makes the replayed
run journal something other than ``events.jsonl`` says, and the comparison
reports it.

The checksum is the SHA-256 of the manifest's canonical JSON without its
``checksum`` key; the manifest holds the SHA-256 of every other file, so one
checksum covers the whole content, the manifest's own claims included.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from koboi.store import JournalEvent
from koboi_replay.errors import BundleError

#: The bundle format this koboi-replay writes, and the newest it reads (it reads every
#: older one). 2: ``model_calls.jsonl`` holds side calls too (records with a ``purpose``
#: and the request ``key``), ``tool_results.jsonl`` calls that suspended their run
#: (``outcome: suspended``), and the manifest the recorded model's cache ``identity``.
#: A format-1 reader would serve a side call's answer to the loop, so it is refused one.
FORMAT_VERSION = 2
FORMAT_NAME = "koboi-bundle"
#: File-name ending ``koboi run`` hands to this plugin.
SUFFIX = ".koboi"
MANIFEST = "manifest.json"
CONFIG = "config.yaml"
EVENTS = "events.jsonl"
MODEL_CALLS = "model_calls.jsonl"
TOOL_RESULTS = "tool_results.jsonl"
APPROVALS = "approvals.jsonl"
AUDIT = "audit.jsonl"
CACHE = "cache.jsonl"

BundleKind = Literal["run", "workflow"]
KINDS: tuple[BundleKind, ...] = ("run", "workflow")
#: Files a bundle of each kind must have (besides the manifest).
REQUIRED: dict[str, tuple[str, ...]] = {
    "run": (CONFIG, EVENTS, MODEL_CALLS, TOOL_RESULTS, APPROVALS, AUDIT),
    "workflow": (CONFIG,),
}
OPTIONAL: dict[str, tuple[str, ...]] = {"run": (CACHE,), "workflow": ()}

#: Largest member a bundle may hold once uncompressed: refuses zip bombs before reading.
MAX_MEMBER_BYTES = 2 * 1024**3
#: Every member is stored with this time, so the same content makes the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, UTF-8 kept, NaN refused."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def jsonl(records: Iterable[Mapping[str, Any]]) -> bytes:
    """Records as JSON lines (canonical JSON, one per line)."""
    return "".join(canonical_json(r) + "\n" for r in records).encode("utf-8")


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """The checksum of a manifest: SHA-256 of its canonical JSON without ``checksum``."""
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return sha256(canonical_json(body).encode("utf-8"))


@dataclass
class Bundle:
    """A bundle in memory: its manifest and the bytes of every other file.

    Build one with :meth:`create`; after changing ``files`` call :meth:`seal`
    to recompute the digests and the checksum (what a tool that edits bundles
    on purpose does; :func:`read_bundle` refuses a bundle whose digests do
    not match its content).
    """

    manifest: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def create(cls, kind: BundleKind, files: Mapping[str, bytes], **manifest: Any) -> Bundle:
        bundle = cls(
            {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "kind": kind, **manifest},
            dict(files),
        )
        bundle.seal()
        return bundle

    # -- what it holds ---------------------------------------------------------

    @property
    def kind(self) -> BundleKind:
        kind = self.manifest.get("kind")
        if kind not in KINDS:
            raise BundleError(f"the bundle's kind {kind!r} is not one of {', '.join(KINDS)}")
        return kind  # type: ignore[no-any-return]

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or "")

    @property
    def checksum(self) -> str:
        return str(self.manifest.get("checksum", ""))

    @property
    def config_text(self) -> str:
        return self.text(CONFIG)

    def text(self, name: str) -> str:
        try:
            return self.files[name].decode("utf-8")
        except KeyError:
            raise BundleError(f"the bundle has no {name}") from None
        except UnicodeDecodeError:
            raise BundleError(f"{name} in the bundle is not UTF-8 text") from None

    def records(self, name: str) -> list[dict[str, Any]]:
        """The JSON objects of one ``.jsonl`` file (empty when the file is absent)."""
        if name not in self.files:
            return []
        found: list[dict[str, Any]] = []
        for number, line in enumerate(self.text(name).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise BundleError(f"{name}, line {number}: not JSON ({exc})") from None
            if not isinstance(value, dict):
                raise BundleError(f"{name}, line {number}: not a JSON object")
            found.append(value)
        return found

    def events(self) -> list[JournalEvent]:
        """The recorded journal (``events.jsonl``), as journal events of the recorded session."""
        session_id = str(self.manifest.get("session", {}).get("id", ""))
        events: list[JournalEvent] = []
        for index, record in enumerate(self.records(EVENTS), start=1):
            try:
                seq, kind, data = int(record["seq"]), str(record["type"]), record["data"]
            except (KeyError, TypeError, ValueError):
                raise BundleError(f"{EVENTS}, line {index}: needs seq, type and data") from None
            if seq != index or not isinstance(data, dict):
                raise BundleError(
                    f"{EVENTS}, line {index}: events must be numbered 1, 2, 3... "
                    f"with object data (found seq {seq})"
                )
            events.append(JournalEvent(session_id, seq, kind, data, float(record.get("at", 0.0))))
        return events

    # -- integrity -------------------------------------------------------------

    def seal(self) -> None:
        """Recompute every file's digest and the checksum from the current content."""
        self.manifest["files"] = {
            name: {"sha256": sha256(data), "bytes": len(data)}
            for name, data in sorted(self.files.items())
        }
        self.manifest["checksum"] = manifest_checksum(self.manifest)

    def to_bytes(self) -> bytes:
        """The zip archive: manifest first, then the files by name, with fixed timestamps."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            manifest = json.dumps(self.manifest, indent=2, sort_keys=True, ensure_ascii=False)
            archive.writestr(_member(MANIFEST), (manifest + "\n").encode("utf-8"))
            for name in sorted(self.files):
                archive.writestr(_member(name), self.files[name])
        return buffer.getvalue()

    def write(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> int:
        """Write the bundle to ``path`` atomically; return its size in bytes.

        An existing file is replaced only with ``overwrite``: nothing already
        stored is lost by mistake.
        """
        target = Path(path)
        if target.exists() and not overwrite:
            raise BundleError(f"{target} already exists; choose another name or pass --force")
        if target.is_dir():
            raise BundleError(f"{target} is a directory; give a file name such as run{SUFFIX}")
        data = self.to_bytes()
        directory = target.parent if str(target.parent) else Path(".")
        if not directory.is_dir():
            raise BundleError(f"cannot write {target}: the directory {directory} does not exist")
        handle, temporary = tempfile.mkstemp(prefix=".koboi-bundle-", dir=directory)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:  # no half-written bundle is left behind, whatever stopped it
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return len(data)


def _member(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def looks_like_bundle(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` ends in ``.koboi`` (what ``koboi run`` hands this plugin)."""
    return str(path).lower().endswith(SUFFIX)


def read_bundle(path: str | os.PathLike[str]) -> Bundle:
    """Read and verify a bundle file.

    Refused, each with a message that says why: a file that is missing or not
    a zip archive, a zip without a koboi manifest, a bundle from a newer format
    version (checked before anything else is trusted), a file listed and
    missing or present and not listed, and any digest or checksum mismatch.
    """
    source = Path(path)
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        raise BundleError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise BundleError(f"{source} is a directory, not a bundle") from None
    except OSError as exc:
        raise BundleError(f"cannot read {source}: {exc.strerror or exc}") from None
    return parse_bundle(data, str(source))


def parse_bundle(data: bytes, label: str = "the bundle") -> Bundle:
    """Verify and load a bundle from its bytes (see :func:`read_bundle`)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise BundleError(
            f"{label} is not a koboi bundle (not a zip archive); bundles are made by "
            "koboi capture and koboi export"
        ) from None
    with archive:
        members = {info.filename: info for info in archive.infolist()}
        if MANIFEST not in members:
            raise BundleError(f"{label} is not a koboi bundle (it has no {MANIFEST})")
        manifest = _load_manifest(_read_member(archive, members[MANIFEST], label), label)
        _check_version(manifest, label)
        kind = manifest.get("kind")
        if kind not in KINDS:
            raise BundleError(f"{label}: unknown bundle kind {kind!r} (known: {', '.join(KINDS)})")
        listed = manifest.get("files")
        if not isinstance(listed, dict):
            raise BundleError(f"{label}: the manifest does not list the bundle's files")
        present = sorted(set(members) - {MANIFEST})
        unlisted = [name for name in present if name not in listed]
        missing = [name for name in sorted(listed) if name not in members]
        if unlisted or missing:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing)}")
            if unlisted:
                parts.append(f"not in its manifest: {', '.join(unlisted)}")
            raise BundleError(f"{label} does not match its manifest ({'; '.join(parts)})")
        absent = [name for name in REQUIRED[str(kind)] if name not in listed]
        if absent:
            raise BundleError(f"{label}: a {kind} bundle needs {', '.join(absent)}")
        files: dict[str, bytes] = {}
        for name in present:
            content = _read_member(archive, members[name], label)
            expected = listed[name].get("sha256") if isinstance(listed[name], dict) else None
            found = sha256(content)
            if found != expected:
                raise BundleError(
                    f"{label}: checksum mismatch in {name} (the manifest says sha256 "
                    f"{str(expected)[:16]}..., the content is {found[:16]}...): the bundle was "
                    "changed or damaged after it was written; it cannot be trusted"
                )
            files[name] = content
    recorded = manifest.get("checksum")
    if recorded != manifest_checksum(manifest):
        raise BundleError(
            f"{label}: checksum mismatch (the manifest was changed or damaged after the "
            "bundle was written); it cannot be trusted"
        )
    return Bundle(manifest, files)


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> bytes:
    if info.file_size > MAX_MEMBER_BYTES:
        raise BundleError(
            f"{label}: {info.filename} would be {info.file_size} bytes uncompressed, more than "
            f"a bundle may hold ({MAX_MEMBER_BYTES})"
        )
    try:
        return archive.read(info)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise BundleError(f"{label}: {info.filename} cannot be read ({exc})") from None


def _load_manifest(raw: bytes, label: str) -> dict[str, Any]:
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{label}: {MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise BundleError(f"{label} is not a koboi bundle ({MANIFEST} is not a koboi manifest)")
    return manifest


def _check_version(manifest: Mapping[str, Any], label: str) -> None:
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BundleError(f"{label}: the manifest's format_version {version!r} is not valid")
    if version > FORMAT_VERSION:
        raise BundleError(
            f"{label} uses bundle format {version}, newer than this koboi-replay reads "
            f"(format {FORMAT_VERSION}); upgrade koboi-replay to open it"
        )
