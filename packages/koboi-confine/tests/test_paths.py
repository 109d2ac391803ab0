"""open_inside: a model's path opens only inside the session's directory.

Each refusal has its positive control: a plain ``open`` of the same path
reaches the file outside, so "refused" means the guard worked.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

from koboi_confine import paths
from koboi_confine.paths import PathRefused, open_inside

SECRET = "outside secret"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "w" / "s1"
    root.mkdir(parents=True)
    (root / "notes.txt").write_text("inside")
    (root / "sub").mkdir()
    (root / "sub" / "deep.txt").write_text("deep")
    evil = tmp_path / "w" / "s1_evil"
    evil.mkdir()
    (evil / "loot.txt").write_text(SECRET)
    (tmp_path / "secret.txt").write_text(SECRET)
    (tmp_path / "w" / "secret.txt").write_text(SECRET)
    return root, tmp_path


def read(root: Path, path: str) -> str:
    fd = open_inside(root, path)
    with os.fdopen(fd) as handle:
        return handle.read()


@pytest.fixture(params=["openat2", "walk"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    # Both ways of resolving are tested: openat2 (Linux 5.6+) and the portable walk.
    if request.param == "walk":
        monkeypatch.setattr(paths, "_openat2_works", False)
    else:
        monkeypatch.setattr(paths, "_openat2_works", None)
    return str(request.param)


def test_paths_inside_open(layout: tuple[Path, Path], mode: str) -> None:
    root, _ = layout
    assert read(root, "notes.txt") == "inside"
    assert read(root, "./sub/deep.txt") == "deep"
    assert read(root, str(root / "sub" / "deep.txt")) == "deep"
    if mode == "openat2" and os.uname().release >= "5.6":
        assert paths._openat2_works is True  # the kernel path really ran


@pytest.mark.parametrize(
    "path",
    ["../secret.txt", "sub/../../secret.txt", "../s1_evil/loot.txt"],
)
def test_dot_dot_is_refused(layout: tuple[Path, Path], mode: str, path: str) -> None:
    root, _ = layout
    assert SECRET in (root / path).read_text()  # control: the path does lead out
    with pytest.raises(PathRefused, match=r"'\.\.'"):
        read(root, path)


def test_absolute_paths_outside_and_prefix_confusion(layout: tuple[Path, Path], mode: str) -> None:
    root, top = layout
    for path in (top / "secret.txt", root.parent / "s1_evil" / "loot.txt", Path("/etc/passwd")):
        assert path.read_text()  # control
        with pytest.raises(PathRefused, match="outside the working directory"):
            read(root, str(path))


def test_symlink_leading_out_is_refused(layout: tuple[Path, Path], mode: str) -> None:
    root, top = layout
    (root / "link.txt").symlink_to(top / "secret.txt")
    (root / "dirlink").symlink_to(top)
    assert (root / "link.txt").read_text() == SECRET  # control: open() follows it out
    with pytest.raises(PathRefused):
        read(root, "link.txt")
    with pytest.raises(PathRefused):
        read(root, "dirlink/secret.txt")


def test_proc_magic_links_are_refused(layout: tuple[Path, Path], mode: str) -> None:
    root, top = layout
    (root / "escape").symlink_to(f"/proc/{os.getpid()}/root")
    target = f"escape{top / 'secret.txt'}"
    assert (root / target).read_text() == SECRET  # control
    with pytest.raises(PathRefused):
        read(root, target)


def test_nul_bytes_and_empty_paths_are_refused(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    with pytest.raises(PathRefused, match="NUL"):
        read(root, "notes.txt\0.png")
    with pytest.raises(PathRefused, match="empty"):
        read(root, "  ")


def test_a_symlink_swapped_in_during_the_calls_never_leads_out(
    layout: tuple[Path, Path], mode: str
) -> None:
    root, top = layout
    (root / "real").mkdir()
    (root / "real" / "file.txt").write_text("inside")
    stop = threading.Event()

    def swap() -> None:
        # Flip "dir" between a real directory and a symlink to the outside.
        while not stop.is_set():
            link = root / "dir"
            try:
                if link.is_symlink():
                    link.unlink()
                    link.symlink_to(root / "real")
                else:
                    if link.exists():
                        link.unlink()
                    link.symlink_to(top)
            except OSError:
                pass

    (root / "dir").symlink_to(root / "real")
    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    seen: set[str] = set()
    try:
        for _ in range(2000):
            for name in ("dir/file.txt", "dir/secret.txt"):
                with contextlib.suppress(PathRefused, FileNotFoundError):
                    seen.add(read(root, name))
    finally:
        stop.set()
        swapper.join(2)
    assert SECRET not in seen


def test_writes_create_files_inside_only(layout: tuple[Path, Path], mode: str) -> None:
    root, top = layout
    fd = open_inside(root, "new.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, b"written")
    os.close(fd)
    assert (root / "new.txt").read_text() == "written"
    (root / "out").symlink_to(top / "planted.txt")
    with pytest.raises(PathRefused):
        open_inside(root, "out", os.O_WRONLY | os.O_CREAT)
    assert not (top / "planted.txt").exists()
