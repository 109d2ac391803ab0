"""Test sessions. `uv run nox` (the README's test command) runs the default set:

- lint:    ruff check and ruff format --check over the whole tree
- types:   mypy (strict on koboi-core, the kernel)
- member:  each workspace member's own tests, alone, in its own environment
           holding only that member and its declared dependencies
- tests:   every member's tests plus the cross-package tests/, all together
- evals:   the repo's eval cases (evals/), offline and deterministic: koboi eval-test --mock

uv must use the interpreter that is on the machine; it never downloads one.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "types", "member", "tests", "evals"]
nox.options.error_on_missing_interpreters = True

os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")
# Cache compiled bytecode even where the machine asks Python not to: the suite starts
# hundreds of koboi processes (CLI runs, servers, crash tests), and each would
# otherwise compile SQLAlchemy, FastAPI and the plugins from source again (~0.8 s
# per process here). __pycache__ is ignored by git.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _members() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pyproject in sorted(
        [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("plugins/*/pyproject.toml")]
    ):
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
        found[name] = pyproject.parent
    return found


MEMBERS = _members()
TESTED = [name for name, path in MEMBERS.items() if (path / "tests").is_dir()]
PYTEST_ENV = {"KOBOI_STRICT_PLUGINS": "1"}


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint rules and formatting."""
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def types(session: nox.Session) -> None:
    """mypy: strict on the kernel, default strictness elsewhere."""
    session.run("mypy", "packages/koboi-core/src")
    others = [
        str(p / "src")
        for name, p in MEMBERS.items()
        if name != "koboi-core" and (p / "src").is_dir()
    ]
    session.run("mypy", *others)


@nox.session
@nox.parametrize("package", TESTED)
def member(session: nox.Session, package: str) -> None:
    """One member's tests in an environment with only that member and its dependencies."""
    env_dir = ROOT / ".nox" / f"member-{package}"
    env = {"UV_PROJECT_ENVIRONMENT": str(env_dir), "VIRTUAL_ENV": str(env_dir), **PYTEST_ENV}
    session.run(
        "uv",
        "sync",
        "--locked",
        "--package",
        package,
        "--no-default-groups",
        "--group",
        "test",
        env=env,
        external=True,
    )
    python = env_dir / "bin" / "python"
    session.run(
        str(python),
        "-m",
        "pytest",
        str(MEMBERS[package] / "tests"),
        "-q",
        "-p",
        "no:cacheprovider",
        *session.posargs,
        env=env,
        external=True,
    )


@nox.session
def tests(session: nox.Session) -> None:
    """Everything installed together: every member's tests and the cross-package tests/.

    A member's tests marked ``slow`` (real servers, killed processes) already ran
    in that member's own session; they are not run a second time here, to keep
    the whole suite within its time budget. The cross-package tests/ all run.
    """
    paths = [str(MEMBERS[name] / "tests") for name in TESTED]
    session.run("pytest", *paths, "-q", "-m", "not slow", *session.posargs, env=PYTEST_ENV)
    session.run("pytest", "tests", "-q", *session.posargs, env=PYTEST_ENV)


@nox.session
def evals(session: nox.Session) -> None:
    """The repo's eval cases as CI runs them: offline, no key, byte-identical reports.

    The JUnit report goes to .nox/evals-junit.xml for CI to keep.
    """
    junit = ROOT / ".nox" / "evals-junit.xml"
    session.run(
        "koboi",
        "eval-test",
        "--mock",
        "evals/",
        "--junit",
        str(junit),
        *session.posargs,
        env=PYTEST_ENV,
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: print figures (never part of the default run)."""
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs)
