"""Stored workflows: workflow bundles kept in the store, by name (``koboi import``, ``koboi workflows``).

Each is a keyed record of kind ``workflow`` (the store's
:class:`~koboi.store.KeyedRecords` capability; a store without it is refused in
one line naming the feature), holding the bundle's manifest and files. A stored
workflow is checked again whenever it is read back: a record changed in the
database is refused, as a changed file is.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koboi_replay import bundle as B
from koboi_replay.errors import BundleError, WorkflowError

if TYPE_CHECKING:
    from koboi.store import KeyedRecords, Store

KIND = "workflow"
#: What needs the store's keyed records, as a MissingCapability names it.
FEATURE = "stored workflows (koboi import, koboi workflows)"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class StoredWorkflow:
    """One stored workflow: its name, when and from where it was imported, and its bundle."""

    name: str
    imported_at: float
    source: str
    bundle: B.Bundle

    @property
    def agent(self) -> str:
        return self.bundle.name

    @property
    def checksum(self) -> str:
        return self.bundle.checksum


def _records(store: Store) -> KeyedRecords:
    from koboi.store import records_of

    return records_of(store, FEATURE)


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise WorkflowError(
            f"{name!r} is not a valid workflow name: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def default_name(bundle: B.Bundle, source: str) -> str:
    """The bundle's agent name, else the file's stem, made into a valid workflow name."""
    for candidate in (bundle.name, source.rsplit("/", 1)[-1].removesuffix(B.SUFFIX)):
        cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", candidate).strip("-._")[:64]
        if cleaned:
            return cleaned
    return "workflow"


async def import_bundle(
    store: Store, bundle: B.Bundle, *, name: str, source: str, replace: bool = False
) -> StoredWorkflow:
    """Keep a workflow bundle in the store under ``name``.

    A run bundle is refused (it is replayed, not stored), and so is a name
    already taken unless ``replace``: nothing stored is lost by mistake.
    """
    check_name(name)
    if bundle.kind != "workflow":
        raise WorkflowError(
            f"{source} is a captured run (koboi capture), not a workflow; replay it with "
            f"koboi run {source} --replay-mode replay, or make a workflow of its config with "
            "koboi export"
        )
    records = _records(store)
    if not replace and await records.record_get(KIND, name) is not None:
        raise WorkflowError(
            f"a workflow named {name!r} is already stored; pass --replace to overwrite it, or "
            "--name to store this one under another name"
        )
    try:
        files = {file: data.decode("utf-8") for file, data in bundle.files.items()}
    except UnicodeDecodeError:
        raise BundleError(f"{source}: a workflow bundle holds only text files") from None
    stored = StoredWorkflow(name, time.time(), source, bundle)
    await records.record_put(
        KIND,
        name,
        {
            "name": name,
            "imported_at": stored.imported_at,
            "source": source,
            "manifest": bundle.manifest,
            "files": files,
        },
    )
    return stored


def _from_record(name: str, data: dict[str, Any]) -> StoredWorkflow:
    try:
        manifest = data["manifest"]
        files = {file: str(text).encode("utf-8") for file, text in data["files"].items()}
    except (KeyError, AttributeError, TypeError):
        raise WorkflowError(
            f"the stored workflow {name!r} is damaged; delete it and import it again"
        ) from None
    rebuilt = B.Bundle(dict(manifest), files)
    try:
        verified = B.parse_bundle(rebuilt.to_bytes(), f"stored workflow {name!r}")
    except BundleError as exc:
        raise WorkflowError(f"{exc}; delete it and import it again") from None
    return StoredWorkflow(
        name, float(data.get("imported_at") or 0.0), str(data.get("source") or ""), verified
    )


@dataclass(frozen=True)
class Listed:
    """A stored workflow as listed: the workflow, or why it cannot be read."""

    name: str
    workflow: StoredWorkflow | None
    problem: str = ""


async def list_workflows(store: Store) -> list[Listed]:
    """Every stored workflow, by name; a damaged one is listed with its problem."""
    listed: list[Listed] = []
    for key, data in await _records(store).record_list(KIND):
        try:
            listed.append(Listed(key, _from_record(key, data)))
        except WorkflowError as exc:
            listed.append(Listed(key, None, str(exc)))
    return listed


async def get_workflow(store: Store, name: str) -> StoredWorkflow:
    records = _records(store)
    data = await records.record_get(KIND, name)
    if data is None:
        names = [key for key, _ in await records.record_list(KIND)]
        known = ", ".join(names) if names else "none (import one with koboi import FLOW.koboi)"
        raise WorkflowError(f"no workflow named {name!r} is stored; stored: {known}")
    return _from_record(name, data)


async def delete_workflow(store: Store, name: str) -> None:
    if not await _records(store).record_delete(KIND, name):
        raise WorkflowError(f"no workflow named {name!r} is stored; nothing was deleted")
