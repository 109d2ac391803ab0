"""The checks a case asserts on its run: ``expect=[called_tool(...), completed(), ...]``.

Every check reads the case's :class:`~koboi_eval.trace.Trace` (folded from
the session's journal) and returns a :class:`CheckResult`: passed, failed
(with what was expected and what happened instead) or skipped (with why).
A check never passes for want of a way to tell: :func:`judge` without a model
is *skipped*, and a check no installed plugin provides is an error when the
eval file is loaded.

Labels and explanations must be stable text (no ids, no timings, no
addresses): they are part of the deterministic report.

Writing a check: subclass :class:`Check`, give it a ``label`` and a ``check``
(or an async ``evaluate``); use it in ``expect=[...]`` like the built-in
ones. A plugin may also provide named checks, used with ``plugin_check(name, ...)``:
it implements the hook ``koboi_eval_register_checks`` (koboi_eval.hookspecs; see
koboi_eval.plugin_checks).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from koboi_eval.errors import EvalDefinitionError
from koboi_eval.matching import argument_problems, show

if TYPE_CHECKING:
    from koboi_eval.trace import Trace

CheckStatus = Literal["passed", "failed", "skipped"]

#: Refusal stages of the kernel and of koboi-governance (others may add their own).
KNOWN_STAGES = (
    "mode",
    "policy",
    "guardrails",
    "approval",
    "rate_limit",
    "sandbox",
    "budget",
    "lookup",
    "arguments",
)

_SHOWN_OUTPUT = 300


@dataclass(frozen=True)
class CheckResult:
    """How one check went. ``expected``/``actual`` explain a failure; ``reason`` a skip."""

    label: str
    status: CheckStatus
    expected: str = ""
    actual: str = ""
    reason: str = ""

    def explanation(self) -> list[str]:
        """Readable lines saying what was expected and what happened (empty when passed)."""
        if self.status == "skipped":
            return [f"skipped: {self.reason}"]
        if self.status == "failed":
            lines = [f"expected: {self.expected}", f"actual:   {self.actual}"]
            if self.reason:
                lines.append(self.reason)
            return lines
        return []

    def replace_text(self, old: str, new: str) -> CheckResult:
        """The same result with ``old`` replaced by ``new`` in its texts (report normalising)."""
        return CheckResult(
            self.label.replace(old, new),
            self.status,
            self.expected.replace(old, new),
            self.actual.replace(old, new),
            self.reason.replace(old, new),
        )


class Grader(Protocol):
    """Something that grades a run against a rubric (the LLM judge)."""

    async def grade(self, rubric: str, trace: Trace) -> tuple[bool, str]: ...


@dataclass
class CheckContext:
    """What a check may need besides the trace."""

    #: The run is ``--mock``: offline, deterministic, no real model anywhere.
    mock: bool = False
    #: Finds the judge model for a ``judge`` check (its own config, or the run's).
    judge_for: Callable[[Path | None], Grader | None] | None = None
    #: Why there is no judge when ``judge_for`` finds none.
    no_judge_reason: str = "no judge model is configured (koboi eval-test --judge CONFIG)"


class Check:
    """Base class of every check."""

    @property
    def label(self) -> str:
        """A stable one-line name, shown in reports: the call that made the check."""
        return type(self).__name__

    async def evaluate(self, trace: Trace, context: CheckContext) -> CheckResult:
        """Judge the trace. Override this (async) or :meth:`check` (sync)."""
        return self.check(trace)

    def check(self, trace: Trace) -> CheckResult:
        raise NotImplementedError(f"{type(self).__name__} implements neither check nor evaluate")

    # -- helpers for subclasses ---------------------------------------------------

    def passed(self) -> CheckResult:
        return CheckResult(self.label, "passed")

    def failed(self, expected: str, actual: str, note: str = "") -> CheckResult:
        return CheckResult(self.label, "failed", expected, actual, note)

    def skipped(self, reason: str) -> CheckResult:
        return CheckResult(self.label, "skipped", reason=reason)


def call_label(function: str, *positional: Any, **named: Any) -> str:
    """``name("x", args={...})``: how a check is shown; None keyword values are left out."""
    parts = [show(p) for p in positional]
    parts += [f"{k}={show(v)}" for k, v in named.items() if v is not None]
    return f"{function}({', '.join(parts)})"


def _shorten(text: str, limit: int = _SHOWN_OUTPUT) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


_LISTED_CALLS = 8


def _listing(calls: Sequence[Any]) -> str:
    """The calls, as the report shows them: the first few, and how many more."""
    shown = "; ".join(str(c.as_call()) for c in calls[:_LISTED_CALLS])
    if len(calls) > _LISTED_CALLS:
        shown += f"; … and {len(calls) - _LISTED_CALLS} more"
    return shown


# -- tool calls ----------------------------------------------------------------------


class _CountedToolCheck(Check):
    """Calls of one tool (asked for, or run), optionally with given arguments and count."""

    function = ""
    #: What a fitting call is, after "a call to NAME" (e.g. " that started").
    qualifier = ""
    #: How the list of all such calls is introduced, and what to say when there is none.
    listing = ""
    nothing = ""

    def __init__(
        self, name: str, args: Mapping[str, Any] | None = None, times: int | None = None
    ) -> None:
        if not isinstance(name, str) or not name:
            raise EvalDefinitionError(
                f"{self.function}(): the tool name must be a non-empty string"
            )
        if args is not None and not isinstance(args, Mapping):
            raise EvalDefinitionError(f"{self.function}({name!r}): args must be a mapping")
        if times is not None and (
            isinstance(times, bool) or not isinstance(times, int) or times < 0
        ):
            raise EvalDefinitionError(f"{self.function}({name!r}): times must be an integer >= 0")
        self.name = name
        self.args = dict(args) if args is not None else None
        self.times = times

    @property
    def label(self) -> str:
        return call_label(self.function, self.name, args=self.args, times=self.times)

    def candidates(self, trace: Trace) -> list[Any]:
        raise NotImplementedError

    def everything(self, trace: Trace) -> list[Any]:
        raise NotImplementedError

    def why_none(self, trace: Trace) -> str:
        """When no call fits: anything that explains it (refusals, for calls that ran)."""
        return ""

    def check(self, trace: Trace) -> CheckResult:
        calls = self.candidates(trace)
        fitting = [
            c for c in calls if self.args is None or not argument_problems(self.args, c.arguments)
        ]
        if (self.times is None and fitting) or len(fitting) == self.times:
            return self.passed()
        how_many = "at least one call" if self.times is None else f"exactly {self.times} call(s)"
        with_args = f" with {show(self.args)}" if self.args is not None else ""
        expected = f"{how_many} to {self.name}{with_args}{self.qualifier}"
        everything = self.everything(trace)
        actual = f"{self.listing} {_listing(everything)}" if everything else self.nothing
        if self.times is not None and fitting:
            actual = f"{len(fitting)} such call(s); {actual}"
        note = self.why_none(trace) if not fitting else ""
        if self.args is not None and calls and not fitting:
            closest = min(calls, key=lambda c: len(argument_problems(self.args or {}, c.arguments)))
            note = f"closest call, {closest.as_call()}: " + "; ".join(
                argument_problems(self.args, closest.arguments)
            )
        return self.failed(expected, actual, note)


class CalledTool(_CountedToolCheck):
    function = "called_tool"
    listing = "the model called:"
    nothing = "the model called no tool"

    def candidates(self, trace: Trace) -> list[Any]:
        return trace.requested(self.name)

    def everything(self, trace: Trace) -> list[Any]:
        return list(trace.requests)


class ToolRan(_CountedToolCheck):
    function = "tool_ran"
    qualifier = " that started (ran)"
    listing = "calls that started:"
    nothing = "no tool call started"

    def candidates(self, trace: Trace) -> list[Any]:
        return trace.executed(self.name)

    def why_none(self, trace: Trace) -> str:
        refused = trace.refused(self.name)
        if not refused:
            return ""
        stages = ", ".join(sorted({r.stage for r in refused}))
        return f"{len(refused)} call(s) to {self.name} refused (by {stages}): {refused[0].reason}"

    def everything(self, trace: Trace) -> list[Any]:
        return list(trace.executions)


def called_tool(
    name: str, args: Mapping[str, Any] | None = None, *, times: int | None = None
) -> Check:
    """The model asked for ``name`` (with ``args``, compared BFCL-style; see
    koboi_eval.matching), at least once or exactly ``times`` times — whatever
    became of the call (use :func:`tool_ran` or :func:`tool_was_blocked` for that)."""
    return CalledTool(name, args, times)


def tool_ran(
    name: str, args: Mapping[str, Any] | None = None, *, times: int | None = None
) -> Check:
    """``name`` actually started (past every governance stage), at least once or
    exactly ``times`` times: a resumed run that ran a call again counts twice."""
    return ToolRan(name, args, times)


class NotCalledTool(Check):
    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def label(self) -> str:
        return call_label("not_called_tool", self.name)

    def check(self, trace: Trace) -> CheckResult:
        calls = trace.requested(self.name)
        if not calls:
            return self.passed()
        ran = len(trace.executed(self.name))
        refused = sorted({r.stage for r in trace.refused(self.name)})
        fate = f"{ran} ran" + (f", refused by {', '.join(refused)}" if refused else "")
        return self.failed(f"no call to {self.name}", f"{_listing(calls)} ({fate})")


def not_called_tool(name: str) -> Check:
    """The model never asked for ``name`` (not even a call that was then refused)."""
    return NotCalledTool(name)


class ToolWasBlocked(Check):
    def __init__(self, name: str, by: str | None, args: Mapping[str, Any] | None) -> None:
        if by is not None and (not isinstance(by, str) or not by):
            raise EvalDefinitionError(
                f"tool_was_blocked({name!r}): by= names a stage, e.g. {', '.join(KNOWN_STAGES)}"
            )
        self.name = name
        self.by = by
        self.args = dict(args) if args is not None else None

    @property
    def label(self) -> str:
        return call_label("tool_was_blocked", self.name, by=self.by, args=self.args)

    def check(self, trace: Trace) -> CheckResult:
        arguments = {r.call_id: r.arguments for r in trace.requests}
        refusals = [
            r
            for r in trace.refused(self.name)
            if self.args is None or not argument_problems(self.args, arguments.get(r.call_id, {}))
        ]
        if any(self.by is None or r.stage == self.by for r in refusals):
            return self.passed()
        stage = f"by {self.by}" if self.by else "at any stage"
        with_args = f" with {show(self.args)}" if self.args is not None else ""
        expected = f"a call to {self.name}{with_args} refused {stage}"
        if refusals:
            actual = "; ".join(f"refused by {r.stage}: {r.reason}" for r in refusals)
        elif trace.executed(self.name):
            actual = f"not refused: it ran ({_listing(trace.executed(self.name))})"
        elif trace.requested(self.name):
            actual = f"not refused: {_listing(trace.requested(self.name))}"
        else:
            actual = f"the model never called {self.name}"
            if trace.requests:
                actual += f" (it called: {_listing(trace.requests)})"
        return self.failed(expected, actual)


def tool_was_blocked(
    name: str, *, by: str | None = None, args: Mapping[str, Any] | None = None
) -> Check:
    """A call to ``name`` was refused, by the stage ``by`` when given: ``mode``,
    ``policy``, ``guardrails``, ``approval``, ``rate_limit``, ``sandbox`` (the
    unattended-destruction rule), ``budget``, ``lookup``, ``arguments`` — read from
    the journal's ``tool_call_refused`` event."""
    return ToolWasBlocked(name, by, args)


