"""koboi hooks of koboi-eval. Imports nothing heavy: the commands are registered by
import path and loaded only when invoked."""

from __future__ import annotations

from collections.abc import Callable

from koboi.hookspecs import hookimpl


@hookimpl
def koboi_register_commands(register: Callable[..., None]) -> None:
    register(
        "eval-test",
        "koboi_eval.cli:eval_test_app",
        help="Run eval cases (evals/*.eval.py); --mock runs them offline and deterministically.",
    )
    register(
        "eval",
        "koboi_eval.cli:eval_app",
        help="Score an agent over a JSONL dataset; gate on a stored baseline.",
    )
