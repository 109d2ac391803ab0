"""Running eval cases: each against its own agent, store and working directory,
many at once (bounded), and judging the journal each leaves.

A case runs in this process unless it needs a process of its own: a crash
case (run in a child, SIGKILLed at its kill point, resumed in a new child) or
one that sets environment variables. Either way its checks read the same
thing: the session's journal.

Results come back in the order of the cases, whatever order they finished in,
and hold no timings, ids or temporary paths except ``duration_s`` (left out of
deterministic reports): under ``--mock`` two runs give the same results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import anyio

from koboi_eval.assembly import (
    CaseSkipped,
    approver_for,
    build_sandbox,
    case_config,
    plugin_host,
    seed_files,
    store_url_for,
)
from koboi_eval.checks import CheckContext, CheckResult
from koboi_eval.dsl import EvalCase
from koboi_eval.loader import LoadFailure
from koboi_eval.trace import Trace, trace_from_journal

CaseStatus = Literal["passed", "failed", "skipped", "error"]
DEFAULT_CONCURRENCY = 4
#: What replaces a case's temporary directory and session id in reported text.
TMP_PLACEHOLDER = "<tmp>"
SESSION_PLACEHOLDER = "<session>"


@dataclass(frozen=True)
class CaseResult:
    """How one case went."""

    case_id: str
    file: str
    name: str
    status: CaseStatus
    #: Why the case was skipped or could not run (empty when it ran).
    reason: str = ""
    checks: tuple[CheckResult, ...] = ()
    outcome: str = ""
    output: str = ""
    model_calls: int = 0
    cost_usd: float = 0.0
    tags: tuple[str, ...] = ()
    #: Wall-clock seconds; never part of a deterministic report.
    duration_s: float = 0.0

    @property
    def checks_skipped(self) -> int:
        return sum(1 for c in self.checks if c.status == "skipped")


@dataclass(frozen=True)
class RunOptions:
    """How to run a set of cases."""

    #: Replace each case's provider with its scripted model (offline, deterministic).
    mock: bool = False
    concurrency: int = DEFAULT_CONCURRENCY
    #: The judge model's config for ``judge()`` checks without one of their own.
    judge_config: Path | None = None
    #: Seconds allowed per case, instead of each case's own ``timeout``.
    timeout: float | None = None


class CaseError(Exception):
    """The case could not run (not a failed check): reported with status ``error``."""


def failure_result(failure: LoadFailure) -> CaseResult:
    """An eval file that did not load, as a result of its own."""
    return CaseResult(
        case_id=failure.shown_file,
        file=failure.shown_file,
        name="(loading the file)",
        status="error",
        reason=failure.message,
    )


async def run_cases(
    cases: Sequence[EvalCase],
    options: RunOptions,
    *,
    on_result: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Run ``cases``, at most ``options.concurrency`` at a time; results in case order."""
    limiter = anyio.CapacityLimiter(max(1, options.concurrency))
    results: list[CaseResult | None] = [None] * len(cases)

    async def one(index: int, case: EvalCase) -> None:
        async with limiter:
            result = await run_case(case, options)
        results[index] = result
        if on_result is not None:
            on_result(result)  # as each case ends (progress), not in report order

    async with anyio.create_task_group() as group:
        for index, case in enumerate(cases):
            group.start_soon(one, index, case)
    return [r for r in results if r is not None]


def _status(checks: Sequence[CheckResult]) -> tuple[CaseStatus, str]:
    if any(c.status == "failed" for c in checks):
        return "failed", ""
    if checks and all(c.status == "skipped" for c in checks):
        # Nothing was checked: the case proves nothing, so it did not pass.
        return "skipped", "; ".join(sorted({c.reason for c in checks}))
    return "passed", ""


@dataclass
class Ran:
    """What running a case gave: a trace, or why there is none (``status`` says which)."""

    status: Literal["ran", "skipped", "timeout", "error"]
    trace: Trace | None = None
    reason: str = ""
    #: Seconds the run itself took (not the checks).
    duration_s: float = 0.0
    #: Text to replace in reports: the temporary directory and the session id.
    replacements: dict[str, str] = field(default_factory=dict)


def _case_directory(directory: str) -> Path:
    tmp = Path(directory).resolve()
    # Traversable, so a sandbox that runs tools as another user can reach its workdir.
    tmp.chmod(0o755)
    (tmp / "workdir").mkdir(mode=0o755)
    return tmp


