"""What the sandbox costs: starting a confined process, and a path-checked file open.

1. Starting `true` and waiting for it, median and min of N interleaved runs:
   plain `subprocess.run(["true"])` (the reference), koboi's passthrough
   sandbox, `restricted` (own session, PID namespace, rlimits, clean
   environment, unprivileged user when root) and `restricted` +
   `isolation: hard` (plus Landlock and the seccomp filter). Target:
   restricted and hard under 2x the plain subprocess.
2. Opening and reading a small file: plain `open()` against
   `koboi_sandbox.paths.open_inside` (openat2 with RESOLVE_BENEATH, and the
   component-by-component walk used where openat2 is missing).

    uv run python benchmarks/sandbox/bench_sandbox.py            # ~30 s
    uv run python benchmarks/sandbox/bench_sandbox.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from koboi.sandbox import PassthroughSandbox
from koboi_sandbox import paths
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import RestrictedSandbox, required_gaps


def line(label: str, values: list[float], reference: float | None = None) -> None:
    median = statistics.median(values)
    ratio = f"   {median / reference:5.2f}x plain" if reference else ""
    print(f"  {label:<34} median {median * 1e3:8.3f} ms   min {min(values) * 1e3:8.3f} ms{ratio}")


async def processes(runs: int, root: Path) -> None:
    print(f"\n1. Start `true` and wait for it ({runs} runs each, interleaved)")
    sandboxes: dict[str, object] = {"passthrough": PassthroughSandbox(root)}
    sandboxes["restricted"] = RestrictedSandbox(RestrictedOptions(workdir=str(root / "std")))
    hard = RestrictedOptions(workdir=str(root / "hard"), isolation="hard")
    gaps = required_gaps(hard, probe())
    if gaps:
        print(f"  (hard skipped: {'; '.join(gaps)})")
    else:
        sandboxes["restricted + hard"] = RestrictedSandbox(hard)
    true = shutil.which("true") or "/bin/true"

    def plain() -> None:
        subprocess.run([true], check=True)

    def with_preexec() -> None:
        # Any preexec_fn makes CPython fork() the whole interpreter instead of vfork():
        # the floor of every confinement applied in the child.
        subprocess.run([true], check=True, preexec_fn=os.setsid)

    references = {"plain subprocess.run": plain, "subprocess.run + preexec_fn": with_preexec}
    timings: dict[str, list[float]] = {name: [] for name in [*references, *sandboxes]}
    for _ in range(runs):
        for name, fn in references.items():
            started = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - started)
        for name, sandbox in sandboxes.items():
            run: Callable[..., Awaitable[object]] = sandbox.run_process  # type: ignore[attr-defined]
            started = time.perf_counter()
            result = await run(["true"], timeout=10, session_id="bench")
            timings[name].append(time.perf_counter() - started)
            assert getattr(result, "returncode", None) == 0, result
    reference = statistics.median(timings["plain subprocess.run"])
    for name, values in timings.items():
        line(name, values, None if name == "plain subprocess.run" else reference)


def files(runs: int, root: Path) -> None:
    print(f"\n2. Open and read a 1 KiB file ({runs} runs each)")
    workdir = root / "files"
    (workdir / "a" / "b").mkdir(parents=True)
    target = workdir / "a" / "b" / "notes.txt"
    target.write_bytes(b"x" * 1024)

    def plain() -> None:
        with open(target, "rb") as handle:
            handle.read()

    def inside() -> None:
        fd = paths.open_inside(workdir, "a/b/notes.txt")
        try:
            os.read(fd, 4096)
        finally:
            os.close(fd)

    results: dict[str, list[float]] = {
        "plain open()": [],
        "open_inside (openat2)": [],
        "open_inside (walk)": [],
    }
    for _ in range(runs):
        for name, fn, force_walk in (
            ("plain open()", plain, None),
            ("open_inside (openat2)", inside, None),
            ("open_inside (walk)", inside, False),
        ):
            paths._openat2_works = (
                force_walk
                if force_walk is not None
                else (None if paths._openat2_works is False else paths._openat2_works)
            )
            started = time.perf_counter()
            fn()
            results[name].append(time.perf_counter() - started)
        paths._openat2_works = None
    reference = statistics.median(results["plain open()"])
    for name, values in results.items():
        median = statistics.median(values)
        extra = "" if name.startswith("plain") else f"   {median / reference:5.2f}x plain"
        print(f"  {name:<34} median {median * 1e6:8.2f} us  min {min(values) * 1e6:8.2f} us{extra}")


async def main(quick: bool) -> None:
    caps = probe()
    print(
        f"python {platform.python_version()}, Linux {os.uname().release}, root={caps.root}, "
        f"Landlock ABI {caps.landlock_abi}, seccomp={caps.seccomp}, PID namespaces={caps.pid_namespaces}"
    )
    root = Path(tempfile.mkdtemp(prefix="koboi-bench-sandbox-"))
    os.chmod(root, 0o755)  # the sandbox user must reach the workdirs
    try:
        await processes(30 if quick else 300, root)
        files(2000 if quick else 20000, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer runs")
    anyio.run(main, parser.parse_args().quick)
