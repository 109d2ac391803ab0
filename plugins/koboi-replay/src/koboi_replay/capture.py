"""Freezing a session (``koboi capture``) or a config (``koboi export``) into a bundle."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi import journal as J
from koboi_replay import bundle as B
from koboi_replay import config_text, environment, recording
from koboi_replay.errors import CaptureError

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.store import JournalEvent, SessionInfo, Store


@dataclass
class WrittenConfig:
    """A config file as written (its ``extends`` merged in), cleaned of literal secrets."""

    path: Path
    #: The mapping as read, before interpolation: what the config hash is taken of.
    raw: dict[str, Any]
    hash: str
    #: The YAML text the bundle carries.
    text: str
    redactions: list[config_text.Redaction] = field(default_factory=list)

    def manifest(self) -> dict[str, Any]:
        """The ``config`` block of a bundle's manifest."""
        return {
            "file": B.CONFIG,
            "hash": self.hash,
            "source": self.path.name,
            "redacted": [r.path for r in self.redactions],
            "variables": sorted(config_text.referenced_variables(self.raw)),
        }


@dataclass
class Captured:
    """A bundle just made, and what the user should be told about it."""

    bundle: B.Bundle
    notes: list[str] = field(default_factory=list)
    session: SessionInfo | None = None


def read_written_config(path: Path) -> WrittenConfig:
    """Read a config file as written, merge what it ``extends``, and take out literal secrets.

    The text is the file itself when it extends nothing and holds no literal
    secret (comments kept); otherwise the merged, cleaned mapping as YAML.
    """
    from koboi.config import config_hash, read_with_extends, read_yaml

    raw = read_with_extends(path)
    extends = "extends" in read_yaml(path)
    cleaned = config_text.remove_secrets(raw)
    if not extends and not cleaned.redactions:
        text = path.read_text(encoding="utf-8")
    else:
        notes = [f"Written by koboi from {path.name}"]
        if extends:
            notes.append("with the files it extends merged in")
        if cleaned.redactions:
            notes.append("and its literal secrets replaced by ${KOBOI_SECRET_...} references")
        text = config_text.dump_yaml(cleaned.raw, header=" ".join(notes) + ".")
    return WrittenConfig(path, raw, config_hash(raw), text, cleaned.redactions)


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _validate(written: WrittenConfig, host: PluginHost) -> AgentConfig:
    return config_text.portable_config(
        written.raw,
        host.catalog(),
        base_dir=written.path.resolve().parent,
        env=os.environ,
        label=str(written.path),
    )


# -- koboi export ---------------------------------------------------------------------


def export_workflow(config_path: Path, host: PluginHost) -> Captured:
    """A workflow bundle of a config: the config (validated, secrets out) and versions."""
    written = read_written_config(config_path)
    config = _validate(written, host)
    bundle = B.Bundle.create(
        "workflow",
        {B.CONFIG: written.text.encode("utf-8")},
        name=config.agent.name,
        created_at=_now_iso(),
        versions=environment.describe(host, config),
        config=written.manifest(),
    )
    return Captured(bundle, [r.message() for r in written.redactions])


# -- koboi capture --------------------------------------------------------------------


def find_config(config_hash: str, directories: Iterable[Path]) -> list[Path]:
    """YAML files in ``directories`` whose config hash is ``config_hash``."""
    from koboi.config import config_hash as hash_of
    from koboi.config import read_with_extends
    from koboi.errors import KoboiError

    found: list[Path] = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            try:
                if hash_of(read_with_extends(path)) == config_hash:
                    found.append(path)
            except (KoboiError, OSError):
                continue  # not a config, or unreadable: not the one
    return found


def session_config_hashes(events: Sequence[JournalEvent]) -> list[str]:
    """The config hash of each run the session started, in order (duplicates kept)."""
    return [
        str(J.RUN_STARTED.of(e).get("config_hash", "")) for e in events if e.type == J.RUN_STARTED
    ]