class ToolWasInterrupted(Check):
    def __init__(self, name: str, args: Mapping[str, Any] | None) -> None:
        self.name = name
        self.args = dict(args) if args is not None else None

    @property
    def label(self) -> str:
        return call_label("tool_was_interrupted", self.name, args=self.args)

    def check(self, trace: Trace) -> CheckResult:
        calls = trace.executed(self.name)
        hits = [
            c
            for c in calls
            if c.interrupted
            and (self.args is None or not argument_problems(self.args, c.arguments))
        ]
        if hits:
            return self.passed()
        with_args = f" with {show(self.args)}" if self.args is not None else ""
        actual = (
            "no call was interrupted; started: " + _listing(calls)
            if calls
            else f"{self.name} never started"
        )
        return self.failed(
            f"a call to {self.name}{with_args} in doubt after a crash (tool_call_interrupted)",
            actual,
        )


def tool_was_interrupted(name: str, args: Mapping[str, Any] | None = None) -> Check:
    """Resume found a call to ``name`` started and never finished, and did not re-run
    it blindly (``agent.on_interrupted_tool``)."""
    return ToolWasInterrupted(name, args)


# -- the run ---------------------------------------------------------------------------


class EndedWith(Check):
    def __init__(self, outcome: str, label: str) -> None:
        self.outcome = outcome
        self._label = label

    @property
    def label(self) -> str:
        return self._label

    def check(self, trace: Trace) -> CheckResult:
        if trace.outcome == self.outcome:
            return self.passed()
        by = f" by {trace.refused_by}" if trace.refused_by else ""
        error = f": {trace.error}" if trace.error else ""
        return self.failed(f"outcome {self.outcome}", f"outcome {trace.outcome}{by}{error}")


