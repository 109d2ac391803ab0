"""Finding eval files (``*.eval.py``) and loading the cases they define.

A file is imported as a module of its own (by path, under a name derived from
it), with a collector active so each ``case(...)`` it calls registers a case.
A file that fails to load is reported as one error with its file and line —
never a traceback — and does not stop the other files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from koboi_eval.dsl import EvalCase, collecting, display_path, stop_collecting
from koboi_eval.errors import EvalDefinitionError

EVAL_SUFFIX = ".eval.py"


@dataclass(frozen=True)
class LoadFailure:
    """An eval file that could not be loaded, and why (one line, with its place)."""

    file: Path
    message: str

    @property
    def shown_file(self) -> str:
        return display_path(self.file)


def discover(paths: Iterable[Path]) -> list[Path]:
    """The eval files named by ``paths`` (files, or directories searched recursively),
    in a stable order, each once."""
    found: list[Path] = []
    for path in paths:
        if not path.exists():
            raise EvalDefinitionError(f"{path}: no such file or directory")
        if path.is_dir():
            found += sorted(
                candidate
                for candidate in path.rglob(f"*{EVAL_SUFFIX}")
                if candidate.is_file()
                and not any(
                    part.startswith(".") or part == "__pycache__"
                    for part in candidate.relative_to(path).parts
                )
            )
        elif path.name.endswith(EVAL_SUFFIX):
            found.append(path)
        else:
            raise EvalDefinitionError(
                f"{path}: not an eval file (eval files are named *{EVAL_SUFFIX})"
            )
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def load_file(path: Path) -> list[EvalCase]:
    """Import one eval file and return the cases it defines, in definition order."""
    resolved = path.resolve()
    shown = display_path(path)
    digest = hashlib.sha1(str(resolved).encode(), usedforsecurity=False).hexdigest()[:12]
    module_name = f"koboi_eval_file_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has one
        raise EvalDefinitionError(f"{shown}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    collector, token = collecting(resolved)
    # In sys.modules while it runs, so dataclasses and pickling in the file work.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        raise EvalDefinitionError(f"{shown}:{exc.lineno or '?'}: syntax error: {exc.msg}") from None
    except Exception as exc:  # an eval file's own error: where it is, not a traceback
        sys.modules.pop(module_name, None)
        line = _line_in(exc, resolved)
        where = f"{shown}:{line}" if line else shown
        text = str(exc) if isinstance(exc, EvalDefinitionError) else _describe(exc)
        raise EvalDefinitionError(f"{where}: {text}") from None
    finally:
        stop_collecting(token)
    if not collector.cases:
        raise EvalDefinitionError(f"{shown}: defines no cases (call case(...) in it)")
    return collector.cases


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _line_in(exc: BaseException, file: Path) -> int | None:
    """The line of ``file`` (the eval file) where ``exc`` was raised from."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == file:
            line = frame.lineno
    return line


def load(paths: Sequence[Path]) -> tuple[list[EvalCase], list[LoadFailure]]:
    """Every case of every eval file under ``paths``, and the files that failed to load."""
    cases: list[EvalCase] = []
    failures: list[LoadFailure] = []
    for file in discover(paths):
        try:
            cases += load_file(file)
        except EvalDefinitionError as exc:
            failures.append(LoadFailure(file, str(exc)))
    return cases, failures


def select(cases: Iterable[EvalCase], keyword: str | None) -> list[EvalCase]:
    """Cases whose id or one of whose tags contains ``keyword`` (case-insensitive)."""
    if not keyword:
        return list(cases)
    needle = keyword.casefold()
    return [
        c for c in cases if needle in c.id.casefold() or any(needle in t.casefold() for t in c.tags)
    ]
