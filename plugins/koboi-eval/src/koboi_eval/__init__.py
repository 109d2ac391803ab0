"""koboi-eval: agent behaviour tested like code.

The DSL of ``evals/*.eval.py`` files (``case`` and the checks), run by
``koboi eval-test [PATHS] [--mock]``, inside pytest (``--koboi-evals``), or by
scorers over a JSONL dataset (``koboi eval CONFIG DATASET``). See docs/eval.md.

Names are imported on first use: loading the plugin (``koboi --help``) imports
nothing but this module.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_eval._version import __version__
    from koboi_eval.checks import (
        Check,
        CheckContext,
        CheckResult,
        called_tool,
        check_that,
        completed,
        cost_below,
        ended_with,
        file_contains,
        file_equals,
        file_exists,
        file_missing,
        judge,
        max_steps,
        not_called_tool,
        output_contains,
        output_matches,
        tool_ran,
        tool_was_blocked,
        tool_was_interrupted,
        was_resumed,
    )
    from koboi_eval.dsl import EvalCase, case, kill_after, scripted
    from koboi_eval.matching import ANY, matches, one_of, optional
    from koboi_eval.plugin_checks import plugin_check, retrieved_chunk
    from koboi_eval.runner import CaseResult, RunOptions, run_case, run_cases
    from koboi_eval.trace import Trace

_LAZY: dict[str, str] = {
    "__version__": "koboi_eval._version",
    "ANY": "koboi_eval.matching",
    "CaseResult": "koboi_eval.runner",
    "Check": "koboi_eval.checks",
    "CheckContext": "koboi_eval.checks",
    "CheckResult": "koboi_eval.checks",
    "EvalCase": "koboi_eval.dsl",
    "RunOptions": "koboi_eval.runner",
    "Trace": "koboi_eval.trace",
    "called_tool": "koboi_eval.checks",
    "case": "koboi_eval.dsl",
    "check_that": "koboi_eval.checks",
    "completed": "koboi_eval.checks",
    "cost_below": "koboi_eval.checks",
    "ended_with": "koboi_eval.checks",
    "file_contains": "koboi_eval.checks",
    "file_equals": "koboi_eval.checks",
    "file_exists": "koboi_eval.checks",
    "file_missing": "koboi_eval.checks",
    "judge": "koboi_eval.checks",
    "kill_after": "koboi_eval.dsl",
    "matches": "koboi_eval.matching",
    "max_steps": "koboi_eval.checks",
    "not_called_tool": "koboi_eval.checks",
    "one_of": "koboi_eval.matching",
    "optional": "koboi_eval.matching",
    "output_contains": "koboi_eval.checks",
    "output_matches": "koboi_eval.checks",
    "plugin_check": "koboi_eval.plugin_checks",
    "retrieved_chunk": "koboi_eval.plugin_checks",
    "run_case": "koboi_eval.runner",
    "run_cases": "koboi_eval.runner",
    "scripted": "koboi_eval.dsl",
    "tool_ran": "koboi_eval.checks",
    "tool_was_blocked": "koboi_eval.checks",
    "tool_was_interrupted": "koboi_eval.checks",
    "was_resumed": "koboi_eval.checks",
}

__all__ = [
    "ANY",
    "CaseResult",
    "Check",
    "CheckContext",
    "CheckResult",
    "EvalCase",
    "RunOptions",
    "Trace",
    "__version__",
    "called_tool",
    "case",
    "check_that",
    "completed",
    "cost_below",
    "ended_with",
    "file_contains",
    "file_equals",
    "file_exists",
    "file_missing",
    "judge",
    "kill_after",
    "matches",
    "max_steps",
    "not_called_tool",
    "one_of",
    "optional",
    "output_contains",
    "output_matches",
    "plugin_check",
    "retrieved_chunk",
    "run_case",
    "run_cases",
    "scripted",
    "tool_ran",
    "tool_was_blocked",
    "tool_was_interrupted",
    "was_resumed",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'koboi_eval' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
