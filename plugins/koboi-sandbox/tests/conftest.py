"""Fixtures: sandboxes at each level, over real processes on this machine."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from koboi.sandbox import PassthroughSandbox
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import RestrictedSandbox, required_gaps

SandboxMaker = Callable[..., RestrictedSandbox]


def hard_gaps() -> list[str]:
    return required_gaps(RestrictedOptions(isolation="hard"), probe())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "hard: needs isolation hard (seccomp, Landlock, PID namespaces) on this machine"
    )
    config.addinivalue_line(
        "markers",
        "needs(available, what): needs a feature of this machine (a kernel feature, root); "
        "skipped without it, failed without it when CI is set",
    )


def _require(available: bool, what: str) -> None:
    """Skip when this machine lacks a kernel feature — but fail when ``CI`` is set: the CI
    machines have every feature (``koboi sandbox check`` says so), and a skip there would
    hide a bug."""
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set, so this is a failure, not a skip)")
    pytest.skip(what)


@pytest.fixture
def require() -> Callable[[bool, str], None]:
    """``require(available, what)``: skip without the feature, fail under ``CI``."""
    return _require


@pytest.fixture(autouse=True)
def _hard_is_available(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("hard") is not None:
        gaps = hard_gaps()
        _require(not gaps, f"isolation hard is not available here: {'; '.join(gaps)}")
    for marker in request.node.iter_markers("needs"):
        _require(bool(marker.args[0]), str(marker.args[1]))


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user can traverse (pytest's tmp_path is private to root).

    Tests about what the sandbox user cannot read must put the files where
    ordinary permissions would let that user read them, or "denied" would
    prove nothing.
    """
    path = Path(tempfile.mkdtemp(prefix="koboi-sandbox-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_sandbox(open_dir: Path) -> SandboxMaker:
    def make(**options: Any) -> RestrictedSandbox:
        settings: dict[str, Any] = {"workdir": str(open_dir / "workdirs"), **options}
        return RestrictedSandbox(RestrictedOptions.model_validate(settings))

    return make


@pytest.fixture
def passthrough(open_dir: Path) -> PassthroughSandbox:
    workdir = open_dir / "passthrough"
    workdir.mkdir()
    return PassthroughSandbox(workdir)
