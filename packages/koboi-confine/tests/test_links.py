"""The hard-link rule: a file with more than one name is opened only when it is the session's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from koboi_confine.paths import (
    Identity,
    PathRefused,
    link_allowed,
    refuse_foreign_link,
    session_identity,
)

KOBOI = Identity(uid=1000, gid=1000, own=False)
SESSION = Identity(uid=3_000_000_001, gid=3_000_000_001, own=True)


def _stat(path: Path) -> os.stat_result:
    return os.stat(path, follow_symlinks=False)


def _faked(info: os.stat_result, *, uid: int) -> os.stat_result:
    fields = list(info)
    fields[4] = uid  # st_uid
    return os.stat_result(fields)


def test_one_name_is_always_fine(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text("x")
    info = _stat(tmp_path / "one.txt")
    assert link_allowed(info, KOBOI) and link_allowed(_faked(info, uid=1), SESSION)


def test_directories_and_symlinks_are_not_the_rules_business(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "e").mkdir()  # the directory now has 3 links
    assert _stat(tmp_path / "d").st_nlink > 1
    assert link_allowed(_stat(tmp_path / "d"), KOBOI)


def test_a_second_name_is_refused_without_an_identity_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    os.link(tmp_path / "a.txt", tmp_path / "b.txt")
    info = _stat(tmp_path / "b.txt")
    assert not link_allowed(info, KOBOI)
    with pytest.raises(PathRefused, match="has 2 hard links"):
        refuse_foreign_link(info, KOBOI, "b.txt")


def test_with_an_identity_only_the_sessions_own_files(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    os.link(tmp_path / "a.txt", tmp_path / "b.txt")
    info = _stat(tmp_path / "b.txt")
    assert link_allowed(_faked(info, uid=SESSION.uid), SESSION)  # its own link
    world_readable = _faked(info, uid=SESSION.uid + 1)
    assert not link_allowed(world_readable, SESSION), "mode bits do not make it the session's"
    with pytest.raises(PathRefused, match="could not change"):
        refuse_foreign_link(world_readable, SESSION, "b.txt", write=True)


def test_the_identity_is_the_workdir_owner_only_for_root(tmp_path: Path) -> None:
    found = session_identity(tmp_path)
    if os.geteuid() != 0:
        assert found == Identity(os.geteuid(), os.getegid(), own=False)
        return
    assert found.own is False  # root's own directory: koboi's identity
    os.chown(tmp_path, 3_000_000_005, 3_000_000_005)
    try:
        assert session_identity(tmp_path) == Identity(3_000_000_005, 3_000_000_005, own=True)
    finally:
        os.chown(tmp_path, 0, 0)
