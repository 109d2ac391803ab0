"""The ``hooks:`` section: which command or URL runs on which event of a run.

Three spellings are read, so a config written for another tool keeps working:

- koboi's own, one list per event::

      hooks:
        before_tool_call:
          - {matcher: run_shell, command: ["/usr/bin/python3", "/opt/hooks/no_rm.py"]}
        user_prompt:
          - {command: "/opt/hooks/context.sh"}

- the event names coding agents use (``PreToolUse``, ``UserPromptSubmit``...), with
  their nested form ``[{matcher: ..., hooks: [{type: command, command: ...}]}]``;
- koboi-agent's ``allow_exec``, ``command_timeout`` and ``on_event`` list
  (``{command, events, priority, abort_on_error, timeout, name, cwd}``), for the
  events that exist here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

#: koboi's hook events, in the order a run meets them.
EVENTS: tuple[str, ...] = (
    "session_start",
    "user_prompt",
    "before_tool_call",
    "after_tool_call",
    "before_finish",
    "pre_compact",
    "run_end",
)

#: The names the shared command-hook contract gives the same events (``hook_event_name``).
CONTRACT_NAMES: dict[str, str] = {
    "session_start": "SessionStart",
    "user_prompt": "UserPromptSubmit",
    "before_tool_call": "PreToolUse",
    "after_tool_call": "PostToolUse",
    "before_finish": "Stop",
    "pre_compact": "PreCompact",
    "run_end": "SessionEnd",
}

#: koboi-agent's lifecycle events that have a koboi hook event.
AGENT_EVENT_NAMES: dict[str, str] = {
    "session_start": "session_start",
    "pre_input": "user_prompt",
    "pre_tool_use": "before_tool_call",
    "post_tool_use": "after_tool_call",
    "post_output": "before_finish",
    "pre_compact": "pre_compact",
    "session_end": "run_end",
}

#: koboi-agent's events with no command-hook equivalent, and why.
UNMAPPED_EVENTS: dict[str, str] = {
    "post_compact": "a context plugin reports compaction in the journal",
    "pre_llm_call": "model requests are rewritten by interceptors (before_model_call)",
    "post_llm_call": "model responses are rewritten by interceptors (after_model_call)",
    "doom_loop_detected": "no loop detector raises it",
    "pre_routing": "routing belongs to the orchestration plugin",
    "post_routing": "routing belongs to the orchestration plugin",
    "agent_dispatched": "sub-agents are journaled as child runs",
    "agent_completed": "sub-agents are journaled as child runs",
}

_ALIASES: dict[str, str] = {
    **{event: event for event in EVENTS},
    **{contract: event for event, contract in CONTRACT_NAMES.items()},
    **AGENT_EVENT_NAMES,
}

#: Events whose hooks a matcher (on tool names) may narrow.
TOOL_EVENTS = frozenset({"before_tool_call", "after_tool_call"})

DEFAULT_TIMEOUT = 10.0
#: What a hook may print (or a URL hook answer) before it counts as garbage.
DEFAULT_MAX_OUTPUT = 65_536

FailRule = Literal["open", "closed"]


def event_name(name: str) -> str:
    """koboi's name of an event written in any of the three spellings; ValueError if none."""
    found = _ALIASES.get(name)
    if found is not None:
        return found
    if name in UNMAPPED_EVENTS:
        raise ValueError(
            f"event {name!r} has no command hook in koboi ({UNMAPPED_EVENTS[name]}); "
            f"hook events: {', '.join(EVENTS)}"
        )
    raise ValueError(f"unknown hook event {name!r}; hook events: {', '.join(EVENTS)}")


