"""What the sandbox costs: starting a confined process, and a path-checked file open.

1. Starting `true` and waiting for it, median and min of N interleaved runs:
   plain `subprocess.run(["true"])` (the reference), koboi's passthrough
   sandbox, `restricted` (own session, PID namespace, rlimits, clean
   environment, a uid of the session's own when root, Landlock where the
   kernel has it), the same without Landlock (what Landlock adds to a start),
   and `restricted` + `isolation: hard` (plus the seccomp filter). Target:
   restricted and hard under 3x `subprocess.run` with a `preexec_fn` — the floor
   of any confinement applied in the child, which makes CPython fork() its whole
   interpreter instead of vfork() (so "2x the plain subprocess", an earlier
   target, cannot be met by any confined start; the ratios to it are printed
   too). A round that misses the target is measured again (up to 3 rounds in
   all: a busy machine makes one round noisy); the script exits 1 when the best
   round still misses it, or a level could not be measured.
2. Opening and reading a small file: plain `open()` against
   `koboi_confine.paths.open_inside` (openat2 with RESOLVE_BENEATH, and the
   component-by-component walk used where openat2 is missing).
3. A long-lived process (`open_process`): start `cat`, one line there and back,
   close (kill the tree and reap it), for each sandbox.

    uv run python benchmarks/sandbox/bench_sandbox.py            # ~30 s
    uv run python benchmarks/sandbox/bench_sandbox.py --quick    # smoke run

Exit status: 0 when every target holds, 1 otherwise (the reason is printed last).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from koboi.sandbox import PassthroughSandbox, Sandbox
from koboi_confine import paths
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import RestrictedSandbox, required_gaps


def line(label: str, values: list[float], reference: float | None = None) -> None:
    median = statistics.median(values)
    ratio = f"   {median / reference:5.2f}x plain" if reference else ""
    print(f"  {label:<34} median {median * 1e3:8.3f} ms   min {min(values) * 1e3:8.3f} ms{ratio}")


def make_sandboxes(root: Path) -> dict[str, Sandbox]:
    caps = probe()
    sandboxes: dict[str, Sandbox] = {"passthrough": PassthroughSandbox(root)}
    sandboxes["restricted"] = RestrictedSandbox(RestrictedOptions(workdir=str(root / "std")))
    if caps.landlock_abi:
        bare = dataclasses.replace(caps, landlock_abi=0, landlock_reason="off for the bench")
        sandboxes["restricted without Landlock"] = RestrictedSandbox(
            RestrictedOptions(workdir=str(root / "bare")), capabilities=bare
        )
    hard = RestrictedOptions(workdir=str(root / "hard"), isolation="hard")
    gaps = required_gaps(hard, caps)
    if gaps:
        print(f"  (hard not measured: {'; '.join(gaps)})")
    else:
        sandboxes["restricted + hard"] = RestrictedSandbox(hard)
    return sandboxes


#: Section 1's target: a confined start costs less than this many starts of the floor.
START_TARGET = 3.0
#: The floor every confinement pays (a preexec_fn: fork() instead of vfork()).
FLOOR = "subprocess.run + preexec_fn"
#: Rounds of section 1 at most, while the target is missed.
START_ROUNDS = 3
#: The sandboxes the start target is about.
TARGETED = ("restricted", "restricted + hard")


async def processes(runs: int, root: Path) -> dict[str, float]:
    """Section 1; the ratio of each sandbox's median start to the floor's."""
    print(f"\n1. Start `true` and wait for it ({runs} runs each, interleaved)")
    sandboxes = make_sandboxes(root)
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
            run: Callable[..., Awaitable[object]] = sandbox.run_process
            started = time.perf_counter()
            result = await run(["true"], timeout=10, session_id="bench")
            timings[name].append(time.perf_counter() - started)
            assert getattr(result, "returncode", None) == 0, result
    reference = statistics.median(timings["plain subprocess.run"])
    for name, values in timings.items():
        line(name, values, None if name == "plain subprocess.run" else reference)
    floor = statistics.median(timings[FLOOR])
    return {name: statistics.median(timings[name]) / floor for name in sandboxes}


async def start_costs(runs: int, root: Path) -> list[str]:
    """Section 1, measured again while the target is missed; what still fails after."""
    best: dict[str, float] = {}
    for round_number in range(1, START_ROUNDS + 1):
        ratios = await processes(runs, root / f"round-{round_number}")
        for name, ratio in ratios.items():
            best[name] = min(ratio, best.get(name, ratio))
        missed = [n for n in TARGETED if best.get(n, START_TARGET) >= START_TARGET]
        if not missed:
            break
        if round_number < START_ROUNDS:
            print(f"  target missed by {', '.join(missed)}: measuring again")
    failures = [
        f"{name}: {best[name]:.2f}x the floor ({FLOOR}) in its best of {round_number} "
        f"round(s), target < {START_TARGET:g}x"
        for name in TARGETED
        if name in best and best[name] >= START_TARGET
    ]
    failures += [f"{name}: not measured on this machine" for name in TARGETED if name not in best]
    return failures


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


async def long_lived(runs: int, root: Path) -> None:
    print(f"\n3. open_process: start cat, one line there and back, close ({runs} runs each)")
    sandboxes = make_sandboxes(root / "long")
    timings: dict[str, list[float]] = {name: [] for name in sandboxes}
    for _ in range(runs):
        for name, sandbox in sandboxes.items():
            started = time.perf_counter()
            async with sandbox.open_process(["cat"], session_id="bench") as process:
                await process.stdin.send(b"ping\n")
                assert await process.stdout.receive() == b"ping\n"
            timings[name].append(time.perf_counter() - started)
    for name, values in timings.items():
        line(name, values)


async def main(quick: bool) -> list[str]:
    caps = probe()
    print(
        f"python {platform.python_version()}, Linux {os.uname().release}, root={caps.root}, "
        f"Landlock ABI {caps.landlock_abi}, seccomp={caps.seccomp}, PID namespaces={caps.pid_namespaces}"
    )
    root = Path(tempfile.mkdtemp(prefix="koboi-bench-sandbox-"))
    os.chmod(root, 0o755)  # the sandbox user must reach the workdirs
    try:
        failures = await start_costs(30 if quick else 300, root)
        files(2000 if quick else 20000, root)
        await long_lived(30 if quick else 200, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return failures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer runs")
    found = anyio.run(main, parser.parse_args().quick)
    if found:
        print("\nFAILED:\n" + "\n".join(f"  {failure}" for failure in found))
        sys.exit(1)
    print("\nevery target holds")