def completed() -> Check:
    """The (last) run ended with a final answer: outcome ``completed``."""
    return EndedWith("completed", "completed()")


def ended_with(outcome: str) -> Check:
    """The (last) run ended with ``outcome``: one of the kernel's outcomes
    (``koboi.events.Outcome``: completed, max_iterations, budget_exceeded, failed,
    cancelled, refused, suspended)."""
    from koboi.events import Outcome

    outcomes = get_args(Outcome)
    if outcome not in outcomes:
        raise EvalDefinitionError(
            f"ended_with({outcome!r}): unknown outcome; one of {', '.join(outcomes)}"
        )
    return EndedWith(outcome, call_label("ended_with", outcome))


class WasResumed(Check):
    @property
    def label(self) -> str:
        return "was_resumed()"

    def check(self, trace: Trace) -> CheckResult:
        if trace.resumes:
            return self.passed()
        return self.failed("an interrupted run resumed from the journal", "no run_resumed event")


def was_resumed() -> Check:
    """An interrupted run of the session was resumed from its journal."""
    return WasResumed()


class OutputContains(Check):
    def __init__(self, text: str, ignore_case: bool) -> None:
        self.text = text
        self.ignore_case = ignore_case

    @property
    def label(self) -> str:
        return call_label("output_contains", self.text, ignore_case=self.ignore_case or None)

    def check(self, trace: Trace) -> CheckResult:
        output, text = trace.output, self.text
        if self.ignore_case:
            output, text = output.casefold(), text.casefold()
        if text in output:
            return self.passed()
        return self.failed(f"the output contains {show(self.text)}", _shown_output(trace))


