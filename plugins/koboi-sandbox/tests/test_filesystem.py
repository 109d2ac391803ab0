"""Carving protected paths out of allowed ones, and what that means under Landlock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from koboi_sandbox.filesystem import carve, protectable
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import RestrictedSandbox

pytestmark = pytest.mark.anyio


def _tree(top: Path) -> Path:
    for name in ("bin", "share/doc", "app/.koboi", "app/src", "app2"):
        (top / name).mkdir(parents=True)
    (top / "app" / "agent.yaml").write_text("secret")
    (top / "app" / "README").write_text("readme")
    (top / "share" / "file").write_text("x")
    (top / "link").symlink_to(top / "app")
    return top


def test_nothing_protected_inside_leaves_the_rule_whole(tmp_path: Path) -> None:
    top = _tree(tmp_path)
    assert carve([top], [tmp_path.parent / "elsewhere"]) == [top]


def test_a_protected_directory_is_cut_out_with_everything_beside_it_kept(tmp_path: Path) -> None:
    top = _tree(tmp_path)
    rules = carve([top], [top / "app"])
    assert sorted(rules) == sorted([top / "app2", top / "bin", top / "share"])
    assert top / "link" not in rules  # a symlink gets no rule (it never had one of its own)


def test_carving_goes_down_to_the_protected_path(tmp_path: Path) -> None:
    top = _tree(tmp_path)
    rules = carve([top], [top / "app" / ".koboi", top / "app" / "agent.yaml"])
    assert sorted(rules) == sorted(
        [top / "app2", top / "bin", top / "share", top / "app" / "README", top / "app" / "src"]
    )


def test_an_allowed_path_inside_a_protected_one_is_dropped(tmp_path: Path) -> None:
    top = _tree(tmp_path)
    assert carve([top / "app" / "src", top / "bin"], [top / "app"]) == [top / "bin"]
    assert carve([top / "app"], [top / "app"]) == []


def test_system_directories_cannot_be_protected_whole() -> None:
    for path in ("/", "/etc", "/usr", "/opt"):
        assert not protectable(Path(path))
    assert protectable(Path("/etc/koboi")) and protectable(Path("/opt/agent"))


async def test_a_config_inside_a_readable_directory_stays_out_of_reach(
    open_dir: Path, require: Callable[[bool, str], None]
) -> None:
    """The project lives under a read-only path (as it would under /opt): its config, its
    store and its other sessions are carved out; the rest stays readable."""
    caps = probe()
    require(caps.landlock_abi >= 1, f"no Landlock here: {caps.landlock_reason}")
    shared = open_dir / "opt"
    app = shared / "agent"
    (app / ".koboi").mkdir(parents=True)
    (shared / "other-tool").mkdir()
    (shared / "other-tool" / "data.txt").write_text("public data")
    config = app / "agent.yaml"
    config.write_text("api_key: kb-carved-secret")
    store = app / ".koboi" / "koboi.db"
    store.write_text("kb-carved-secret")
    for path in (shared, app, app / ".koboi", shared / "other-tool"):
        path.chmod(0o755)
    for path in (config, store, shared / "other-tool" / "data.txt"):
        path.chmod(0o644)
    sandbox = RestrictedSandbox(
        RestrictedOptions(workdir=str(app / ".koboi" / "workdirs"), read_only=[str(shared)]),
        base_dir=app,
        private=[config, app / ".koboi"],
    )

    async def sh(script: str) -> str:
        result = await sandbox.run_process(["sh", "-c", script], session_id="s1", timeout=20)
        return result.stdout + result.stderr

    assert "public data" in await sh(f"cat {shared}/other-tool/data.txt")  # control
    for target in (config, store):
        out = await sh(f"cat {target}")
        assert "kb-carved-secret" not in out and "Permission denied" in out
    assert "kb-carved-secret" not in await sh(f"grep -r kb-carved {shared} 2>&1")
    assert await anyio.Path(app).resolve() in {anyio.Path(p) for p in sandbox.protected}
