"""The eval DSL: what an ``evals/*.eval.py`` file calls to define its cases.

::

    from koboi_eval import case, called_tool, completed, output_contains

    case(
        "adds two numbers",
        config="../configs/quickstart.yaml",
        input="What is 2 + 2?",
        expect=[called_tool("calculator", args={"expression": "2 + 2"}), completed(),
                output_contains("4")],
    )

Each ``case(...)`` call made while koboi-eval loads the file registers that
case; the file is ordinary Python, so cases can be made in loops and helpers.
Everything is checked when the file is loaded: a malformed case is an error
naming the file, the case and what to fix — before anything runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from koboi_eval.checks import Check, call_label
from koboi_eval.errors import EvalDefinitionError
from koboi_eval.matching import value_problems

if TYPE_CHECKING:
    from koboi.approval import ApprovalDecision, ApprovalRequest

ApproveRule = (
    Literal["deny", "allow"]
    | Callable[["ApprovalRequest"], "bool | ApprovalDecision | Awaitable[bool | ApprovalDecision]"]
)
StoreKind = Literal["memory", "sqlite"]

DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class ScriptedModel:
    """The scripted model a case uses under ``--mock`` (the ``llm:`` options of
    koboi-scripted, validated), and the prices to charge for its tokens."""

    options: Mapping[str, Any]
    pricing: Mapping[str, float] | None = None


def _problems(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        lines = []
        for error in errors(include_url=False):
            where = ".".join(str(p) for p in error.get("loc", ()))
            lines.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
        return "; ".join(lines)
    return str(exc)


def scripted(
    script: Sequence[Any] = (),
    *,
    rules: Sequence[Mapping[str, Any]] = (),
    fallback: str | None = None,
    on_exhausted: Literal["fallback", "error"] = "error",
    pricing: Mapping[str, float] | None = None,
) -> ScriptedModel:
    """A scripted model for ``--mock`` (see koboi-scripted's README).

    ``script`` holds one turn per model call: a string (a reply), a
    ``{"name": ..., "arguments": {...}}`` tool call, a list of those, or
    ``{"reply": ..., "tool_calls": [...]}``. ``rules`` answer by regex. By
    default running past the script is an error (``on_exhausted="error"``), so
    a case that makes more model calls than it scripted fails loudly.
    ``pricing`` (``{"input": usd_per_million, "output": ...}``) overrides the
    config's ``llm.pricing``, which is otherwise kept.
    """
    # The provider named "scripted" of the installed plugins, with the options model it
    # registered: eval depends on koboi-scripted being installed, never on its modules.
    from koboi_eval.assembly import plugin_host

    entry = plugin_host().catalog().providers.get("scripted")
    if entry is None or entry.options is None:
        raise EvalDefinitionError(
            "scripted model: no installed plugin provides the 'scripted' provider "
            "(install koboi-scripted)"
        )
    raw: dict[str, Any] = {
        "script": [_script_turn(turn) for turn in script],
        "rules": list(rules),
        "on_exhausted": on_exhausted,
    }
    if fallback is not None:
        raw["fallback"] = fallback
    try:
        validated = entry.options.model_validate(raw)
    except ValueError as exc:
        raise EvalDefinitionError(f"scripted model: {_problems(exc)}") from None
    if pricing is not None:
        from koboi.config import Pricing

        try:
            Pricing.model_validate(pricing)
        except ValueError as exc:
            raise EvalDefinitionError(f"scripted model: pricing: {_problems(exc)}") from None
    options = validated.model_dump(mode="json", exclude_none=True)
    return ScriptedModel(options, dict(pricing) if pricing is not None else None)


def _script_turn(turn: Any) -> Any:
    """The DSL's shorthands for a turn, as the provider's options spell them: one
    ``{"name", "arguments"}`` tool call, or a list of them, is ``{"tool_calls": [...]}``; a
    string (a reply) or a ``{"reply", "tool_calls"}`` mapping is already a turn."""
    if isinstance(turn, Mapping) and "name" in turn:
        return {"tool_calls": [dict(turn)]}
    if isinstance(turn, list | tuple):
        return {"tool_calls": list(turn)}
    return turn


@dataclass(frozen=True)
class KillPoint:
    """Where a crash case's run is SIGKILLed: right after the ``nth`` journal event of
    type ``event`` whose data matches ``where`` is committed."""

    event: str
    where: Mapping[str, Any] = field(default_factory=dict)
    nth: int = 1

    def matches(self, event_type: str, data: Mapping[str, Any]) -> bool:
        if event_type != self.event:
            return False
        for key, expected in self.where.items():
            if key not in data or value_problems(expected, data[key], key, "exact"):
                return False
        return True

    @property
    def label(self) -> str:
        return call_label(
            "kill_after", self.event, nth=self.nth if self.nth != 1 else None, **self.where
        )


def kill_after(event: str, *, nth: int = 1, **where: Any) -> KillPoint:
    """SIGKILL the run just after a journal event is committed, then resume it.

    ``event`` is a journal event type (koboi/journal.py), for example
    ``tool_call_started`` — committed after every decision and just before the
    tool's effect, so killing there leaves the call in doubt — or a plugin's own
    event type (``"<plugin>.<name>"``). ``where`` filters
    on the event's data (``name="append_log", arguments={"line": "step-3"}``);
    ``nth`` picks the nth matching event. The journal commits events in small
    batches (an event that ends a piece of work goes with the one that starts the
    next), so the kill comes once the batch holding the event is committed.
    """
    from koboi import journal as J

    if not isinstance(event, str) or not (event in J.KINDS_BY_NAME or J.is_plugin_event(event)):
        raise EvalDefinitionError(
            f"kill_after({event!r}): not a journal event type; one of "
            f"{', '.join(J.EVENT_TYPES)}, or a plugin's own '<plugin>.<name>'"
        )
    if event == J.RUN_FINISHED:
        raise EvalDefinitionError(
            "kill_after('run_finished'): a run killed after it finished has nothing to resume"
        )
    if isinstance(nth, bool) or not isinstance(nth, int) or nth < 1:
        raise EvalDefinitionError(f"kill_after({event!r}): nth must be a whole number >= 1")
    return KillPoint(event, dict(where), nth)


@dataclass(frozen=True)
class EvalCase:
    """One eval case, as ``case(...)`` made it (see :func:`case` for the fields)."""

    name: str
    config: Path | Mapping[str, Any]
    inputs: tuple[str, ...]
    checks: tuple[Check, ...]
    mock: ScriptedModel | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    approve: ApproveRule = "deny"
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    crash: KillPoint | None = None
    store: StoreKind = "memory"
    timeout: float = DEFAULT_TIMEOUT
    tags: tuple[str, ...] = ()
    skip: str | None = None
    #: The eval file the case came from (None for cases made in code).
    file: Path | None = None

    @property
    def shown_file(self) -> str:
        """The eval file as shown in reports: relative to the working directory when inside it."""
        if self.file is None:
            return "<code>"
        return display_path(self.file)

    @property
    def id(self) -> str:
        return f"{self.shown_file}::{self.name}"

    @property
    def isolated(self) -> bool:
        """Runs in a process of its own: a crash case, or one that sets environment variables."""
        return self.crash is not None or bool(self.env)


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it, POSIX style."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


@dataclass
class _Collector:
    file: Path
    cases: list[EvalCase] = field(default_factory=list)


_COLLECTOR: ContextVar[_Collector | None] = ContextVar("koboi_eval_collector", default=None)


def collecting(file: Path) -> tuple[_Collector, Any]:
    """Start collecting the cases ``file`` defines; returns the collector and a reset token."""
    collector = _Collector(file)
    return collector, _COLLECTOR.set(collector)


def stop_collecting(token: Any) -> None:
    _COLLECTOR.reset(token)


def current_file() -> Path | None:
    """The eval file being loaded, if any (relative paths in it resolve against its folder)."""
    collector = _COLLECTOR.get()
    return collector.file if collector is not None else None


def case(
    name: str,
    *,
    config: str | Path | Mapping[str, Any],
    expect: Sequence[Check],
    input: str | None = None,
    conversation: Sequence[str] | None = None,
    mock: ScriptedModel | Sequence[Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    approve: ApproveRule = "deny",
    files: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    crash: KillPoint | None = None,
    store: StoreKind | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    tags: Sequence[str] = (),
    skip: str | None = None,
) -> EvalCase:
    """Define an eval case (and register it, when an eval file is being loaded).

    :param name: unique in its file; the case id is ``FILE::NAME``.
    :param config: the agent config: a YAML path (relative to the eval file) or
        a mapping. The case never uses the config's store: see ``store``.
    :param expect: the checks (at least one).
    :param input: the user message; or ``conversation``: several user
        messages, each a run in the same session (checks see them all; the
        output is the last run's).
    :param mock: the scripted model that replaces the config's provider under
        ``--mock``: :func:`scripted`, or a list of turns (shorthand for
        ``scripted(turns)``). Without one, ``--mock`` runs the case only when
        its config's provider is already ``scripted``, and skips it otherwise.
    :param overrides: merged into the config (mappings recursively), e.g.
        ``{"agent": {"mode": "act"}}``.
    :param approve: who answers tool calls that need approval: ``"deny"`` (the
        kernel's default: nobody to ask), ``"allow"``, or a function of the
        :class:`koboi.approval.ApprovalRequest` returning a bool or decision.
    :param files: files to create in the session's working directory first
        (relative path -> text).
    :param env: environment variables for the run; the case then runs in a
        process of its own (the variables never leak into other cases).
    :param crash: :func:`kill_after`: run in a child process, SIGKILL it at
        that point, and resume the session from its journal in a new process.
    :param store: ``"memory"`` (default) or ``"sqlite"`` (a temporary file;
        forced for crash cases). Evals never touch a durable store.
    :param timeout: seconds the case may take before it fails.
    :param tags: free labels, selectable with ``koboi eval-test -k``.
    :param skip: a reason to skip the case (reported as skipped).
    """
    where = f"case {name!r}" if isinstance(name, str) else "case"
    collector = _COLLECTOR.get()

    def problem(message: str) -> EvalDefinitionError:
        return EvalDefinitionError(f"{where}: {message}")

    if not isinstance(name, str) or not name.strip():
        raise problem("the name must be a non-empty string")
    if "::" in name or "\n" in name:
        raise problem("the name may not contain '::' or a line break")
    if (input is None) == (conversation is None):
        raise problem("give input= (one user message) or conversation= (several), not both")
    if input is not None:
        if not isinstance(input, str) or not input.strip():
            raise problem("input must be a non-empty string")
        inputs: tuple[str, ...] = (input,)
    else:
        if isinstance(conversation, str) or not isinstance(conversation, Sequence):
            raise problem("conversation must be a list of user messages")
        inputs = tuple(conversation)
        if not inputs or not all(isinstance(m, str) and m.strip() for m in inputs):
            raise problem("conversation must be a non-empty list of non-empty strings")
    if isinstance(expect, Check) or not isinstance(expect, Sequence) or not expect:
        raise problem(
            "expect= needs a list of at least one check (a case that asserts nothing "
            "proves nothing)"
        )
    for index, item in enumerate(expect):
        if not isinstance(item, Check):
            raise problem(
                f"expect[{index}] is a {type(item).__name__}, not a check "
                "(use called_tool(...), completed(), output_contains(...), ...)"
            )
    base = collector.file.parent if collector is not None else Path.cwd()
    resolved_config: Path | Mapping[str, Any]
    if isinstance(config, str | Path):
        resolved_config = (base / config).resolve()
        if not resolved_config.is_file():
            raise problem(f"config file not found: {config} (looked at {resolved_config})")
    elif isinstance(config, Mapping):
        resolved_config = dict(config)
    else:
        raise problem("config must be a YAML file path or a mapping")
    model: ScriptedModel | None
    if mock is None or isinstance(mock, ScriptedModel):
        model = mock
    elif isinstance(mock, Sequence) and not isinstance(mock, str):
        try:
            model = scripted(mock)
        except EvalDefinitionError as exc:
            raise problem(f"mock: {exc}") from None
    else:
        raise problem("mock must be scripted(...) or a list of script turns")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise problem("overrides must be a mapping of config sections")
    if overrides and "store" in overrides:
        raise problem(
            "overrides may not set the store: a case uses store='memory' or store='sqlite' "
            "(a temporary file), never a durable store"
        )
    if not (approve in ("deny", "allow") or callable(approve)):
        raise problem("approve must be 'deny', 'allow' or a function of the approval request")
    for path, text in (files or {}).items():
        pure = PurePosixPath(path)
        if not isinstance(path, str) or not path or pure.is_absolute() or ".." in pure.parts:
            raise problem(f"files: {path!r} must be a relative path without '..'")
        if not isinstance(text, str):
            raise problem(f"files: the content of {path!r} must be a string")
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise problem("env must map variable names to strings")
    if crash is not None and not isinstance(crash, KillPoint):
        raise problem("crash must be kill_after(...)")
    if store is None:
        store = "sqlite" if crash is not None else "memory"
    if store not in ("memory", "sqlite"):
        raise problem("store must be 'memory' or 'sqlite'")
    if crash is not None and store != "sqlite":
        raise problem(
            "a crash case needs store='sqlite': the journal must outlive the killed process"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise problem("timeout must be a positive number of seconds")
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise problem("tags must be a list of strings")
    if skip is not None and (not isinstance(skip, str) or not skip.strip()):
        raise problem("skip must be the reason for skipping, as a string")

    made = EvalCase(
        name=name,
        config=resolved_config,
        inputs=inputs,
        checks=tuple(expect),
        mock=model,
        overrides=dict(overrides or {}),
        approve=approve,
        files=dict(files or {}),
        env=dict(env or {}),
        crash=crash,
        store=store,
        timeout=float(timeout),
        tags=tuple(tags),
        skip=skip,
        file=collector.file if collector is not None else None,
    )
    if collector is not None:
        if any(c.name == name for c in collector.cases):
            raise problem("another case in this file has the same name")
        collector.cases.append(made)
    return made
