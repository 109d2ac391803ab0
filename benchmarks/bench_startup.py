"""Start-up time of the ``koboi`` command compared with importing pydantic.

Times (median of N fresh processes, interleaved) ``koboi --help`` and
``koboi plugins list`` against ``python -c "import pydantic"`` and a bare
``python -c pass``, then shows what each command imports (``-X importtime``):
module count, whether heavy modules were pulled in, and the top 10 cumulative
import costs.

    uv run python benchmarks/bench_startup.py            # 15 runs per command
    uv run python benchmarks/bench_startup.py --quick    # 5 runs, smoke test
    uv run python benchmarks/bench_startup.py --runs 31

Target: each koboi command within 1.5x of ``python -c "import pydantic"``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

TARGET_RATIO = 1.5
PYTHON = sys.executable
KOBOI = Path(sys.executable).parent / "koboi"
HEAVY = (
    "httpx", "sqlalchemy", "fastapi", "uvicorn", "starlette", "rich", "openai", "anthropic",
    "koboi.loop", "koboi.agent", "koboi.config", "koboi.plugins", "yaml", "pydantic",
    "importlib.metadata",
)  # fmt: skip

#: Runs the CLI in-process the way the script does, then dumps sys.modules to argv[1].
CLI_SNIPPET = """\
import json, sys
out = sys.argv[1]
sys.argv = ["koboi", *sys.argv[2:]]
try:
    from koboi_cli.app import main
    main()
except SystemExit:
    pass
finally:
    with open(out, "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""
PLAIN_SNIPPET = """\
import json, sys
try:
    exec(sys.argv[2])
finally:
    with open(sys.argv[1], "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""


#: What any program that defines a pydantic model pays: pydantic's top level is lazy, so
#: ``import pydantic`` alone skips the schema machinery and the plugin entry-point scan.
ONE_MODEL = "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int"


@dataclass
class Command:
    label: str
    argv: list[str]
    #: How to reproduce it in-process for -X importtime: ("cli", args) or ("code", source).
    kind: str
    payload: list[str]
    times: list[float] = field(default_factory=list)
    error: str | None = None


def commands() -> list[Command]:
    return [
        Command("python -c pass", [PYTHON, "-c", "pass"], "code", ["pass"]),
        Command(
            'python -c "import pydantic"',
            [PYTHON, "-c", "import pydantic"],
            "code",
            ["import pydantic"],
        ),
        Command(
            "pydantic + one model (ref.)",
            [PYTHON, "-c", ONE_MODEL],
            "code",
            [ONE_MODEL],
        ),
        Command(
            "import importlib.metadata (ref.)",
            [PYTHON, "-c", "import importlib.metadata"],
            "code",
            ["import importlib.metadata"],
        ),
        Command("koboi --help", [str(KOBOI), "--help"], "cli", ["--help"]),
        Command("koboi plugins list", [str(KOBOI), "plugins", "list"], "cli", ["plugins", "list"]),
    ]


def env() -> dict[str, str]:
    # No bytecode writes, no user site noise; keep PATH etc.
    result = dict(os.environ)
    result.pop("PYTHONDONTWRITEBYTECODE", None)
    result.pop("PYTHONPROFILEIMPORTTIME", None)
    return result


def time_once(cmd: Command, cwd: str) -> None:
    if cmd.error:
        return
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd.argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        cmd.error = f"{type(exc).__name__}: {exc}"
        return
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        cmd.error = f"exit code {proc.returncode}: {tail[0][:200]}"
        return
    cmd.times.append(elapsed)


@dataclass
class Imports:
    count: int
    modules: set[str]
    top: list[tuple[int, int, str]]  # (cumulative us, self us, name with nesting)
    total_us: int


def import_profile(cmd: Command, cwd: str) -> Imports | str:
    """Run the command in-process under -X importtime; return its imports or an error."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        dump = fh.name
    try:
        if cmd.kind == "cli":
            argv = [PYTHON, "-X", "importtime", "-c", CLI_SNIPPET, dump, *cmd.payload]
        else:
            argv = [PYTHON, "-X", "importtime", "-c", PLAIN_SNIPPET, dump, cmd.payload[0]]
        proc = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=60)
        try:
            modules = set(json.loads(Path(dump).read_text()))
        except (OSError, ValueError):
            tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
            return f"could not run in-process: {tail[0][:200]}"
    finally:
        Path(dump).unlink(missing_ok=True)
    rows: list[tuple[int, int, str]] = []
    total = 0
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        # "import time:       123 |        456 |   package.module"
        self_us, cumulative, name = line.split(":", 1)[1].split("|", 2)
        self_us_i, cum_i = int(self_us), int(cumulative)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((cum_i, self_us_i, "  " * depth + name.strip()))
        total += self_us_i
    rows.sort(reverse=True)
    return Imports(count=len(rows), modules=modules, top=rows[:10], total_us=total)


