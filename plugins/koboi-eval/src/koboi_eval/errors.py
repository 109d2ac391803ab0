"""The errors of koboi-eval: all of them :class:`koboi.errors.KoboiError`, so the CLI
prints one clear line instead of a traceback."""

from __future__ import annotations

from koboi.errors import KoboiError


class EvalError(KoboiError):
    """Base class of the errors koboi-eval raises on purpose."""


class EvalDefinitionError(EvalError):
    """An eval file or a case in it is malformed; the message says where and what to fix."""


class DatasetError(EvalError):
    """A batch-evaluation dataset (JSONL) is malformed; the message names the file and line."""


class BaselineError(EvalError):
    """A stored baseline cannot be read or does not fit the results it is compared with."""
