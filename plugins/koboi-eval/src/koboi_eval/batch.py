"""``koboi eval CONFIG DATASET``: run an agent over a JSONL dataset and score every row.

One JSON object per line::

    {"id": "add", "input": "What is 2 + 2?", "expected_output": "2 + 2 = 4",
     "expected_tool_calls": ["calculator(expression='2 + 2')"]}

Keys (unknown keys are refused, with the line number):

``id``                   unique name of the row (default ``line-N``)
``input``                the user message; or ``conversation``: several, in one session
``expected_output``      scored by ``exact_match``
``expected_contains``    a string or a list of strings, scored by ``contains``
``expected_regex``       scored by ``regex`` (``re.search``)
``expected_tool_calls``  scored by ``tool_call_accuracy``: a list of ``{"name", "arguments"}``
                         objects or call strings (``f(a=1)``); argument values may be
                         matchers (``{"$one_of": [...]}``, ``{"$optional": X}``,
                         ``{"$any": true}``, ``{"$regex": "..."}``)
``ordered_tool_calls``   compare the calls in order (default: as a set)
``mock``                 the scripted model for ``--mock``: a list of turns, or
                         ``{"script": [...], "rules": [...], "fallback": ..., "pricing": ...}``
``metadata``             anything; copied to the results
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from koboi_eval import scorers
from koboi_eval.dsl import EvalCase, ScriptedModel, scripted
from koboi_eval.errors import DatasetError, EvalDefinitionError
from koboi_eval.matching import CallSpec, StringMatch, from_spec, parse_calls
from koboi_eval.runner import DEFAULT_CONCURRENCY, RunOptions, case_run

FORMAT_VERSION = 1
_MAX_PROBLEMS = 20


class ExpectedCall(BaseModel):
    """An expected tool call written as an object."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The tool's name.")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="Expected arguments; values may be matchers."
    )