def _shown_output(trace: Trace) -> str:
    if trace.outcome != "completed" and not trace.output:
        error = f": {trace.error}" if trace.error else ""
        return f"no output (outcome {trace.outcome}{error})"
    return f"output {show(_shorten(trace.output))}"


def output_contains(text: str, *, ignore_case: bool = False) -> Check:
    """The final output contains ``text``."""
    if not isinstance(text, str) or not text:
        raise EvalDefinitionError("output_contains(): give the text to look for")
    return OutputContains(text, ignore_case)


class OutputMatches(Check):
    def __init__(self, pattern: str, flags: int) -> None:
        try:
            self.compiled = re.compile(pattern, flags)
        except re.error as exc:
            raise EvalDefinitionError(
                f"output_matches({pattern!r}): invalid regular expression: {exc}"
            ) from None
        self.pattern = pattern
        self.flags = flags

    @property
    def label(self) -> str:
        return call_label("output_matches", self.pattern, flags=self.flags or None)

    def check(self, trace: Trace) -> CheckResult:
        if self.compiled.search(trace.output):
            return self.passed()
        return self.failed(
            f"the output matches {show(self.pattern)} (re.search)", _shown_output(trace)
        )


def output_matches(pattern: str, flags: int = 0) -> Check:
    """The regular expression ``pattern`` is found in the final output (``re.search``)."""
    return OutputMatches(pattern, flags)