@asynccontextmanager
async def case_run(case: EvalCase, options: RunOptions) -> AsyncIterator[Ran]:
    """Run the case's agent; yield what happened while its temporary directory (and so
    the files its tools wrote) still exists. Never raises for a problem of the case."""
    from koboi.errors import KoboiError, describe_error
    from koboi.store import new_session_id

    timeout = options.timeout or case.timeout
    with tempfile.TemporaryDirectory(prefix="koboi-eval-") as directory:
        tmp = _case_directory(directory)
        session_id = new_session_id()
        replacements = {
            str(tmp): TMP_PLACEHOLDER,
            directory: TMP_PLACEHOLDER,
            session_id: SESSION_PLACEHOLDER,
        }
        started = time.perf_counter()
        ran: Ran
        try:
            with anyio.fail_after(timeout):
                trace = await (_run_isolated if case.isolated else _run_here)(
                    case, options, tmp, session_id
                )
        except CaseSkipped as skipped:
            ran = Ran("skipped", reason=skipped.reason)
        except TimeoutError:
            ran = Ran(
                "timeout",
                reason=f"timed out after {timeout:g} s (the case's timeout=; --timeout overrides it)",
            )
        except CaseError as exc:
            ran = Ran("error", reason=str(exc))
        except KoboiError as exc:
            ran = Ran("error", reason=describe_error(exc))
        except Exception as exc:  # a bug in a tool, plugin or koboi: report it, run the rest
            ran = Ran("error", reason=f"internal error: {describe_error(exc)}")
        else:
            ran = Ran("ran", trace)
        ran.duration_s = time.perf_counter() - started
        ran.replacements = replacements
        yield ran


async def run_case(case: EvalCase, options: RunOptions) -> CaseResult:
    """Run one case and judge it. Never raises for a problem of the case itself."""
    from koboi_eval.grading import judge_finder

    started = time.perf_counter()
    base = CaseResult(case.id, case.shown_file, case.name, "passed", tags=case.tags)
    if case.skip:
        return replace(base, status="skipped", reason=case.skip)
    async with case_run(case, options) as ran:
        trace = ran.trace
        if ran.status == "skipped":
            result = replace(base, status="skipped", reason=ran.reason)
        elif ran.status == "timeout":
            result = replace(base, status="failed", reason=ran.reason)
        elif ran.status == "error" or trace is None:
            result = replace(base, status="error", reason=ran.reason)
        else:
            judge_for, no_judge = judge_finder(options.judge_config)
            context = CheckContext(mock=options.mock, judge_for=judge_for, no_judge_reason=no_judge)
            checks = [await _evaluate(check, trace, context) for check in case.checks]
            status, reason = _status(checks)
            result = replace(
                base,
                status=status,
                reason=reason,
                checks=tuple(checks),
                outcome=trace.outcome,
                output=trace.output,
                model_calls=trace.model_calls,
                cost_usd=round(trace.cost_usd, 10),
            )
        result = _normalised(result, ran.replacements)
    return replace(result, duration_s=time.perf_counter() - started)


async def _evaluate(check: Any, trace: Trace, context: CheckContext) -> CheckResult:
    from koboi.errors import describe_error

    try:
        outcome: CheckResult = await check.evaluate(trace, context)
    except Exception as exc:  # a broken check fails its case, never the whole run
        return CheckResult(
            check.label, "failed", "the check to run", f"it raised {describe_error(exc)}"
        )
    return outcome


def _normalised(result: CaseResult, replacements: dict[str, str]) -> CaseResult:
    """Temporary paths and session ids out of every text of ``result``."""

    def clean(text: str) -> str:
        for old, new in replacements.items():
            text = text.replace(old, new)
        return text

    checks = list(result.checks)
    for old, new in replacements.items():
        checks = [c.replace_text(old, new) for c in checks]
    return replace(
        result, reason=clean(result.reason), output=clean(result.output), checks=tuple(checks)
    )


# -- in this process ---------------------------------------------------------------------


async def _run_here(case: EvalCase, options: RunOptions, tmp: Path, session_id: str) -> Trace:
    from koboi.agent import KoboiAgent

    host = plugin_host()
    catalog = host.catalog()
    workdir = tmp / "workdir"
    config = case_config(
        case,
        mock=options.mock,
        store_url=store_url_for(case, tmp),
        workdir=workdir,
        catalog=catalog,
    )
    sandbox = build_sandbox(config, catalog)
    session_workdir = sandbox.workdir_for(session_id)
    seed_files(session_workdir, case.files)
    agent = KoboiAgent(config, host=host, approver=approver_for(case), sandbox=sandbox)
    async with agent:
        for message in case.inputs:
            await agent.run(message, session_id=session_id)
        events = await agent.store.read(session_id)
    return trace_from_journal(events, inputs=case.inputs, workdir=session_workdir)