class DatasetRow(BaseModel):
    """One line of a dataset, as written."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, description="Unique name of the row.")
    input: str | None = Field(default=None, description="The user message.")
    conversation: list[str] | None = Field(
        default=None, description="Several user messages, each a run in one session."
    )
    expected_output: str | None = Field(default=None, description="For exact_match.")
    expected_contains: str | list[str] | None = Field(default=None, description="For contains.")
    expected_regex: str | None = Field(default=None, description="For regex.")
    expected_tool_calls: list[ExpectedCall | str] | None = Field(
        default=None, description="For tool_call_accuracy."
    )
    ordered_tool_calls: bool = Field(default=False, description="Compare tool calls in order.")
    mock: list[Any] | dict[str, Any] | None = Field(
        default=None, description="The scripted model for --mock."
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="Copied to the results.")

    @model_validator(mode="after")
    def _one_input(self) -> DatasetRow:
        if (self.input is None) == (self.conversation is None):
            raise ValueError("give 'input' (one user message) or 'conversation', not both")
        messages = [self.input] if self.input is not None else self.conversation or []
        if not messages or not all(m.strip() for m in messages):
            raise ValueError("the user message(s) may not be empty")
        if isinstance(self.expected_contains, list) and not self.expected_contains:
            raise ValueError("expected_contains may not be an empty list")
        return self


@dataclass(frozen=True)
class Row:
    """A validated dataset row, ready to run."""

    id: str
    line: int
    inputs: tuple[str, ...]
    expected_output: str | None = None
    expected_contains: tuple[str, ...] | None = None
    expected_regex: str | None = None
    expected_calls: tuple[CallSpec, ...] | None = None
    ordered: bool = False
    mock: ScriptedModel | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


def _calls(items: Sequence[ExpectedCall | str]) -> tuple[CallSpec, ...]:
    calls: list[CallSpec] = []
    for index, item in enumerate(items):
        try:
            if isinstance(item, str):
                calls += [CallSpec(name, args) for name, args in parse_calls(item)]
            else:
                calls.append(CallSpec(item.name, from_spec(item.arguments)))
        except ValueError as exc:
            raise ValueError(f"expected_tool_calls[{index}]: {exc}") from None
    return tuple(calls)


def _mock(value: list[Any] | dict[str, Any]) -> ScriptedModel:
    if isinstance(value, list):
        return scripted(value)
    allowed = {"script", "rules", "fallback", "on_exhausted", "pricing"}
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValueError(f"mock: unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})")
    return scripted(
        value.get("script", ()),
        rules=value.get("rules", ()),
        fallback=value.get("fallback"),
        on_exhausted=value.get("on_exhausted", "error"),
        pricing=value.get("pricing"),
    )


def _row(data: Any, line: int) -> Row:
    if not isinstance(data, dict):
        raise ValueError(f"a row is a JSON object, not {type(data).__name__}")
    try:
        parsed = DatasetRow.model_validate(data)
    except ValidationError as exc:
        raise ValueError(_validation_text(exc)) from None
    if parsed.expected_regex is not None:
        import re

        try:
            re.compile(parsed.expected_regex)
        except re.error as exc:
            raise ValueError(f"expected_regex: invalid regular expression: {exc}") from None
    contains = parsed.expected_contains
    try:
        mock = _mock(parsed.mock) if parsed.mock is not None else None
    except EvalDefinitionError as exc:
        raise ValueError(f"mock: {exc}") from None
    return Row(
        id=parsed.id if parsed.id is not None else f"line-{line}",
        line=line,
        inputs=(parsed.input,) if parsed.input is not None else tuple(parsed.conversation or ()),
        expected_output=parsed.expected_output,
        expected_contains=(contains,)
        if isinstance(contains, str)
        else (tuple(contains) if contains is not None else None),
        expected_regex=parsed.expected_regex,
        expected_calls=_calls(parsed.expected_tool_calls)
        if parsed.expected_tool_calls is not None
        else None,
        ordered=parsed.ordered_tool_calls,
        mock=mock,
        metadata=parsed.metadata,
    )


def _validation_text(exc: ValidationError) -> str:
    parts = []
    fields = list(DatasetRow.model_fields)
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error.get("loc", ()))
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(where, fields, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(fields)}"
            parts.append(f"{where}: unknown key ({hint})")
        elif error["type"] == "value_error":
            parts.append(str(error.get("ctx", {}).get("error", error["msg"])))
        else:
            parts.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    return "; ".join(parts)


def load_dataset(path: Path) -> list[Row]:
    """Read and validate a JSONL dataset; every problem is reported with its line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text") from None
    rows: list[Row] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not JSON: {exc.msg} (column {exc.colno})")
            continue
        try:
            row = _row(data, number)
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        if row.id in seen:
            problems.append(f"line {number}: id {row.id!r} is also the id of line {seen[row.id]}")
            continue
        seen[row.id] = number
        rows.append(row)
    if problems:
        shown = problems[:_MAX_PROBLEMS]
        more = len(problems) - len(shown)
        listing = "\n".join(f"  - {p}" for p in shown) + (
            f"\n  ... and {more} more" if more else ""
        )
        if len(problems) == 1:
            raise DatasetError(f"{path}: {problems[0]}")
        raise DatasetError(f"{len(problems)} problems in {path}:\n{listing}")
    if not rows:
        raise DatasetError(f"{path}: holds no rows (one JSON object per line)")
    return rows


# -- running ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchOptions:
    mock: bool = False
    concurrency: int = DEFAULT_CONCURRENCY
    string_match: StringMatch = "exact"
    approve: Literal["deny", "allow"] = "deny"
    timeout: float = 120.0


@dataclass
class RowResult:
    """One row's run and scores."""

    id: str
    status: Literal["ran", "skipped", "error"]
    reason: str = ""
    outcome: str = ""
    output: str = ""
    latency_s: float = 0.0
    cost_usd: float = 0.0
    model_calls: int = 0
    tool_calls: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "reason": self.reason,
            "outcome": self.outcome,
            "output": self.output,
            "latency_s": round(self.latency_s, 6),
            "cost_usd": round(self.cost_usd, 10),
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "scores": self.scores,
            "details": self.details,
            "metadata": dict(self.metadata),
        }