class MaxSteps(Check):
    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or limit < 1:
            raise EvalDefinitionError(f"max_steps({limit!r}): give a whole number >= 1")
        self.limit = limit

    @property
    def label(self) -> str:
        return call_label("max_steps", self.limit)

    def check(self, trace: Trace) -> CheckResult:
        if trace.model_calls <= self.limit:
            return self.passed()
        return self.failed(
            f"at most {self.limit} model call(s)", f"{trace.model_calls} model calls"
        )


def max_steps(limit: int) -> Check:
    """The case used at most ``limit`` model calls (every run of the session together)."""
    return MaxSteps(limit)


class CostBelow(Check):
    def __init__(self, usd: float) -> None:
        if not isinstance(usd, int | float) or isinstance(usd, bool) or usd <= 0:
            raise EvalDefinitionError(f"cost_below({usd!r}): give a positive amount of US dollars")
        self.usd = float(usd)

    @property
    def label(self) -> str:
        return call_label("cost_below", self.usd)

    def check(self, trace: Trace) -> CheckResult:
        if trace.cost_usd < self.usd:
            return self.passed()
        return self.failed(
            f"cost below ${self.usd:.10g}",
            f"cost ${trace.cost_usd:.10g} (at the prices in the config's llm.pricing)",
        )


def cost_below(usd: float) -> Check:
    """The model calls of the case cost less than ``usd`` US dollars, at the prices of the
    config's ``llm.pricing`` (kept under ``--mock``, so cost is checked offline too)."""
    return CostBelow(usd)


# -- files the tools left --------------------------------------------------------------


class _FileCheck(Check):
    function = ""

    def __init__(self, path: str, text: str | None = None) -> None:
        pure = PurePosixPath(path)
        if not path or pure.is_absolute() or ".." in pure.parts:
            raise EvalDefinitionError(
                f"{self.function}({path!r}): give a path relative to the case's working "
                "directory, without '..'"
            )
        self.path = path
        self.text = text

    @property
    def label(self) -> str:
        shown = [_shorten(self.text, 60)] if self.text is not None else []
        return call_label(self.function, self.path, *shown)

    def read(self, trace: Trace) -> str | None:
        if trace.workdir is None:
            return None
        target = trace.workdir / self.path
        if not target.is_file():
            return None
        return target.read_text(encoding="utf-8", errors="replace")


class FileContains(_FileCheck):
    function = "file_contains"

    def check(self, trace: Trace) -> CheckResult:
        content = self.read(trace)
        text = self.text or ""
        if content is not None and text in content:
            return self.passed()
        actual = "no such file" if content is None else f"content {show(_shorten(content))}"
        return self.failed(f"{self.path} contains {show(text)}", actual)


class FileEquals(_FileCheck):
    function = "file_equals"

    def check(self, trace: Trace) -> CheckResult:
        content = self.read(trace)
        wanted = self.text or ""
        if content is not None and content == wanted:
            return self.passed()
        expected = f"{self.path} holds exactly {show(_shorten(wanted))}"
        if content is None:
            return self.failed(expected, "no such file")
        return self.failed(
            expected, f"content {show(_shorten(content))}", _first_difference(wanted, content)
        )


def _first_difference(expected: str, actual: str) -> str:
    """Where two texts first differ, by line: what a reader needs to find the problem."""
    wanted, found = expected.splitlines(keepends=True), actual.splitlines(keepends=True)
    for number, (a, b) in enumerate(zip(wanted, found, strict=False), start=1):
        if a != b:
            return f"first difference at line {number}: expected {show(a)}, got {show(b)}"
    if len(wanted) > len(found):
        return f"the file ends after line {len(found)}; expected next: {show(wanted[len(found)])}"
    return f"the file goes on after line {len(wanted)} with {show(found[len(wanted)])}"