#: Simulates a lazy ``koboi/__init__.py`` (PEP 562): the package module exists but
#: imports nothing, so ``import koboi.plugins`` loads only what plugins.py needs.
LAZY_KOBOI = """\
import importlib.util, sys, types
spec = importlib.util.find_spec("koboi")
pkg = types.ModuleType("koboi")
pkg.__path__ = list(spec.submodule_search_locations)
sys.modules["koboi"] = pkg
"""
CATALOG = "from koboi.plugins import default_host; default_host().catalog()\n"
NO_TOOLS_BASIC = "import os; os.environ['KOBOI_DISABLE_PLUGINS'] = 'tools-basic'\n"
HELP = (
    "import sys; sys.argv = ['koboi', '--help']\nfrom koboi_cli.app import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
)
BREAKDOWN = [
    ("python -c pass", "pass"),
    ("import pydantic", "import pydantic"),
    ("import typer", "import typer"),
    ("import pydantic, typer", "import pydantic, typer"),
    ("import koboi_cli.app", "import koboi_cli.app"),
    ("import koboi  (today's eager __init__: agent, loop, config...)", "import koboi"),
    ("import koboi.plugins  (eager __init__)", "import koboi.plugins"),
    ("import koboi.plugins  (simulated lazy __init__)", LAZY_KOBOI + "import koboi.plugins"),
    ("import koboi.messages  (simulated lazy __init__)", LAZY_KOBOI + "import koboi.messages"),
    ("import koboi.tools  (simulated lazy __init__)", LAZY_KOBOI + "import koboi.tools"),
    ("import koboi.config  (simulated lazy __init__)", LAZY_KOBOI + "import koboi.config"),
    ("plugins loaded + catalog  (eager __init__)", CATALOG),
    ("plugins loaded + catalog  (lazy __init__)", LAZY_KOBOI + CATALOG),
    (
        "plugins loaded + catalog  (lazy __init__, tools-basic disabled)",
        NO_TOOLS_BASIC + LAZY_KOBOI + CATALOG,
    ),
    ("koboi --help in-process  (as today)", HELP),
    ("koboi --help in-process  (lazy __init__)", LAZY_KOBOI + HELP),
    (
        "koboi --help in-process  (lazy __init__, tools-basic disabled)",
        NO_TOOLS_BASIC + LAZY_KOBOI + HELP,
    ),
]