class HookSpec(BaseModel):
    """One hook: a command run through the agent's sandbox, or a URL POSTed to."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(
        default="",
        description="Shown in the journal, the audit trail and errors (default: the command "
        "or URL, shortened).",
    )
    command: str | list[str] | None = Field(
        default=None,
        description="What to run: a list is the program and its arguments (no shell); a string "
        "is run by /bin/sh -c. It gets the event as JSON on stdin.",
    )
    url: str | None = Field(
        default=None,
        description="POST the event as JSON to this http(s) URL instead of running a command "
        "(koboi-http's SSRF guard; signed when 'secret' is set).",
    )
    secret: SecretStr | None = Field(
        default=None,
        description="For a URL hook: the 'whsec_<base64>' key its requests are signed with "
        "(Standard Webhooks headers, as koboi serve's webhooks). Write ${VARIABLE}.",
    )
    matcher: str = Field(
        default="",
        description="For before_tool_call and after_tool_call: a regular expression the whole "
        "tool name must match ('run_shell', 'write_file|edit_file'); '' or '*' match every tool.",
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=600,
        description="Seconds before the hook is killed (default: the section's command_timeout).",
    )
    on_error: FailRule | None = Field(
        default=None,
        description="When the hook crashes, times out or prints garbage: 'closed' blocks what "
        "the event guards, 'open' goes on as if it had said nothing. Default: the section's "
        "on_error for the event (closed for before_tool_call, open otherwise).",
    )
    env: list[str] = Field(
        default_factory=list,
        description="Variables of koboi's environment the command receives, by name (the rest "
        "of the environment is not passed).",
    )
    cwd: str | None = Field(
        default=None,
        description="Working directory of the command, relative to the session's working "
        "directory (default: that directory).",
    )
    priority: int = Field(
        default=50,
        description="Hooks of one event run in ascending priority, then in the order written.",
    )

    @model_validator(mode="before")
    @classmethod
    def _agent_keys(cls, data: Any) -> Any:
        """koboi-agent's per-hook keys: the ones that mean something here are mapped."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if "abort_on_error" in data:
            abort = data.pop("abort_on_error")
            if not isinstance(abort, bool):
                raise ValueError("abort_on_error must be true or false")
            data.setdefault("on_error", "closed" if abort else "open")
        data.pop("type", None)  # the nested contract form's "command" / "http": told by keys
        for key, value, why in (
            ("fire_and_forget", True, "koboi waits for every hook (its decision is journaled)"),
            ("env_passthrough", True, "hooks get a clean environment: list names under 'env'"),
            ("pass_messages", True, "hooks are given the event, not the conversation"),
            ("pass_metadata", True, "hooks are given the event, not the loop's metadata"),
        ):
            if key in data and data.pop(key) == value:
                raise ValueError(f"{key}: {value} is not supported ({why}); remove it")
        return data

    @model_validator(mode="after")
    def _one_target(self) -> HookSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give a hook either 'command' or 'url' (exactly one)")
        if isinstance(self.command, list) and (not self.command or not all(self.command)):
            raise ValueError("command: a list must name the program first, with no empty words")
        if isinstance(self.command, str) and not self.command.strip():
            raise ValueError("command: empty")
        if self.secret is not None and self.url is None:
            raise ValueError("secret: only a URL hook signs its requests")
        if self.secret is not None:
            from koboi_hooks.signing import check_secret

            check_secret(self.secret.get_secret_value())
        if self.url is not None:
            from koboi_hooks.posting import check_url

            check_url(self.url)
        if self.cwd is not None and (self.cwd.startswith("/") or ".." in self.cwd.split("/")):
            raise ValueError("cwd: a path inside the session's working directory, relative")
        if self.matcher not in ("", "*"):
            try:
                re.compile(self.matcher)
            except re.error as exc:
                raise ValueError(
                    f"matcher {self.matcher!r} is not a regular expression: {exc}"
                ) from None
        return self

    def label(self) -> str:
        """The hook's name for messages: its ``name``, else its command or URL, shortened.

        A URL is shown as its scheme and host only: its path often holds a token.
        """
        if self.name:
            return self.name
        if self.url is not None:
            from koboi_hooks.posting import shown_url

            text = shown_url(self.url)
        elif isinstance(self.command, list):
            text = " ".join(self.command)
        else:
            text = str(self.command)
        return text if len(text) <= 60 else text[:57] + "..."

    def matches(self, tool_name: str) -> bool:
        return self.matcher in ("", "*") or re.fullmatch(self.matcher, tool_name) is not None


class AgentHookSpec(HookSpec):
    """An entry of koboi-agent's ``on_event`` list: a hook and the events it runs on."""

    events: list[str] = Field(
        min_length=1, description="The events (koboi-agent's names or koboi's) it runs on."
    )

    @field_validator("events")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        return [event_name(e) for e in value]


def _flatten_contract_form(entries: Any) -> Any:
    """``[{matcher, hooks: [{type, command, timeout}]}]`` -> one flat hook per inner entry."""
    if not isinstance(entries, list):
        return entries
    flat: list[Any] = []
    for entry in entries:
        if isinstance(entry, Mapping) and "hooks" in entry:
            inner = entry["hooks"]
            if not isinstance(inner, list):
                raise ValueError("'hooks' inside an event entry must be a list of hooks")
            outer = {k: v for k, v in entry.items() if k != "hooks"}
            for hook in inner:
                if not isinstance(hook, Mapping):
                    raise ValueError("each hook must be a mapping ({command: ...} or {url: ...})")
                flat.append({**outer, **hook})
        else:
            flat.append(entry)
    return flat


