"""What command hooks and skills cost.

1. **A no-op command hook per tool call, process start included**: an N-step run
   of an instant model calling a trivial safe tool, without hooks and with one
   before_tool_call hook (``/bin/true``, and a bash script that reads its stdin),
   through the ``passthrough`` sandbox and, where the machine has it, the
   ``restricted`` one. The difference per call is what a hook adds: building the
   event, starting the process in the sandbox, reading its answer, journaling and
   auditing the decision. The floor beside it: ``sandbox.run_process(["/bin/true"])``
   alone, measured in the same run.
2. **Skills discovery with 100 skills**: reading and validating 100 SKILL.md
   folders and rendering the list the model sees, against the reference library
   (``skills_ref.validate`` + ``read_properties``) on the same folders.

    uv run python benchmarks/hooks/bench_hooks.py          # ~30 s
    uv run python benchmarks/hooks/bench_hooks.py --quick  # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _agent(
    steps: int, hooks: dict[str, Any] | None, sandbox: dict[str, Any], base: Path, ran: list[int]
) -> Any:
    import koboi_hooks.plugin
    import koboi_scripted.plugin
    from koboi import AllowAllApprover, KoboiAgent, PluginHost, tool
    from koboi.store import InMemoryStore
    from koboi_testing.models import InOrderModel

    @tool(name="look", risk="safe", idempotent=True, thread=False)
    def look(n: int) -> str:
        """Return n.

        Args:
            n: A number.
        """
        ran.append(n)
        return str(n)

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_hooks.plugin, "hooks", dist="koboi-hooks")
    if sandbox.get("backend") == "restricted":
        from koboi_sandbox import plugin as sandbox_plugin

        host.add_plugin(sandbox_plugin, "sandbox", dist="koboi-sandbox")
    turns: list[Any] = [{"name": "look", "arguments": {"n": i}} for i in range(steps)] + ["done"]
    config: dict[str, Any] = {
        "llm": {"provider": "scripted"},
        "agent": {"stream": False, "max_iterations": steps + 5},
        "sandbox": sandbox,
    }
    if hooks is not None:
        config["hooks"] = hooks
    return KoboiAgent.from_dict(
        config,
        host=host,
        base_dir=base,
        provider=InOrderModel(turns),
        store=InMemoryStore(),
        extra_tools=[look],
        approver=AllowAllApprover(),
    )


async def _run_seconds(
    steps: int, hooks: dict[str, Any] | None, sandbox: dict[str, Any], base: Path
) -> float:
    ran: list[int] = []
    agent = _agent(steps, hooks, sandbox, base, ran)
    async with agent:
        started = time.perf_counter()
        result = await agent.run("go")
        seconds = time.perf_counter() - started
    # Every call must have run: a refused call (a failing hook) would flatter the figures.
    assert result.outcome == "completed" and len(ran) == steps, (result.error, len(ran))
    return seconds


async def _floor_ms(sandbox_options: dict[str, Any], base: Path, count: int) -> float:
    """``run_process(["/bin/true"])`` alone, per call, in the same sandbox."""
    agent = _agent(1, None, sandbox_options, base, [])
    async with agent:
        sandbox = agent.sandbox
        assert sandbox is not None
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await sandbox.run_process(
                ["/bin/true"], env={"PATH": "/usr/bin:/bin"}, timeout=10, session_id="bench"
            )
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def hooks_bench(steps: int, repeats: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="koboi-bench-hooks-"))
    base.chmod(0o755)
    # The hook script lives beside the config's folder: a restricted sandbox never lets a
    # process read the config's folder, so it is listed under read_only instead.
    scripts = base / "hooks"
    scripts.mkdir()
    scripts.chmod(0o755)
    script = scripts / "noop.sh"
    script.write_text("#!/bin/bash\ncat >/dev/null\nexit 0\n")
    script.chmod(0o755)
    variants: dict[str, dict[str, Any] | None] = {
        "no hook": None,
        "/bin/true": {"before_tool_call": [{"command": ["/bin/true"]}]},
        "bash reads stdin": {"before_tool_call": [{"command": ["/bin/bash", str(script)]}]},
        "before + after (2 x /bin/true)": {
            "before_tool_call": [{"command": ["/bin/true"]}],
            "after_tool_call": [{"command": ["/bin/true"]}],
        },
    }
    sandboxes: dict[str, dict[str, Any]] = {
        "passthrough": {"backend": "passthrough", "workdir": str(base / "work")},
    }
    try:
        from koboi_sandbox.options import RestrictedOptions
        from koboi_sandbox.probe import probe
        from koboi_sandbox.restricted import required_gaps

        if not required_gaps(RestrictedOptions(isolation="standard"), probe()):
            sandboxes["restricted (standard)"] = {
                "backend": "restricted",
                "workdir": str(base / "workdirs"),
                "read_only": [str(scripts)],
            }
    except ImportError:
        pass
    (base / "work").mkdir()
    config_dir = base / "config"
    config_dir.mkdir()
    print(f"\n1. a no-op command hook per tool call ({steps}-step runs, median of {repeats})")
    print(
        f"   {'sandbox':<22} {'hook':<32} {'run ms':>9} {'per call ms':>12} "
        f"{'added ms/call':>14} {'added (min)':>12}"
    )
    try:
        for sandbox_name, options in sandboxes.items():
            floor = asyncio.run(_floor_ms(options, config_dir, max(repeats * 5, 20)))
            baseline: tuple[float, float] | None = None
            for name, hooks in variants.items():
                runs = [
                    asyncio.run(_run_seconds(steps, hooks, options, config_dir))
                    for _ in range(repeats)
                ]
                median = statistics.median(runs)
                per_call = median / steps * 1000
                fastest = min(runs) / steps * 1000
                if baseline is None:
                    baseline = (per_call, fastest)
                print(
                    f"   {sandbox_name:<22} {name:<32} {median * 1000:>9.1f} {per_call:>12.3f} "
                    f"{per_call - baseline[0]:>14.3f} {fastest - baseline[1]:>12.3f}"
                )
            print(
                f"   {sandbox_name:<22} {'floor: run_process(/bin/true)':<32} {'':>9} {floor:>12.3f}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _skill_folders(root: Path, count: int) -> None:
    for index in range(count):
        folder = root / f"skill-{index:03d}"
        (folder / "references").mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: skill-{index:03d}\ndescription: Does task number {index}. Use when the "
            f"user asks for task {index} or anything like it.\nlicense: MIT\nmetadata:\n"
            f"  author: bench\n---\n# Skill {index}\n" + "Step by step instructions.\n" * 40
        )
        (folder / "references" / "notes.md").write_text("notes\n" * 20)


def skills_bench(count: int, repeats: int) -> None:
    import skills_ref

    from koboi_skills.discovery import discover
    from koboi_skills.session import catalog_entries, render_catalog
    from koboi_skills.settings import SkillsSettings

    root = Path(tempfile.mkdtemp(prefix="koboi-bench-skills-"))
    try:
        _skill_folders(root / "skills", count)
        settings = SkillsSettings(search_paths=["skills"], budget_tokens=200_000)
        ours: list[float] = []
        reference: list[float] = []
        for _ in range(repeats):
            started = time.perf_counter()
            library = discover(settings, root)
            text, listed = render_catalog(catalog_entries(library), settings.budget_tokens)
            ours.append(time.perf_counter() - started)
            assert len(library.skills) == count and listed == count, library.problems
            started = time.perf_counter()
            for folder in sorted((root / "skills").iterdir()):
                assert skills_ref.validate(folder) == []
                skills_ref.read_properties(folder)
            reference.append(time.perf_counter() - started)
        print(f"\n2. skills discovery with {count} skills (median of {repeats}, min in brackets)")
        print(
            f"   koboi-skills discover + list : {statistics.median(ours) * 1000:8.1f} ms "
            f"[{min(ours) * 1000:.1f}]  ({len(text)} characters listed)"
        )
        print(
            f"   skills-ref validate + read   : {statistics.median(reference) * 1000:8.1f} ms "
            f"[{min(reference) * 1000:.1f}]  (the reference library, same folders)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args()
    steps, repeats = (10, 1) if args.quick else (50, 5)
    hooks_bench(steps, repeats)
    skills_bench(100, 2 if args.quick else 7)


if __name__ == "__main__":
    main()