#: Metrics where higher is better, in [0, 1].
RATE_METRICS = ("completed", *scorers.SCORERS)


@dataclass
class BatchResults:
    """Every row's result, and the metrics over them."""

    config: str
    dataset: str
    dataset_sha256: str
    rows: list[RowResult]

    def scored(self) -> list[RowResult]:
        """Rows that count: those that ran or failed to (a skipped row does not count)."""
        return [r for r in self.rows if r.status != "skipped"]

    def metrics(self) -> dict[str, float]:
        scored = self.scored()
        found: dict[str, float] = {}
        if scored:
            found["completed"] = sum(r.outcome == "completed" for r in scored) / len(scored)
        for name in scorers.SCORERS:
            values = [r.scores[name] for r in scored if name in r.scores]
            if values:
                found[name] = sum(values) / len(values)
        ran = [r for r in self.rows if r.status == "ran"]
        if ran:
            latencies = [r.latency_s for r in ran]
            found["latency_mean_s"] = sum(latencies) / len(latencies)
            found["latency_p50_s"] = scorers.percentile(latencies, 0.50)
            found["latency_p95_s"] = scorers.percentile(latencies, 0.95)
            found["cost_total_usd"] = sum(r.cost_usd for r in ran)
            found["cost_mean_usd"] = found["cost_total_usd"] / len(ran)
        return {k: round(v, 10) for k, v in found.items()}

    def counts(self) -> dict[str, int]:
        """How many rows each metric is over."""
        scored = self.scored()
        ran = sum(1 for r in self.rows if r.status == "ran")
        found = {"completed": len(scored)}
        for name in scorers.SCORERS:
            found[name] = sum(1 for r in scored if name in r.scores)
        for name in ("latency", "cost"):
            found[name] = ran
        return found

    def data(self, comparison: Any = None) -> dict[str, Any]:
        statuses = {
            s: sum(1 for r in self.rows if r.status == s) for s in ("ran", "skipped", "error")
        }
        document: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "config": self.config,
            "dataset": self.dataset,
            "dataset_sha256": self.dataset_sha256,
            "rows_total": len(self.rows),
            "rows_by_status": statuses,
            "metrics": self.metrics(),
            "rows": [r.data() for r in self.rows],
        }
        if comparison is not None:
            document["baseline"] = comparison.data()
        return document

    def to_json(self, comparison: Any = None) -> str:
        return (
            json.dumps(self.data(comparison), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        )


def _score(
    row: Row, output: str, calls: Sequence[Any], strings: StringMatch
) -> dict[str, scorers.Score]:
    found: dict[str, scorers.Score] = {}
    if row.expected_output is not None:
        found[scorers.EXACT_MATCH] = scorers.exact_match(row.expected_output, output)
    if row.expected_contains is not None:
        found[scorers.CONTAINS] = scorers.contains(row.expected_contains, output)
    if row.expected_regex is not None:
        found[scorers.REGEX] = scorers.regex(row.expected_regex, output)
    if row.expected_calls is not None:
        found[scorers.TOOL_CALL_ACCURACY] = scorers.tool_call_accuracy(
            row.expected_calls, [c.as_call() for c in calls], ordered=row.ordered, strings=strings
        )
    return found


def _applicable(row: Row) -> list[str]:
    return list(_score(row, "", [], "exact"))


async def run_row(config: Path, row: Row, options: BatchOptions) -> RowResult:
    """Run one row against a fresh agent (from ``config``, an absolute path) and score it."""
    case = EvalCase(
        name=row.id,
        config=config,
        inputs=row.inputs,
        checks=(),
        mock=row.mock,
        approve=options.approve,
        timeout=options.timeout,
    )
    async with case_run(case, RunOptions(mock=options.mock)) as ran:
        trace = ran.trace
        if ran.status == "skipped":
            return RowResult(row.id, "skipped", ran.reason, metadata=row.metadata)
        if ran.status != "ran" or trace is None:
            # A row that could not run scores 0 wherever it would have been scored.
            reason = ran.reason
            for old, new in ran.replacements.items():
                reason = reason.replace(old, new)
            names = _applicable(row)
            return RowResult(
                row.id,
                "error",
                reason,
                latency_s=ran.duration_s,
                scores=dict.fromkeys(names, 0.0),
                details=dict.fromkeys(names, f"the row did not run: {reason}"),
                metadata=row.metadata,
            )
        scores = _score(row, trace.output, trace.requests, options.string_match)
        return RowResult(
            row.id,
            "ran",
            outcome=trace.outcome,
            output=trace.output,
            latency_s=ran.duration_s,
            cost_usd=trace.cost_usd,
            model_calls=trace.model_calls,
            tool_calls=[str(r.as_call()) for r in trace.requests],
            scores={name: s.value for name, s in scores.items()},
            details={name: s.detail for name, s in scores.items() if s.detail},
            metadata=row.metadata,
        )


async def run_batch(
    config: Path, dataset: Path, rows: Sequence[Row], options: BatchOptions
) -> BatchResults:
    """Run every row (at most ``options.concurrency`` at a time); results in row order."""
    limiter = anyio.CapacityLimiter(max(1, options.concurrency))
    results: list[RowResult | None] = [None] * len(rows)
    absolute = _absolute(config)

    async def one(index: int, row: Row) -> None:
        async with limiter:
            results[index] = await run_row(absolute, row, options)

    async with anyio.create_task_group() as group:
        for index, row in enumerate(rows):
            group.start_soon(one, index, row)
    return BatchResults(
        config=str(config),
        dataset=str(dataset),
        dataset_sha256=file_sha256(dataset),
        rows=[r for r in results if r is not None],
    )


def _absolute(path: Path) -> Path:
    return path.resolve()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _figure(name: str, value: float) -> str:
    if name.startswith("cost"):
        return f"{value:.8f}"
    return f"{value:.3f}"


def render_summary(results: BatchResults) -> str:
    """The summary table, then the rows that did not get a full score (and why)."""
    metrics = results.metrics()
    counts = results.counts()
    statuses = {
        s: sum(1 for r in results.rows if r.status == s) for s in ("ran", "skipped", "error")
    }
    lines = [
        f"koboi eval: {results.config} on {results.dataset} ({len(results.rows)} rows: "
        f"{statuses['ran']} ran, {statuses['skipped']} skipped, {statuses['error']} errors)",
        "",
    ]
    table: list[tuple[str, str, str]] = [("METRIC", "ROWS", "VALUE")]
    for name in RATE_METRICS:
        if name in metrics:
            table.append((name, str(counts[name]), _figure(name, metrics[name])))
    if "latency_p50_s" in metrics:
        table.append(
            (
                "latency_s mean/p50/p95",
                str(counts["latency"]),
                " / ".join(
                    f"{metrics[k]:.3f}"
                    for k in ("latency_mean_s", "latency_p50_s", "latency_p95_s")
                ),
            )
        )
        table.append(
            (
                "cost_usd total/mean",
                str(counts["cost"]),
                f"{metrics['cost_total_usd']:.8f} / {metrics['cost_mean_usd']:.8f}",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(2)]
    for name, rows, value in table:
        lines.append(f"{name.ljust(widths[0])}  {rows.rjust(widths[1])}  {value}")
    misses = [
        (r, name, r.details.get(name, ""))
        for r in results.rows
        for name, value in r.scores.items()
        if value < 1.0
    ]
    if misses:
        lines += ["", "ROWS BELOW FULL SCORE"]
        lines += [f"  {r.id}: {name}: {detail}" for r, name, detail in misses]
    problems = [r for r in results.rows if r.status in ("skipped", "error")]
    if problems:
        lines += ["", "ROWS THAT DID NOT RUN"]
        lines += [f"  {r.id}: {r.status}: {r.reason}" for r in problems]
    return "\n".join(lines) + "\n"