class HooksSettings(BaseModel):
    """The ``hooks:`` section (see the module doc for the accepted spellings)."""

    model_config = ConfigDict(extra="forbid")

    session_start: list[HookSpec] = Field(
        default_factory=list, description="Once per session, when its first run begins."
    )
    user_prompt: list[HookSpec] = Field(
        default_factory=list, description="Each new user message, before any model call."
    )
    before_tool_call: list[HookSpec] = Field(
        default_factory=list,
        description="Before each tool call (after argument validation, before approval).",
    )
    after_tool_call: list[HookSpec] = Field(
        default_factory=list, description="After each tool call, before its result is journaled."
    )
    before_finish: list[HookSpec] = Field(
        default_factory=list, description="When the model gives its final answer."
    )
    pre_compact: list[HookSpec] = Field(
        default_factory=list,
        description="Before the context plugin summarises the conversation (koboi-context).",
    )
    run_end: list[HookSpec] = Field(
        default_factory=list, description="After each run ended, whatever its outcome."
    )
    on_event: list[AgentHookSpec] = Field(
        default_factory=list,
        description="koboi-agent's form: hooks each listing the events they run on.",
    )
    command_timeout: float = Field(
        default=DEFAULT_TIMEOUT, gt=0, le=600, description="Default timeout of a hook, seconds."
    )
    allow_exec: bool = Field(
        default=True,
        description="False refuses every command hook (URL hooks still run).",
    )
    on_error: dict[str, FailRule] = Field(
        default_factory=dict,
        description="The failure rule per event ('closed' or 'open'); default closed for "
        "before_tool_call, open for the others.",
    )
    max_output: int = Field(
        default=DEFAULT_MAX_OUTPUT,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Bytes a hook may print (or a URL hook answer); more is an error.",
    )
    url_allow: list[str] = Field(
        default_factory=list,
        description="Hosts ('hooks.corp', '*.corp', an address) and CIDR networks URL hooks "
        "may reach although private or loopback; cloud metadata stays refused.",
    )

    @model_validator(mode="before")
    @classmethod
    def _spellings(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return {} if data is None else data
        own = set(cls.model_fields) - set(EVENTS)
        merged: dict[str, Any] = {}
        for key, value in data.items():
            if key in own:
                merged[key] = value
                continue
            try:
                event = event_name(str(key))
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
            hooks = _flatten_contract_form(value if value is not None else [])
            if not isinstance(hooks, list):
                raise ValueError(f"{key}: a list of hooks")
            merged.setdefault(event, []).extend(hooks)
        return merged

    @field_validator("url_allow")
    @classmethod
    def _allow_entries(cls, value: list[str]) -> list[str]:
        from koboi_hooks.posting import address_policy

        address_policy(value)  # a malformed entry is a ValueError naming it
        return value

    @field_validator("on_error")
    @classmethod
    def _rule_events(cls, value: dict[str, FailRule]) -> dict[str, FailRule]:
        return {event_name(k): v for k, v in value.items()}

    @model_validator(mode="after")
    def _exec_allowed(self) -> HooksSettings:
        if not self.allow_exec:
            for event, hooks in self.by_event().items():
                if any(h.command is not None for h in hooks):
                    raise ValueError(
                        f"allow_exec is false, so the command hooks of {event} would never run; "
                        "set allow_exec: true or remove them"
                    )
        for event in EVENTS:
            if event not in TOOL_EVENTS and any(h.matcher for h in self.by_event()[event]):
                raise ValueError(f"{event}: 'matcher' applies to tool events only")
        return self

    def by_event(self) -> dict[str, list[HookSpec]]:
        """Every event's hooks, ``on_event`` entries included, in running order."""
        found: dict[str, list[HookSpec]] = {e: list(getattr(self, e)) for e in EVENTS}
        for entry in self.on_event:
            for event in entry.events:
                found[event].append(entry)
        for hooks in found.values():
            hooks.sort(key=lambda h: h.priority)  # stable: written order among equals
        return found

    def fail_rule(self, event: str, hook: HookSpec) -> FailRule:
        if hook.on_error is not None:
            return hook.on_error
        return self.on_error.get(event, "closed" if event == "before_tool_call" else "open")
