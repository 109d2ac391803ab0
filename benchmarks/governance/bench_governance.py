"""Added latency of the governance decision pipeline per tool call.

Two measurements:

1. **The decision itself** (in-process, no I/O): the mode → policy →
   guardrails → trust stages (``DecisionStage.before_tool_call``) for calls
   that need no approval, with no policy and with a policy of 100 rules, for a
   file tool and a shell command of three segments; plus the redaction the
   kernel applies to each journal event.
2. **End to end**: an N-step run of an instant model calling a trivial safe
   tool, with koboi-governance (100-rule policy) and with the plugin disabled
   (``KOBOI_DISABLE_PLUGINS=governance``); the difference per step is what the
   whole pipeline adds, redaction of events and audit records included.

    uv run python benchmarks/governance/bench_governance.py          # ~20 s
    uv run python benchmarks/governance/bench_governance.py --quick  # smoke run

Target: under 0.2 ms per tool call without approval, with 100 rules.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

TARGET_MS = 0.2


def hundred_rules() -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    for i in range(40):
        rules.append({"tool": f"tool_{i}", "action": "allow"})
    for i in range(20):
        rules.append({"tool": "write_file", "args": {"path": f"area{i}/**"}, "action": "allow"})
    for i in range(20):
        rules.append({"tool": "run_shell", "command": f"cmd{i} *", "action": "deny"})
    for i in range(10):
        rules.append({"tool": f"git_{i}*", "action": "ask"})
    rules.append(
        {"tool": "run_shell", "command": ["ls*", "git status*", "grep *"], "action": "allow"}
    )
    rules.append({"tool": "write_file", "args": {"path": "**/.env"}, "action": "deny"})
    rules.append({"tool": "look", "action": "allow"})
    for i in range(7):
        rules.append({"tool": "*", "args": {"marker": f"m{i}"}, "action": "deny"})
    assert len(rules) == 100
    return {"policy": {"rules": rules}}


def decision_micro(repeats: int, calls: int) -> None:
    from koboi import KoboiAgent, Risk, tool
    from koboi.interceptors import PendingToolCall, RunInfo
    from koboi.messages import ToolCall
    from koboi_governance.assemble import build_redactor
    from koboi_governance.pipeline import DecisionStage, KernelRedaction
    from koboi_governance.settings import GovernanceSection

    @tool(name="write_file", risk=Risk.MODERATE)
    def write_file(path: str, content: str) -> str:
        """Write."""
        return ""

    @tool(name="run_shell", risk=Risk.DESTRUCTIVE)
    def run_shell(command: str) -> str:
        """Run."""
        return ""

    agent = KoboiAgent.from_dict(
        {"agent": {"mode": "yolo"}, "llm": {"provider": "scripted"}, "store": {"url": "memory://"}}
    )
    cases = {
        "write_file src/… ": (write_file, {"path": "area7/pkg/module.py", "content": "x" * 200}),
        "run_shell 3 segments": (run_shell, {"command": "ls -la && git status | grep modified"}),
    }
    event = {
        "step": 3,
        "call_id": "call_1",
        "name": "write_file",
        "arguments": {"path": "area7/pkg/module.py", "content": "x" * 200},
        "idempotent": False,
    }
    print("1. the decision, in process (µs per call; median of repeats, min in brackets)")
    for label, settings in (
        ("no policy", GovernanceSection()),
        ("100 rules", GovernanceSection.model_validate(hundred_rules())),
    ):
        redactor = build_redactor(settings, agent.config)
        kernel_redaction = KernelRedaction(redactor)
        stage = DecisionStage(settings, redactor)
        info = RunInfo(session_id="s", step=1, config=agent.config)
        for name, (tool_obj, arguments) in cases.items():
            call = ToolCall(id="c", name=tool_obj.name, arguments=arguments)
            pending = PendingToolCall(
                call=call, tool=tool_obj, args=tool_obj.parse_arguments(arguments), step=1
            )

            async def run(stage: Any = stage, pending: Any = pending, info: Any = info) -> float:
                start = time.perf_counter()
                for _ in range(calls):
                    verdict = await stage.before_tool_call(pending, info)
                    assert verdict is not None and verdict.action != "deny", verdict
                return (time.perf_counter() - start) / calls * 1e6

            per = [asyncio.run(run()) for _ in range(repeats)]
            print(f"   {label:<10} {name:<22} {statistics.median(per):7.1f} µs  [{min(per):.1f}]")
        per = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                kernel_redaction.redact_data(event)
            per.append((time.perf_counter() - start) / calls * 1e6)
        print(
            f"   {label:<10} {'redact one event':<22} {statistics.median(per):7.1f} µs  [{min(per):.1f}]"
        )


CHILD = r"""
import asyncio, json, sys, time
from koboi import KoboiAgent, ModelProvider, ModelResponse, Message, ToolCall, Usage, tool

steps = int(sys.argv[1]); governance = json.loads(sys.argv[2])

class Instant(ModelProvider):
    name = "instant"
    async def complete(self, request):
        n = sum(1 for m in request.messages if m.role == "assistant")
        if n < steps - 1:
            call = ToolCall(id=f"c{n}", name="look", arguments={"what": str(n)})
            return ModelResponse(message=Message.assistant(tool_calls=(call,)), usage=Usage(input_tokens=1, output_tokens=1))
        return ModelResponse(message=Message.assistant("done"), usage=Usage(input_tokens=1, output_tokens=1))

@tool(name="look", idempotent=True, thread=False)
def look(what: str) -> str:
    "Look."
    return "seen " + what

async def main():
    config = {"agent": {"stream": False, "max_iterations": steps + 1}, "llm": {"provider": "scripted"}, "store": {"url": "memory://"}}
    if governance is not None:
        config["governance"] = governance
    best = None
    for _ in range(int(sys.argv[3])):
        agent = KoboiAgent.from_dict(config, provider=Instant(), extra_tools=[look])
        async with agent:
            start = time.perf_counter()
            result = await agent.run("go")
            took = time.perf_counter() - start
        assert result.steps == steps, result
        best = took if best is None else min(best, took)
    print(best / steps * 1000)

asyncio.run(main())
"""


def end_to_end(steps: int, repeats: int, rounds: int) -> None:
    print(
        f"\n2. end to end: {steps}-step runs, ms per step (min of {repeats} runs; median of {rounds} rounds)"
    )
    results: dict[str, list[float]] = {"without governance": [], "with governance, 100 rules": []}
    for _ in range(rounds):
        for label in results:
            env = dict(os.environ)
            governance: Any = hundred_rules()
            if label.startswith("without"):
                env["KOBOI_DISABLE_PLUGINS"] = "governance"
                governance = None
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(steps), json.dumps(governance), str(repeats)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            results[label].append(float(done.stdout.strip()))
    medians = {label: statistics.median(values) for label, values in results.items()}
    for label, value in medians.items():
        print(f"   {label:<28} {value:.3f} ms/step  {sorted(round(v, 3) for v in results[label])}")
    added = medians["with governance, 100 rules"] - medians["without governance"]
    verdict = "within" if added < TARGET_MS else "OVER"
    print(
        f"   added by the pipeline:       {added:.3f} ms per tool call ({verdict} the {TARGET_MS} ms target)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run")
    args = parser.parse_args()
    decision_micro(repeats=3 if args.quick else 7, calls=200 if args.quick else 2000)
    end_to_end(
        steps=100 if args.quick else 500,
        repeats=2 if args.quick else 5,
        rounds=1 if args.quick else 3,
    )


if __name__ == "__main__":
    main()
