"""Safe arithmetic: parse with :mod:`ast`, then walk only the nodes we allow.

Nothing is ever passed to ``eval``. Besides refusing names, attributes and
calls it does not know, the evaluator bounds the work an expression can ask
for: its length, its nesting depth, the size of integers (checked *before*
computing a power) and the finiteness of floats.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

Number = int | float

MAX_EXPRESSION_LENGTH = 1000
MAX_DEPTH = 100
#: Largest integer result, in bits (about 3000 decimal digits).
MAX_INT_BITS = 10_000

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_SYMBOLS: dict[type[ast.AST], str] = {
    ast.BitXor: "'^' (use ** for powers)",
    ast.BitAnd: "'&'",
    ast.BitOr: "'|'",
    ast.LShift: "'<<'",
    ast.RShift: "'>>'",
    ast.MatMult: "'@'",
    ast.Invert: "'~'",
    ast.Not: "'not'",
}


class ExpressionError(ValueError):
    """The expression is not allowed or cannot be computed; the message says why."""


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or not -100 <= ndigits <= 100:
        raise ExpressionError("round() takes a whole number of digits between -100 and 100")
    return round(x, ndigits)


def _sqrt(x: Number) -> Number:
    if x < 0:
        raise ExpressionError("sqrt() of a negative number")
    if isinstance(x, int):
        root = math.isqrt(x)
        if root * root == x:
            return root
    return math.sqrt(x)


def _min(*xs: Number) -> Number:
    if not xs:
        raise ExpressionError("min() needs at least one argument")
    return min(xs)


def _max(*xs: Number) -> Number:
    if not xs:
        raise ExpressionError("max() needs at least one argument")
    return max(xs)


#: name -> (function, smallest and largest number of arguments; None = any)
FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int | None]] = {
    "abs": (abs, 1, 1),
    "sqrt": (_sqrt, 1, 1),
    "round": (_round, 1, 2),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "min": (_min, 1, None),
    "max": (_max, 1, None),
}


def evaluate(expression: str) -> Number:
    """Compute an arithmetic expression; raise :class:`ExpressionError` saying what is wrong."""
    text = expression.strip()
    if not text:
        raise ExpressionError("the expression is empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(
            f"the expression is {len(text)} characters long; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not a valid expression: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise ExpressionError("the expression is nested too deeply") from None
    try:
        return _check(_eval(tree.body, 0))
    except ZeroDivisionError:
        raise ExpressionError("division by zero") from None
    except OverflowError:
        raise ExpressionError("the result is too large") from None
    except RecursionError:
        raise ExpressionError("the expression is nested too deeply") from None


def format_number(value: Number) -> str:
    """Plain text of a result: integers exactly, integral floats without ``.0``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value) if isinstance(value, int) else repr(value)


def _eval(node: ast.AST, depth: int) -> Number:
    if depth > MAX_DEPTH:
        raise ExpressionError(f"the expression is nested more than {MAX_DEPTH} levels deep")
    depth += 1
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) not in (int, float):
            raise ExpressionError(f"{_short(repr(value), quote=False)} is not a number")
        return _check(value)
    if isinstance(node, ast.BinOp):
        binary = _BINARY.get(type(node.op))
        if binary is None:
            raise ExpressionError(f"operator {_symbol(node.op)} is not supported")
        left = _eval(node.left, depth)
        right = _eval(node.right, depth)
        if isinstance(node.op, ast.Pow):
            _guard_power(left, right)
        return _check(binary(left, right))
    if isinstance(node, ast.UnaryOp):
        unary = _UNARY.get(type(node.op))
        if unary is None:
            raise ExpressionError(f"operator {_symbol(node.op)} is not supported")
        return _check(unary(_eval(node.operand, depth)))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise ExpressionError(
            f"unknown name {_short(node.id)}; known constants: {', '.join(sorted(CONSTANTS))}"
        )
    if isinstance(node, ast.Call):
        return _call(node, depth)
    if isinstance(node, ast.Attribute):
        raise ExpressionError("attribute access is not allowed")
    if isinstance(node, ast.Compare | ast.BoolOp):
        raise ExpressionError("comparisons and boolean logic are not supported")
    raise ExpressionError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def _call(node: ast.Call, depth: int) -> Number:
    if not isinstance(node.func, ast.Name):
        raise ExpressionError("only calls of plain function names are allowed")
    name = node.func.id
    entry = FUNCTIONS.get(name)
    if entry is None:
        raise ExpressionError(
            f"function {_short(name)} is not allowed; available: {', '.join(sorted(FUNCTIONS))}"
        )
    if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
        raise ExpressionError(f"{name}() takes plain positional arguments only")
    func, least, most = entry
    count = len(node.args)
    if count < least or (most is not None and count > most):
        wanted = str(least) if least == most else f"{least} to {most or 'any number of'}"
        raise ExpressionError(f"{name}() takes {wanted} argument(s), got {count}")
    args = [_eval(arg, depth) for arg in node.args]
    try:
        return _check(func(*args))
    except ValueError as exc:
        if isinstance(exc, ExpressionError):
            raise
        raise ExpressionError(f"{name}(): {exc}") from None


def _guard_power(base: Number, exponent: Number) -> None:
    """Refuse integer powers whose result would exceed :data:`MAX_INT_BITS` before computing."""
    if not (isinstance(base, int) and isinstance(exponent, int)):
        return  # float powers overflow quickly and loudly (OverflowError)
    if abs(base) <= 1 or exponent <= 0:
        return
    if exponent > MAX_INT_BITS or exponent * math.log2(abs(base)) > MAX_INT_BITS:
        raise ExpressionError(
            f"{base} ** {exponent} is too large (results are limited to {MAX_INT_BITS} bits)"
        )


def _check(value: Any) -> Number:
    if isinstance(value, complex):
        raise ExpressionError("the result is not a real number")
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > MAX_INT_BITS:
            raise ExpressionError(f"the result is too large (limit: {MAX_INT_BITS} bits)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ExpressionError("the result is not a finite number")
        return value
    raise ExpressionError(f"unexpected value {value!r}")


def _symbol(op: ast.AST) -> str:
    return _SYMBOLS.get(type(op), f"{type(op).__name__!r}")


def _short(text: str, *, quote: bool = True, limit: int = 30) -> str:
    """Echo user text in messages without echoing all of it."""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text) if quote else text
