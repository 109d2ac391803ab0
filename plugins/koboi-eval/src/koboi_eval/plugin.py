"""koboi hooks of koboi-eval. Imports nothing heavy: the commands are registered by
import path and loaded only when invoked; the hooks it defines for other plugins
(``koboi_eval.hookspecs``) hold nothing but their specifications."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterHookspecs


@hookimpl
def koboi_register_hookspecs(register: RegisterHookspecs) -> None:
    from koboi_eval import hookspecs

    register(hookspecs)


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
