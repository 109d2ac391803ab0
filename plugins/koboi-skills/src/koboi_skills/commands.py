"""``!`cmd``` preprocessing: a skill's body may ask for a command's output in its place.

A skill is code someone else wrote, so its commands run only when every gate
says yes, and each gate fails closed:

1. ``skills.commands.enabled`` (default false): off, a command never runs;
2. the skill is trusted by the config (``skills.commands.skills``), never by
   itself;
3. the sandbox isolates (``require_isolation``, default true): with
   ``passthrough`` commands are refused;
4. koboi-governance's shell policy **allows** the command as it would a
   ``run_shell`` call (``governance.policy`` rules, judged command by command,
   with everything the policy cannot see through refused). No matching rule, an
   ``ask`` or a ``deny`` all mean: not run. Without koboi-governance installed,
   nothing runs;
5. it runs through the session's sandbox (``ctx.run_process``: confinement,
   network rules, clean environment), with a timeout and an output cap.

A command that does not run is replaced by a notice saying why, never by its
text; the body, notices and outputs included, is the tool call's journaled
result. When commands are enabled, each command's fate is also journaled
(``skills.command``) and audited (``action: skill_command``) by the tool: such
a session, like one with command hooks, replays with ``--tools live`` (the
commands are processes); with commands off nothing of the sort is recorded and
the session replays with recorded tools.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from koboi.config import AgentConfig
from koboi.tools import ToolContext
from koboi_skills.settings import CommandSettings

COMMAND = re.compile(r"!`([^`\n]+)`")
MAX_COMMANDS = 20
COMMAND_EVENT = "skills.command"


def _policy_refusal(command: str, config: AgentConfig) -> str | None:
    """Why the shell policy does not allow ``command`` (None when it does)."""
    try:
        from koboi_governance.policy import Policy
        from koboi_governance.settings import settings_from
    except ImportError:
        return "koboi-governance is not installed, and only its shell policy can allow a command"
    verdict = Policy(settings_from(config).policy).judge("run_shell", {"command": command})
    if verdict is None:
        return "no rule of governance.policy allows it for run_shell"
    if verdict.action != "allow":
        return f"governance.policy says {verdict.action}: {verdict.reason}"
    return None


def _gate(
    skill: str, command: str, settings: CommandSettings, config: AgentConfig, ctx: ToolContext
) -> str | None:
    if not settings.enabled:
        return "skill commands are off (skills.commands.enabled: false)"
    if not any(fnmatch.fnmatchcase(skill, pattern) for pattern in settings.skills):
        return f"skill {skill!r} is not trusted to run commands (skills.commands.skills)"
    if settings.require_isolation and not ctx.sandbox.isolated:
        return (
            f"the sandbox {ctx.sandbox.name!r} does not isolate, and skills.commands."
            "require_isolation is true"
        )
    return _policy_refusal(command, config)


async def preprocess(
    body: str, skill: str, settings: CommandSettings, config: AgentConfig, ctx: ToolContext
) -> str:
    """``body`` with each ``!`cmd``` replaced by its output, or by why it did not run."""
    matches = list(COMMAND.finditer(body))
    if not matches:
        return body
    pieces: list[str] = []
    last = 0
    for index, match in enumerate(matches):
        command = match.group(1).strip()
        pieces.append(body[last : match.start()])
        last = match.end()
        if index >= MAX_COMMANDS:
            pieces.append(f"[command not run: a skill may run at most {MAX_COMMANDS}]")
            continue
        refusal = _gate(skill, command, settings, config, ctx)
        record: dict[str, Any] = {"skill": skill, "command": command}
        if refusal is not None:
            pieces.append(f"[command not run: {refusal}]")
            record.update(ran=False, why=refusal)
        else:
            text, code = await _run(command, settings, ctx)
            pieces.append(text)
            record.update(ran=True, exit_code=code)
        if settings.enabled:
            ctx.record(COMMAND_EVENT, record)
            if ctx.run is not None:
                ctx.run.audit({"action": "skill_command", **record})
    pieces.append(body[last:])
    return "".join(pieces)


async def _run(command: str, settings: CommandSettings, ctx: ToolContext) -> tuple[str, int | None]:
    try:
        done = await ctx.run_process(
            ["/bin/sh", "-c", command],
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
            timeout=settings.timeout,
            max_output=settings.max_output,
        )
    except Exception as exc:  # the sandbox refused to start it: said in its place
        return f"[command not run: the sandbox refused it: {exc}]", None
    if done.timed_out:
        return f"[command timed out after {settings.timeout:g} s]", None
    output = done.stdout.strip()[: settings.max_output]
    if done.returncode != 0:
        error = done.stderr.strip()[:500]
        return (
            f"[command failed (exit code {done.returncode}){': ' + error if error else ''}]",
            done.returncode,
        )
    return output, 0