async def capture_session(
    store: Store,
    ref: str,
    *,
    config_path: Path,
    host: PluginHost,
    with_cache: bool = False,
) -> Captured:
    """Freeze a finished or interrupted session into a run bundle.

    Refused: a session still being run (its lease is live), a session with no
    events, and a config that is not the one the session ran with (its hash
    differs from the runs' ``config_hash``).
    """
    from koboi.store import holder_is_dead

    info = await store.resolve_session(ref)
    events = await store.read(info.id)
    if not events:
        raise CaptureError(f"session {info.id} has no events: there is nothing to capture")
    state = J.fold_state(events)
    lease = await store.get_lease(info.id)
    if (
        state.interrupted
        and lease is not None
        and lease.expires_at > time.time()
        and not holder_is_dead(lease.holder)
    ):
        raise CaptureError(
            f"session {info.id} is being run right now (by {lease.holder}); capture it once "
            "its run has finished, or once that process is gone"
        )
    written = read_written_config(config_path)
    hashes = sorted(set(session_config_hashes(events)))
    if hashes != [written.hash]:
        if len(hashes) > 1:
            raise CaptureError(
                f"session {info.id} ran with {len(hashes)} different configs "
                f"(hashes {', '.join(hashes)}); a bundle holds one config, so this session "
                "cannot be captured as one"
            )
        raise CaptureError(
            f"{config_path} is not the config session {info.id} ran with: its hash is "
            f"{written.hash}, the session's runs used {hashes[0] if hashes else 'none'}; "
            "pass the config as it was when the session ran"
        )
    config = _validate(written, host)
    sandbox, sandbox_note = await _sandbox_facts(config, host)
    identity, identity_note = await environment.model_identity(config, host)
    audit = [
        {"id": entry.id, "at": entry.at, "data": dict(entry.data)}
        for entry in await store.read_audit(info.id)
    ]
    recorded = recording.extract(events, audit)
    files = {
        B.CONFIG: written.text.encode("utf-8"),
        B.EVENTS: B.jsonl(
            {"seq": e.seq, "type": e.type, "at": e.at, "data": dict(e.data)} for e in events
        ),
        B.MODEL_CALLS: B.jsonl(recorded.model_calls),
        B.TOOL_RESULTS: B.jsonl(recorded.tool_results),
        B.APPROVALS: B.jsonl(recorded.approvals),
        B.AUDIT: B.jsonl(audit),
    }
    contents = {
        "events": len(events),
        "runs": len(recorded.runs),
        "model_calls": len(recorded.model_calls),
        "side_calls": recorded.side_calls,
        "tool_results": len(recorded.tool_results),
        "approvals": len(recorded.approvals),
        "audit": len(audit),
    }
    notes = [r.message() for r in written.redactions]
    if sandbox_note:
        notes.append(sandbox_note)
    if identity_note:
        notes.append(
            f"{identity_note}: the request keys journaled with side calls and rewritten "
            "requests will differ in a replay"
        )
    if with_cache:
        cache = await _session_cache(store, events)
        files[B.CACHE] = B.jsonl(cache)
        contents["cache"] = len(cache)
        if not cache:
            notes.append("--with-cache: the store's response cache has no entry for this session")
    bundle = B.Bundle.create(
        "run",
        files,
        name=config.agent.name,
        created_at=_now_iso(),
        versions=environment.describe(host, config),
        config=written.manifest(),
        session={
            "id": info.id,
            "agent": info.config_name,
            "status": info.status,
            "interrupted": state.interrupted,
            "created_at": info.created_at,
            "updated_at": info.updated_at,
        },
        sandbox=sandbox,
        contents=contents,
        **({"model": {"identity": identity}} if identity is not None else {}),
    )
    return Captured(bundle, notes, info)


async def _sandbox_facts(config: AgentConfig, host: PluginHost) -> tuple[dict[str, Any], str]:
    """What the session's sandbox says about itself (its name, whether it isolates).

    The loop journals and audits these, and a replay under ``--tools
    recorded`` builds no sandbox, so the bundle keeps them. They are asked of
    the sandbox the config builds here, where the session ran.
    """
    from koboi.errors import describe_error

    backend = config.sandbox.backend
    fallback = {"backend": backend, "name": backend, "isolated": backend != "passthrough"}
    entry = host.catalog().sandboxes.get(backend)
    if entry is None:
        return fallback, f"sandbox backend {backend!r} is not installed; its facts are guessed"
    try:
        sandbox = entry.target(config.sandbox_options, config)
    except Exception as exc:  # capture goes on; the manifest says its facts are guessed
        return fallback, f"the sandbox could not be built here ({describe_error(exc)})"
    try:
        return {"backend": backend, "name": sandbox.name, "isolated": sandbox.isolated}, ""
    finally:
        await sandbox.aclose()


def _answers(events: Sequence[JournalEvent]) -> set[str]:
    """The messages this session's model calls (the loop's and side calls) answered."""
    answers: set[str] = set()
    for event in events:
        response: Any = None
        if event.type == J.MODEL_CALL_FINISHED:
            response = J.MODEL_CALL_FINISHED.of(event).get("response")
        elif event.type == J.SIDE_CALL_FINISHED:
            response = J.SIDE_CALL_FINISHED.of(event).get("response")
        if isinstance(response, dict):
            answers.add(B.canonical_json(response.get("message")))
    return answers


async def _session_cache(store: Store, events: Sequence[JournalEvent]) -> list[dict[str, Any]]:
    """The response-cache entries whose answer is one this session's model calls journaled.

    The cache is shared by every session of a store; a bundle takes only the
    entries of its own session, so sharing it shares nothing else.
    """
    from koboi.store import cache_of

    cache = cache_of(store, "koboi capture --with-cache")
    answers = _answers(events)
    found: list[dict[str, Any]] = []
    for key in await cache.cache_keys():
        entry = await cache.cache_get(key)
        response = entry.get("response") if entry else None
        if isinstance(response, dict) and B.canonical_json(response.get("message")) in answers:
            found.append({"key": key, "entry": entry})
    return found
