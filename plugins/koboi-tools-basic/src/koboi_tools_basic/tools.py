"""The tools of koboi-tools-basic: ``calculator`` and ``current_time``."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from koboi.errors import ToolError
from koboi.tools import Risk, tool
from koboi_tools_basic.arithmetic import (
    CONSTANTS,
    FUNCTIONS,
    MAX_EXPRESSION_LENGTH,
    ExpressionError,
    evaluate,
    format_number,
)


@tool(
    risk=Risk.SAFE,
    idempotent=True,
    thread=False,
    description=(
        "Evaluate an arithmetic expression and return the result (whole numbers stay exact). "
        "Supports numbers, "
        "+ - * / // % ** (power), unary minus, parentheses, the functions "
        f"{', '.join(sorted(FUNCTIONS))} and the constants {', '.join(sorted(CONSTANTS))}. "
        f"At most {MAX_EXPRESSION_LENGTH} characters."
    ),
)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: The expression to compute, e.g. "2 + 2" or "sqrt(2) * (3 - 1) ** 2".
    """
    try:
        return format_number(evaluate(expression))
    except ExpressionError as exc:
        raise ToolError(f"cannot compute {_shorten(expression)}: {exc}") from None


@tool(risk=Risk.SAFE, idempotent=True)
def current_time(timezone: str = "UTC") -> str:
    """Return the current date and time as ISO-8601 text, in an IANA time zone.

    Args:
        timezone: IANA time zone name, e.g. "UTC", "Europe/Paris" or "America/New_York".
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        # ValueError: malformed keys such as absolute paths or "..".
        raise ToolError(
            f"unknown time zone {timezone!r}; use an IANA name such as 'UTC' or 'Europe/Paris'"
        ) from None
    return datetime.now(zone).isoformat(timespec="seconds")


def _shorten(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
