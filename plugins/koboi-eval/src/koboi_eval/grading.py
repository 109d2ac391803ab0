"""The LLM judge behind ``judge(rubric)``: an agent config whose model grades an answer.

The judge is an ordinary koboi agent built from a config (any provider), with
no tools and a private in-memory store. It is asked for a verdict as one JSON
object, ``{"pass": true|false, "reason": "..."}``; an answer that holds no such
object fails the check and says what the judge answered instead.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi_eval.matching import show

if TYPE_CHECKING:
    from koboi_eval.checks import Grader
    from koboi_eval.trace import Trace

#: Names a judge config when ``--judge`` is not given.
JUDGE_ENV = "KOBOI_EVAL_JUDGE"

INSTRUCTIONS = (
    "You grade the final answer of an AI agent against a rubric. Judge only what the "
    "rubric asks. Reply with one JSON object and nothing else: "
    '{"pass": true or false, "reason": "one sentence"}.'
)

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def prompt(rubric: str, trace: Trace) -> str:
    """What the judge is asked: the rubric, the conversation's input, the tools, the answer."""
    calls = "; ".join(str(r.as_call()) for r in trace.requests) or "none"
    inputs = "\n".join(f"- {text}" for text in trace.inputs)
    return (
        f"Rubric: {rubric}\n\n"
        f"User message(s):\n{inputs}\n\n"
        f"Tool calls the agent made: {calls}\n\n"
        f"The agent's final answer (outcome {trace.outcome}):\n{trace.output}"
    )


def parse_verdict(text: str) -> tuple[bool, str]:
    """(passed, reason) from the judge's answer; a non-verdict fails, saying what it was."""
    found = _OBJECT.search(text)
    data: Any = None
    if found is not None:
        try:
            data = json.loads(found.group(0))
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict) or not isinstance(data.get("pass"), bool):
        return False, f"the judge did not answer with a verdict: {show(text[:300])}"
    return bool(data["pass"]), str(data.get("reason") or "no reason given")


class ConfigJudge:
    """A judge built from an agent config file."""

    def __init__(self, config: Path) -> None:
        self.config = config

    def _agent_config(self) -> Any:
        from koboi.config import load_env_files, read_with_extends, validate_config
        from koboi_eval.assembly import plugin_host

        raw = read_with_extends(self.config)
        raw["store"] = {"url": "memory://"}
        raw["tools"] = {**(raw.get("tools") or {}), "builtin": []}
        agent = dict(raw.get("agent") or {})
        agent["system_prompt"] = INSTRUCTIONS
        raw["agent"] = agent
        load_env_files(self.config.parent.resolve())
        return validate_config(
            raw, plugin_host().catalog(), source=self.config, base_dir=self.config.parent.resolve()
        )

    async def grade(self, rubric: str, trace: Trace) -> tuple[bool, str]:
        from koboi.agent import KoboiAgent
        from koboi_eval.assembly import plugin_host

        agent = KoboiAgent(self._agent_config(), host=plugin_host())
        async with agent:
            result = await agent.run(prompt(rubric, trace))
        if result.outcome != "completed":
            return False, f"the judge's run ended with {result.outcome}: {result.error}"
        return parse_verdict(result.output)


def judge_finder(default: Path | None) -> tuple[Any, str]:
    """``(judge_for, no_judge_reason)`` for a :class:`~koboi_eval.checks.CheckContext`.

    A check's own config wins; else ``default`` (``--judge``), else ``$KOBOI_EVAL_JUDGE``.
    """
    fallback = default
    if fallback is None and os.environ.get(JUDGE_ENV, "").strip():
        fallback = Path(os.environ[JUDGE_ENV].strip())

    def judge_for(own: Path | None) -> Grader | None:
        chosen = own or fallback
        return ConfigJudge(chosen) if chosen is not None else None

    reason = f"no judge model: pass --judge CONFIG or set {JUDGE_ENV} to an agent config"
    return judge_for, reason