class FileExists(_FileCheck):
    function = "file_exists"

    def check(self, trace: Trace) -> CheckResult:
        if self.read(trace) is not None:
            return self.passed()
        return self.failed(f"a file {self.path}", "no such file")


class FileMissing(_FileCheck):
    function = "file_missing"

    def check(self, trace: Trace) -> CheckResult:
        if trace.workdir is not None and not (trace.workdir / self.path).exists():
            return self.passed()
        if trace.workdir is None:
            return self.failed(f"no file {self.path}", "the case had no working directory")
        return self.failed(f"no file {self.path}", "it exists")


def file_contains(path: str, text: str) -> Check:
    """The file ``path`` (relative to the case's working directory) contains ``text``."""
    return FileContains(path, text)


def file_equals(path: str, content: str) -> Check:
    """The file ``path`` holds exactly ``content``."""
    return FileEquals(path, content)


def file_exists(path: str) -> Check:
    """The file ``path`` exists in the case's working directory."""
    return FileExists(path)


def file_missing(path: str) -> Check:
    """Nothing exists at ``path`` in the case's working directory."""
    return FileMissing(path)


# -- your own ------------------------------------------------------------------------


class CheckThat(Check):
    def __init__(self, description: str, predicate: Callable[[Trace], bool | str | None]) -> None:
        if not description or not callable(predicate):
            raise EvalDefinitionError(
                "check_that(description, predicate): a description and a function of the trace"
            )
        self.description = description
        self.predicate = predicate

    @property
    def label(self) -> str:
        return call_label("check_that", self.description)

    def check(self, trace: Trace) -> CheckResult:
        verdict = self.predicate(trace)
        if verdict is True or verdict is None:
            return self.passed()
        actual = verdict if isinstance(verdict, str) else "the predicate returned False"
        return self.failed(self.description, actual)


def check_that(description: str, predicate: Callable[[Trace], bool | str | None]) -> Check:
    """Your own check: ``predicate(trace)`` returns True (or None) to pass, False or a
    string saying what is wrong to fail."""
    return CheckThat(description, predicate)


# -- the LLM judge ---------------------------------------------------------------------


class Judge(Check):
    def __init__(self, rubric: str, config: str | Path | None) -> None:
        if not isinstance(rubric, str) or not rubric.strip():
            raise EvalDefinitionError("judge(): give the rubric the answer is graded against")
        self.rubric = rubric
        self.config: Path | None = None
        if config is not None:
            from koboi_eval.dsl import current_file

            loading = current_file()
            self.config = ((loading.parent if loading else Path.cwd()) / config).resolve()
            if not self.config.is_file():
                raise EvalDefinitionError(f"judge(): config file not found: {config}")

    @property
    def label(self) -> str:
        return call_label("judge", _shorten(self.rubric, 80))

    async def evaluate(self, trace: Trace, context: CheckContext) -> CheckResult:
        if context.mock:
            return self.skipped("the judge needs a real model, and --mock runs offline")
        grader = context.judge_for(self.config) if context.judge_for is not None else None
        if grader is None:
            return self.skipped(context.no_judge_reason)
        passed, reason = await grader.grade(self.rubric, trace)
        if passed:
            return self.passed()
        return self.failed(f"an answer that meets: {self.rubric}", f"the judge said: {reason}")


def judge(rubric: str, *, config: str | Path | None = None) -> Check:
    """An LLM grades the final answer against ``rubric``.

    The judge model is the agent config ``config`` (relative to the eval file),
    else the run's ``--judge CONFIG`` / ``KOBOI_EVAL_JUDGE``. Without one, and
    always under ``--mock``, the check is *skipped* (and reported as such),
    never passed.
    """
    return Judge(rubric, config)
