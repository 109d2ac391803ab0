"""The bundle file: round trip, integrity checks, and what is refused (with a control each)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from koboi_replay import bundle as B
from koboi_replay.errors import BundleError


def _workflow() -> B.Bundle:
    return B.Bundle.create(
        "workflow",
        {B.CONFIG: b"llm: {provider: scripted}\n"},
        name="demo",
        created_at="2026-01-01T00:00:00Z",
    )


def _rezip(data: bytes, change: dict[str, bytes | None]) -> bytes:
    """The archive with members replaced (bytes) or removed (None), nothing resealed."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename in change:
                replacement = change.pop(info.filename)
                if replacement is not None:
                    target.writestr(info.filename, replacement)
            else:
                target.writestr(info.filename, source.read(info))
        for name, content in change.items():
            if content is not None:
                target.writestr(name, content)
    return out.getvalue()


def test_round_trip_is_exact_and_deterministic(tmp_path: Path) -> None:
    bundle = _workflow()
    path = tmp_path / "flow.koboi"
    size = bundle.write(path)
    assert size == path.stat().st_size
    again = B.read_bundle(path)
    assert again.manifest == bundle.manifest
    assert again.files == bundle.files
    assert again.kind == "workflow" and again.name == "demo"
    # Same content, same bytes: members carry a fixed time.
    assert bundle.to_bytes() == again.to_bytes()
    assert again.manifest["format_version"] == B.FORMAT_VERSION
    assert again.checksum == B.manifest_checksum(again.manifest)


def test_existing_file_is_kept_unless_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "flow.koboi"
    path.write_text("precious")
    with pytest.raises(BundleError, match="already exists"):
        _workflow().write(path)
    assert path.read_text() == "precious"
    _workflow().write(path, overwrite=True)
    assert B.read_bundle(path).name == "demo"


def test_a_changed_file_is_refused_a_resealed_one_is_read() -> None:
    data = _workflow().to_bytes()
    changed = _rezip(data, {B.CONFIG: b"llm: {provider: openai}\n"})
    with pytest.raises(BundleError, match=r"checksum mismatch in config\.yaml"):
        B.parse_bundle(changed)
    # Control: the same change, sealed (digests and checksum recomputed), is accepted.
    bundle = B.parse_bundle(data)
    bundle.files[B.CONFIG] = b"llm: {provider: openai}\n"
    bundle.seal()
    assert B.parse_bundle(bundle.to_bytes()).config_text == "llm: {provider: openai}\n"


def test_a_changed_manifest_is_refused() -> None:
    bundle = _workflow()
    manifest = dict(bundle.manifest, name="someone-else")
    changed = _rezip(bundle.to_bytes(), {B.MANIFEST: json.dumps(manifest).encode()})
    with pytest.raises(BundleError, match="checksum mismatch"):
        B.parse_bundle(changed)


def test_a_newer_format_is_refused_before_anything_else() -> None:
    bundle = _workflow()
    bundle.manifest["format_version"] = B.FORMAT_VERSION + 1
    bundle.seal()
    with pytest.raises(BundleError, match=r"newer than this koboi-replay reads.*upgrade"):
        B.parse_bundle(bundle.to_bytes())
    # Even when its checksum is wrong: the version says it cannot be judged.
    broken = _rezip(bundle.to_bytes(), {B.CONFIG: b"x"})
    with pytest.raises(BundleError, match="newer"):
        B.parse_bundle(broken)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not a zip at all", "not a zip archive"),
        (_rezip(_workflow().to_bytes(), {B.MANIFEST: None}), "has no manifest.json"),
        (_rezip(_workflow().to_bytes(), {B.MANIFEST: b"{oops"}), "not valid JSON"),
        (_rezip(_workflow().to_bytes(), {B.MANIFEST: b'{"format": "x"}'}), "not a koboi manifest"),
        (_rezip(_workflow().to_bytes(), {B.CONFIG: None}), "missing config.yaml"),
        (_rezip(_workflow().to_bytes(), {"extra.txt": b"hi"}), "not in its manifest: extra.txt"),
    ],
    ids=["not-zip", "no-manifest", "bad-json", "foreign", "missing-file", "unlisted-file"],
)
def test_malformed_bundles_are_refused_with_the_reason(data: bytes, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        B.parse_bundle(data, "flow.koboi")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no such file"):
        B.read_bundle(tmp_path / "nope.koboi")
    with pytest.raises(BundleError, match="is a directory"):
        B.read_bundle(tmp_path)


def test_run_bundle_needs_its_recording() -> None:
    bundle = B.Bundle.create("run", {B.CONFIG: b"llm: {provider: scripted}\n"}, name="x")
    with pytest.raises(BundleError, match=r"a run bundle needs events\.jsonl"):
        B.parse_bundle(bundle.to_bytes())


def test_events_must_be_numbered_in_order() -> None:
    files = dict.fromkeys(B.REQUIRED["run"], b"")
    files[B.EVENTS] = B.jsonl(
        [{"seq": 1, "type": "run_started", "data": {}}, {"seq": 3, "type": "x", "data": {}}]
    )
    bundle = B.parse_bundle(B.Bundle.create("run", files, session={"id": "s"}).to_bytes())
    with pytest.raises(BundleError, match="numbered 1, 2, 3"):
        bundle.events()
    files[B.EVENTS] = B.jsonl(
        [{"seq": 1, "type": "run_started", "data": {}}, {"seq": 2, "type": "x", "data": {}}]
    )
    events = B.Bundle.create("run", files, session={"id": "s"}).events()
    assert [(e.session_id, e.seq, e.type) for e in events] == [
        ("s", 1, "run_started"),
        ("s", 2, "x"),
    ]