# -- in child processes --------------------------------------------------------------------


def _tail(path: Path, lines: int = 8) -> str:
    if not path.exists():
        return ""
    kept = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-lines:]
    return "\n".join(kept)


async def _start_child(
    case: EvalCase, spec: dict[str, Any], tmp: Path, phase: str
) -> tuple[Any, Path]:
    spec_file = tmp / f"{phase}.json"
    _write_text(spec_file, json.dumps({**spec, "phase": phase}))
    log = tmp / f"{phase}.log"
    output = _open_log(log)
    try:
        process = await anyio.open_process(
            [sys.executable, "-m", "koboi_eval.child", str(spec_file)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            env={**os.environ, **case.env},
        )
    finally:
        output.close()  # the child has its own copy of the descriptor
    return process, log


def _what_happened(result_file: Path, session_id: str, log: Path) -> str:
    """A line on what a run that ended on its own did, to explain a missed kill point."""
    if not result_file.exists():
        tail = _tail(log)
        return f"; its output:\n{tail}" if tail else ""
    trace = _read_trace(result_file, session_id, ())
    said = f"; the run ended with outcome {trace.outcome}: {len(trace.requests)} tool call(s) "
    said += f"asked for, {len(trace.executions)} started, {len(trace.refusals)} refused"
    if trace.refusals:
        first = trace.refusals[0]
        said += f" (the first, {first.name}, by {first.stage}: {first.reason})"
    return said


def _read_trace(result_file: Path, session_id: str, inputs: Sequence[str]) -> Trace:
    """The trace of the journal a child process wrote to ``result_file``."""
    from koboi.store import JournalEvent

    data = _read_json(result_file)
    events = [
        JournalEvent(session_id, e["seq"], e["type"], e["data"], e["at"]) for e in data["journal"]
    ]
    workdir = Path(data["workdir"]) if data.get("workdir") else None
    return trace_from_journal(events, inputs=inputs, workdir=workdir)


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _open_log(path: Path) -> Any:
    return open(path, "wb")


def _exists(path: Path) -> bool:
    return path.exists()


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


async def _finish_child(process: Any) -> None:
    """Make sure a child is gone (a case that timed out or failed must not leave one)."""
    if process.returncode is None:
        process.kill()
    with anyio.CancelScope(shield=True):
        await process.wait()


async def _run_isolated(case: EvalCase, options: RunOptions, tmp: Path, session_id: str) -> Trace:
    if case.file is None:
        raise CaseError(
            "a case that runs in a process of its own (crash= or env=) must come from an eval "
            "file, which the child process loads"
        )
    workdir = tmp / "workdir"
    spec: dict[str, Any] = {
        "file": str(case.file),
        "case": case.name,
        "mock": options.mock,
        "store_url": store_url_for(case, tmp),
        "workdir": str(workdir),
        "session_id": session_id,
        "marker": str(tmp / "killed-here"),
        "result": str(tmp / "result.json"),
    }
    if case.crash is not None:
        marker = Path(spec["marker"])
        process, log = await _start_child(case, spec, tmp, "run")
        try:
            # The marker is written by another process: poll for it (or for its end).
            while not _exists(marker) and process.returncode is None:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            if not _exists(marker):
                await process.wait()
                raise CaseError(
                    f"the run never reached the kill point {case.crash.label}: its process "
                    f"ended first (exit code {process.returncode})"
                    + _what_happened(Path(spec["result"]), session_id, log)
                )
            process.kill()  # SIGKILL: no cleanup, no final journal write
        finally:
            await _finish_child(process)
        phase = "resume"
    else:
        phase = "run"
    process, log = await _start_child(case, spec, tmp, phase)
    try:
        code = await process.wait()
    finally:
        await _finish_child(process)
    result_file = Path(spec["result"])
    if code != 0 or not _exists(result_file):
        detail = _tail(log)
        raise CaseError(
            f"the {phase} process failed (exit code {code})" + (f": {detail}" if detail else "")
        )
    return _read_trace(result_file, session_id, case.inputs)