def breakdown(runs: int) -> None:
    """Fresh-process median wall time of import snippets: where start-up time goes."""
    results: dict[str, list[float]] = {label: [] for label, _ in BREAKDOWN}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as cwd:
        for i in range(runs + 1):  # the first round only warms caches
            for label, code in BREAKDOWN:
                if label in errors:
                    continue
                start = time.perf_counter()
                proc = subprocess.run(
                    [PYTHON, "-c", code], cwd=cwd, env=env(), capture_output=True, text=True
                )
                elapsed = time.perf_counter() - start
                if proc.returncode != 0:
                    errors[label] = (proc.stderr.strip().splitlines() or ["?"])[-1][:160]
                elif i:
                    results[label].append(elapsed)
    print(f"\nstart-up breakdown: fresh process, {runs} runs (ms)")
    print(f"  {'median':>8} {'min':>8}  snippet")
    for label, _ in BREAKDOWN:
        if label in errors:
            print(f"  {'error':>17}  {label}: {errors[label]}")
            continue
        times = [t * 1000 for t in results[label]]
        print(f"  {statistics.median(times):>8.1f} {min(times):>8.1f}  {label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="processes per command (default 15; 5 quick)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 runs per command")
    parser.add_argument(
        "--breakdown", action="store_true", help="also time import snippets: where time goes"
    )
    args = parser.parse_args()
    runs = args.runs or (5 if args.quick else 15)

    print(f"koboi start-up - Python {platform.python_version()} ({PYTHON})")
    cmds = commands()
    if not KOBOI.exists():
        found = shutil.which("koboi")
        note = f" (another one is on PATH: {found}; not used)" if found else ""
        print(f"NOTE: {KOBOI} does not exist - is koboi-cli installed in this venv?{note}")
        for cmd in cmds:
            if cmd.kind == "cli":
                cmd.error = "koboi script not installed"

    with tempfile.TemporaryDirectory() as cwd:  # neutral cwd: no .env, no configs
        for cmd in cmds:  # warm the OS page cache and .pyc files
            time_once(cmd, cwd)
            cmd.times.clear()
        for _ in range(runs):  # interleaved, so drift hits every command alike
            for cmd in cmds:
                time_once(cmd, cwd)
        profiles = {
            cmd.label: import_profile(cmd, cwd)
            for cmd in cmds
            if not cmd.error and not cmd.label.endswith("(ref.)")
        }

    print(f"\nwall time of a fresh process, {runs} runs each (ms):")
    print(f"  {'command':<34} {'median':>8} {'min':>8} {'max':>8}")
    for cmd in cmds:
        if cmd.error or not cmd.times:
            print(f"  {cmd.label:<34} not measured: {cmd.error}")
            continue
        t = [x * 1000 for x in cmd.times]
        print(f"  {cmd.label:<34} {statistics.median(t):>8.1f} {min(t):>8.1f} {max(t):>8.1f}")

    base = next(c for c in cmds if c.label == 'python -c "import pydantic"')
    print(f"\ntarget: within {TARGET_RATIO}x of {base.label}")
    if base.times:
        base_median = statistics.median(base.times)
        for cmd in cmds:
            if cmd.kind != "cli":
                continue
            if cmd.error or not cmd.times:
                print(f"  {cmd.label:<30} -")
                continue
            ratio = statistics.median(cmd.times) / base_median
            verdict = "MEETS" if ratio <= TARGET_RATIO else "MISSES"
            ref = next(c for c in cmds if c.label.startswith("pydantic + one model"))
            extra = ""
            if ref.times:
                extra = (
                    f"   ({statistics.median(cmd.times) / statistics.median(ref.times):.2f}x "
                    "of pydantic + one model)"
                )
            print(f"  {cmd.label:<30} {ratio:5.2f}x  {verdict}{extra}")

    for cmd in cmds:
        prof = profiles.get(cmd.label)
        if prof is None:
            continue
        print(f"\nimports of `{cmd.label}`:")
        if isinstance(prof, str):
            print(f"  {prof}")
            continue
        print(
            f"  {prof.count} modules imported under -X importtime "
            f"(sum of self times {prof.total_us / 1000:.1f} ms; {len(prof.modules)} in sys.modules)"
        )
        flags = ", ".join(f"{m}={'YES' if m in prof.modules else 'no'}" for m in HEAVY)
        print(f"  heavy modules: {flags}")
        print("  top 10 cumulative import costs (us; nesting shown by indent):")
        for cumulative, self_us, name in prof.top:
            print(f"    {cumulative:>8} cum {self_us:>7} self  {name}")

    if args.breakdown:
        breakdown(runs)


if __name__ == "__main__":
    main()
