"""``koboi eval-test`` and ``koboi eval``: the command-line face of koboi-eval.

Imported only when one of the two commands runs (the plugin registers them by
import path). Errors a user can fix are :class:`koboi.errors.KoboiError`s,
which the ``koboi`` command prints as one ``error:`` line, exit code 1.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from koboi_eval.runner import DEFAULT_CONCURRENCY

eval_test_app = typer.Typer(add_completion=False, rich_markup_mode=None)
eval_app = typer.Typer(add_completion=False, rich_markup_mode=None)

DEFAULT_EVALS = Path("evals")


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


@eval_test_app.command("eval-test")
def eval_test(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="PATHS",
            help="Eval files (*.eval.py) or directories searched for them; default: evals/.",
            show_default=False,
        ),
    ] = None,
    mock: Annotated[
        bool,
        typer.Option(
            "--mock",
            help="Replace each case's provider with its scripted model: offline, no key, "
            "deterministic (two runs give identical reports).",
        ),
    ] = False,
    junit: Annotated[
        Path | None,
        typer.Option("--junit", metavar="FILE", help="Also write a JUnit XML report to FILE."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON instead of a table.")
    ] = False,
    json_report: Annotated[
        Path | None,
        typer.Option("--json-report", metavar="FILE", help="Also write the JSON report to FILE."),
    ] = None,
    keyword: Annotated[
        str | None,
        typer.Option(
            "-k",
            metavar="TEXT",
            help="Only cases whose id (FILE::NAME) or a tag contains TEXT (case-insensitive).",
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-j", min=1, help="Cases run at the same time.")
    ] = DEFAULT_CONCURRENCY,
    judge: Annotated[
        Path | None,
        typer.Option(
            "--judge",
            metavar="CONFIG",
            help="Agent config of the model judge() checks use (also KOBOI_EVAL_JUDGE); "
            "without one, judge() checks are skipped.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=0.001, help="Seconds per case, instead of each case's own."),
    ] = None,
) -> None:
    """Run eval cases and report passed / failed / skipped (with why) for each.

    Exit code 0 when no case failed or was in error, 1 otherwise.
    """
    import anyio

    from koboi_eval import report
    from koboi_eval.errors import EvalDefinitionError
    from koboi_eval.loader import load, select
    from koboi_eval.runner import RunOptions, failure_result, run_cases

    chosen = paths or [DEFAULT_EVALS]
    cases, failures = load(chosen)
    cases = select(cases, keyword)
    if not cases and not failures:
        where = ", ".join(str(p) for p in chosen)
        raise EvalDefinitionError(
            f"no eval cases matched -k {keyword!r} in {where}"
            if keyword
            else f"no eval cases found in {where} (eval files are named *.eval.py)"
        )
    options = RunOptions(mock=mock, concurrency=concurrency, judge_config=judge, timeout=timeout)
    results = [failure_result(f) for f in failures]
    results += anyio.run(run_cases, cases, options)
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_bytes(report.render_junit(results, deterministic=mock))
    if json_report is not None:
        json_report.parent.mkdir(parents=True, exist_ok=True)
        json_report.write_text(report.render_json(results, deterministic=mock), encoding="utf-8")
    if as_json:
        _write(report.render_json(results, deterministic=mock))
    else:
        _write(report.render_table(results, deterministic=mock))
    raise typer.Exit(0 if report.ok(results) else 1)


class StringMatchChoice(StrEnum):
    exact = "exact"
    loose = "loose"


@eval_app.command("eval")
def batch_eval(
    config: Annotated[
        Path,
        typer.Argument(
            metavar="CONFIG", help="The agent's YAML config.", exists=True, dir_okay=False
        ),
    ],
    dataset: Annotated[
        Path,
        typer.Argument(
            metavar="DATASET",
            help="JSONL: one row per line (see docs/eval.md for the keys).",
            exists=True,
            dir_okay=False,
        ),
    ],
    mock: Annotated[
        bool,
        typer.Option(
            "--mock", help="Rows with a 'mock' script run on the scripted model (offline)."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the results as JSON instead of a table.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Also write the results as JSON."),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            metavar="FILE",
            help="Compare with this stored baseline; exit 1 when a score regressed.",
        ),
    ] = None,
    save_baseline: Annotated[
        bool,
        typer.Option("--save-baseline", help="Store these results as the baseline FILE instead."),
    ] = False,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            min=0.0,
            max=1.0,
            help="How far a score (0..1) may drop below the baseline before it is a regression.",
        ),
    ] = 0.0,
    cost_tolerance: Annotated[
        float,
        typer.Option(
            "--cost-tolerance",
            min=0.0,
            help="How much (a fraction: 0.1 = 10%) the mean cost per row may rise.",
        ),
    ] = 0.1,
    latency_tolerance: Annotated[
        float | None,
        typer.Option(
            "--latency-tolerance",
            min=0.0,
            help="Gate latency too: how much (a fraction) the p95 latency may rise. Off by "
            "default: wall-clock time is noisy on shared machines.",
        ),
    ] = None,
    string_match: Annotated[
        StringMatchChoice,
        typer.Option(
            "--string-match",
            help="How tool-call string arguments compare: exact, or loose (BFCL: case, spaces "
            "and ,./-_*^ ignored).",
        ),
    ] = StringMatchChoice.exact,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-j", min=1, help="Rows run at the same time.")
    ] = DEFAULT_CONCURRENCY,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Approve every tool call that needs approval."),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.001, help="Seconds each row may take.")
    ] = 120.0,
) -> None:
    """Run an agent over a JSONL dataset and score it: exact match, contains, regex,
    tool-call accuracy (BFCL-style), latency and cost; optionally gate on a baseline."""
    import anyio

    import koboi_eval.baseline as gate
    from koboi_eval.batch import BatchOptions, load_dataset, render_summary, run_batch
    from koboi_eval.errors import BaselineError

    if save_baseline and baseline is None:
        raise BaselineError("--save-baseline needs --baseline FILE (where to store it)")
    rows = load_dataset(dataset)
    options = BatchOptions(
        mock=mock,
        concurrency=concurrency,
        string_match=string_match.value,
        approve="allow" if yes else "deny",
        timeout=timeout,
    )
    results = anyio.run(run_batch, config, dataset, rows, options)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(results.to_json(), encoding="utf-8")
    comparison = None
    if baseline is not None and not save_baseline:
        comparison = gate.compare(
            gate.read(baseline),
            results,
            tolerance=tolerance,
            cost_tolerance=cost_tolerance,
            latency_tolerance=latency_tolerance,
        )
    if as_json:
        _write(results.to_json(comparison))
    else:
        _write(render_summary(results))
        if comparison is not None:
            _write("\n" + comparison.render(baseline))
    if baseline is not None and save_baseline:
        gate.write(baseline, results)
        print(f"baseline saved to {baseline}", file=sys.stderr)
    raise typer.Exit(1 if comparison is not None and comparison.regressed else 0)
