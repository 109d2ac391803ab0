"""pytest integration of koboi-eval (the ``pytest11`` entry point ``koboi_eval``).

Inert unless enabled, so installing koboi-eval changes no test suite:

* ``pytest --koboi-evals`` (or ``koboi_evals = true`` in the pytest ini) collects
  every ``*.eval.py`` file pytest visits as a test file, one test per case;
* cases run with ``--mock`` semantics (their scripted model, offline,
  deterministic), since a test suite must not need a key or the network;
  ``--koboi-evals-live`` (or ``koboi_evals_live = true``) uses the configs'
  real providers instead;
* a failed case fails its test with the same explanation ``koboi eval-test``
  prints; a skipped case (or one whose every check was skipped) is skipped
  with its reason; checks that were skipped inside a passing case are listed
  in the test's ``user_properties`` (and so in pytest's JUnit XML).

Loading this module imports only pytest; koboi is imported when an eval file
is collected.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from koboi_eval.dsl import EvalCase
    from koboi_eval.runner import CaseResult

EVAL_SUFFIX = ".eval.py"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("koboi-eval", "koboi eval cases (koboi-eval)")
    group.addoption(
        "--koboi-evals",
        action="store_true",
        default=None,
        help="Collect *.eval.py files as tests, one test per eval case.",
    )
    group.addoption(
        "--koboi-evals-live",
        action="store_true",
        default=None,
        help="Run eval cases on their configs' real providers instead of their scripted models.",
    )
    parser.addini(
        "koboi_evals", "Collect *.eval.py files as tests (koboi-eval).", type="bool", default=False
    )
    parser.addini(
        "koboi_evals_live",
        "Run eval cases on their configs' real providers (koboi-eval).",
        type="bool",
        default=False,
    )


def _setting(config: pytest.Config, name: str) -> bool:
    option = config.getoption(f"--{name.replace('_', '-')}")
    if option is not None:
        return bool(option)
    return bool(config.getini(name))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not file_path.name.endswith(EVAL_SUFFIX) or not _setting(parent.config, "koboi_evals"):
        return None
    return EvalFile.from_parent(parent, path=file_path)


class EvalFile(pytest.File):
    """An eval file: its cases are its tests."""

    def collect(self) -> Iterator[pytest.Item]:
        from koboi_eval.errors import EvalDefinitionError
        from koboi_eval.loader import load_file

        try:
            cases = load_file(self.path)
        except EvalDefinitionError as exc:
            raise self.CollectError(str(exc)) from None
        for case in cases:
            yield EvalItem.from_parent(self, name=case.name, case=case)


class EvalCaseFailed(Exception):
    """A case failed; carries its result for the report."""

    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.case_id)
        self.result = result


class EvalItem(pytest.Item):
    """One eval case as a test."""

    def __init__(self, *, case: EvalCase, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        # `pytest -k TAG` selects a case by one of its tags, as `koboi eval-test -k` does.
        self.extra_keyword_matches.update(case.tags)
        self.user_properties.append(("koboi_eval_case", case.id))

    def runtest(self) -> None:
        import anyio

        from koboi_eval.runner import RunOptions, run_case

        live = _setting(self.config, "koboi_evals_live")
        result = anyio.run(run_case, self.case, RunOptions(mock=not live))
        for check in result.checks:
            if check.status == "skipped":
                self.user_properties.append(("skipped_check", f"{check.label}: {check.reason}"))
        if result.status == "skipped":
            pytest.skip(result.reason)
        if result.status in ("failed", "error"):
            raise EvalCaseFailed(result)

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        if isinstance(excinfo.value, EvalCaseFailed):
            return _explain(excinfo.value.result)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"eval case: {self.case.name}"


def _explain(result: CaseResult) -> str:
    from koboi_eval.report import explain

    return "\n".join([f"{result.status.upper()} {result.case_id}", *explain(result)])
