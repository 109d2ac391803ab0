"""Each distribution writes its version in one place, and has a changelog entry for it.

For every pyproject.toml under packages/, plugins/ and docs/plugins/example: the
version is not static (``dynamic = ["version"]``), hatchling reads it from
``[tool.hatch.version] path``, that file holds the one ``__version__``, the installed
metadata and ``<package>.__version__`` agree with it, and the CHANGELOG.md beside the
pyproject has an entry for that exact version, the newest one.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import subprocess
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "plugins" / "example"
PYPROJECTS = sorted(
    [
        *ROOT.glob("packages/*/pyproject.toml"),
        *ROOT.glob("plugins/*/pyproject.toml"),
        EXAMPLE / "pyproject.toml",
    ]
)
#: Not installed in the workspace environment: their versions are checked in their built
#: wheels (test_a_built_wheel_carries_the_version); the example by tests/test_example_plugin.py
#: too, koboi-embed-minilm (outside the uv workspace: torch) by `nox -s minilm`.
NOT_INSTALLED = {"koboi-example-weather", "koboi-embed-minilm"}
MINILM = ROOT / "plugins" / "koboi-embed-minilm"
#: Distributions whose switch to one version source is still to be made: strict xfail,
#: so once _version.py, the dynamic version, <package>.__version__ and CHANGELOG.md are
#: there these tests pass, fail as XPASS, and the entry must go. (None left.)
PENDING: dict[str, str] = {}
VERSION = re.compile(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?")


class Dist(NamedTuple):
    name: str
    root: Path
    pyproject: dict[str, Any]
    package: str  # the import package, e.g. koboi_tools_basic
    version_file: Path | None  # [tool.hatch.version] path, resolved

    @property
    def version(self) -> str:
        assert self.version_file is not None, f"{self.name}: no [tool.hatch.version] path"
        return written_version(self.version_file)


def load(pyproject_path: Path) -> Dist:
    data = tomllib.loads(pyproject_path.read_text(encoding="utf-8"))
    (package_path,) = data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    path = data["tool"].get("hatch", {}).get("version", {}).get("path")
    return Dist(
        name=data["project"]["name"],
        root=pyproject_path.parent,
        pyproject=data,
        package=Path(package_path).name,
        version_file=pyproject_path.parent / path if path else None,
    )


def written_version(path: Path) -> str:
    """The one ``__version__ = "..."`` of a version file (nothing else may be in it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    body = list(tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    body = [s for s in body if not isinstance(s, ast.ImportFrom) or s.module != "__future__"]
    assert len(body) == 1, f"{path}: holds more than the one __version__ assignment"
    (statement,) = body
    assert isinstance(statement, ast.Assign), f"{path}: not an assignment"
    (target,) = statement.targets
    assert isinstance(target, ast.Name) and target.id == "__version__", path
    assert isinstance(statement.value, ast.Constant), f"{path}: the version is not a literal"
    value = statement.value.value
    assert isinstance(value, str) and VERSION.fullmatch(value), f"{path}: {value!r}"
    return value


DISTS = [load(p) for p in PYPROJECTS]


def _params(dists: list[Dist]) -> list[Any]:
    return [
        pytest.param(
            d,
            id=d.name,
            marks=[pytest.mark.xfail(strict=True, reason=PENDING[d.name])]
            if d.name in PENDING
            else [],
        )
        for d in dists
    ]


EVERY = _params(DISTS)
INSTALLED = _params([d for d in DISTS if d.name not in NOT_INSTALLED])


def test_every_distribution_is_checked() -> None:
    names = {d.name for d in DISTS}
    assert {"koboi-core", "koboi-cli", "koboi-example-weather"} <= names
    assert set(PENDING) <= names, "an entry of PENDING names no distribution"
    assert len(names) == len(DISTS), "two pyprojects name the same distribution"


@pytest.mark.parametrize("dist", EVERY)
def test_the_version_is_dynamic_and_read_from_the_package(dist: Dist) -> None:
    project = dist.pyproject["project"]
    assert "version" not in project, f"{dist.name}: a static version in pyproject.toml"
    assert "version" in project.get("dynamic", []), f"{dist.name}: version is not dynamic"
    assert dist.pyproject["build-system"]["build-backend"] == "hatchling.build"
    expected = dist.root / "src" / dist.package / "_version.py"
    assert dist.version_file == expected, (
        f"{dist.name}: [tool.hatch.version] path should be src/{dist.package}/_version.py"
    )
    assert expected.is_file(), f"{dist.name}: {expected} is missing"
    assert dist.version  # one literal __version__, nothing else


@pytest.mark.parametrize("dist", EVERY)
def test_no_other_file_writes_the_version(dist: Dist) -> None:
    assert dist.version_file is not None
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((dist.root / "src").rglob("*.py"))
        if path != dist.version_file
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.match(r"\s*__version__\s*(:[^=]*)?=(?!=)", line)
    ]
    assert not found, f"{dist.name}: __version__ assigned outside {dist.version_file.name}"


@pytest.mark.parametrize("dist", INSTALLED)
def test_the_installed_metadata_and_the_package_say_the_same_version(dist: Dist) -> None:
    version = dist.version
    assert metadata.version(dist.name) == version, (
        f"{dist.name}: installed metadata differs from {dist.version_file}; "
        f"reinstall it (uv sync --reinstall-package {dist.name})"
    )
    assert importlib.import_module(dist.package).__version__ == version


@pytest.mark.parametrize("dist", EVERY)
def test_the_changelog_has_an_entry_for_the_version(dist: Dist) -> None:
    changelog = dist.root / "CHANGELOG.md"
    assert changelog.is_file(), f"{dist.name}: no CHANGELOG.md beside its pyproject.toml"
    text = changelog.read_text(encoding="utf-8")
    version = dist.version
    heading = re.compile(
        rf"^## \[{re.escape(version)}\](?: - (?:unreleased|\d{{4}}-\d{{2}}-\d{{2}}))?$", re.M
    )
    assert heading.search(text), f"{changelog}: no '## [{version}] - <date or unreleased>'"
    released = [h for h in re.findall(r"^## \[([^\]]+)\]", text, re.M) if h != "Unreleased"]
    assert released[0] == version, f"{changelog}: the newest entry is not {version}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("dist_name", "source"),
    [
        ("koboi-tools-basic", ["--package", "koboi-tools-basic"]),
        ("koboi-example-weather", [str(EXAMPLE)]),
        ("koboi-embed-minilm", [str(MINILM)]),
    ],
)
def test_a_built_wheel_carries_the_version(
    dist_name: str, source: list[str], tmp_path: Path
) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    (dist,) = [d for d in DISTS if d.name == dist_name]
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    proc = subprocess.run(
        [uv, "build", "--wheel", "-q", "-o", str(tmp_path), *source],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read(f"{dist.package}-{dist.version}.dist-info/METADATA").decode()
        shipped = archive.read(f"{dist.package}/_version.py").decode()
    assert f"\nVersion: {dist.version}\n" in meta
    assert dist.version_file is not None
    assert shipped == dist.version_file.read_text(encoding="utf-8")
