from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koboi.errors import ToolArgumentError, ToolError
from koboi.sandbox import PassthroughSandbox
from koboi.tools import Risk, ToolContext
from koboi_tools_basic.arithmetic import MAX_EXPRESSION_LENGTH, ExpressionError, evaluate
from koboi_tools_basic.tools import calculator


def context() -> ToolContext:
    return ToolContext(session_id="s", call_id="c", step=1, sandbox=PassthroughSandbox())


async def calc(expression: str) -> str:
    result = await calculator(calculator.parse_arguments({"expression": expression}), context())
    assert not result.is_error
    return result.content


def test_metadata() -> None:
    assert calculator.name == "calculator"
    assert calculator.risk is Risk.SAFE
    assert calculator.idempotent is True
    spec = calculator.spec()
    assert spec.parameters["required"] == ["expression"]
    assert spec.parameters["properties"]["expression"]["description"]
    assert "+" in spec.description


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2 + 2", "4"),
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("2 ** 3 ** 2", "512"),
        ("-2 ** 2", "-4"),
        ("(-2) ** 2", "4"),
        ("10 - 4 - 3", "3"),
        ("100 / 10 / 5", "2"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("-7 % 3", "2"),
        ("+5", "5"),
        ("2 ** -2", "0.25"),
        ("0.1 + 0.2", "0.30000000000000004"),
        ("1 / 3 * 3", "1"),
        ("6 / 3", "2"),
        ("2 ** 100", "1267650600228229401496703205376"),
        ("12345678901234567890 * 98765432109876543210", "1219326311370217952237463801111263526900"),
        ("1_000 + 1", "1001"),
        ("sqrt(16)", "4"),
        ("sqrt(2)", "1.4142135623730951"),
        ("abs(-3)", "3"),
        ("round(2.567, 2)", "2.57"),
        ("round(2.5)", "2"),
        ("floor(-1.5) + ceil(1.2)", "0"),
        ("min(3, 1, 2) + max(4, 6)", "7"),
        ("round(pi, 4)", "3.1416"),
        ("  e ** 0  ", "1"),
        ("1e20", "1e+20"),
    ],
)
async def test_computes(expression: str, expected: str) -> None:
    assert await calc(expression) == expected


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "division by zero"),
        ("5 // 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("2 +", "not a valid expression"),
        ("", "empty"),
        ("x + 1", "unknown name 'x'"),
        ("__import__('os')", "function '__import__' is not allowed"),
        ("__import__('os').system('id')", "only calls of plain function names"),
        ("(1).__class__", "attribute access is not allowed"),
        ("math.sqrt(4)", "only calls of plain function names"),
        ("open('/etc/passwd')", "function 'open' is not allowed"),
        ("'a' * 3", "'a' is not a number"),
        ("True + 1", "True is not a number"),
        ("1j * 1j", "1j is not a number"),
        ("[1, 2]", "List is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("1 < 2", "comparisons"),
        ("2 ^ 3", "use ** for powers"),
        ("1 << 4", "'<<' is not supported"),
        ("~1", "'~' is not supported"),
        ("sqrt(-1)", "negative"),
        ("sqrt(1, 2)", "sqrt() takes 1 argument(s), got 2"),
        ("max()", "max() takes 1 to any number of argument(s), got 0"),
        ("round(1, ndigits=2)", "positional arguments only"),
        ("round(1.5, 0.5)", "whole number of digits"),
        ("(-8) ** (1 / 3)", "not a real number"),
        ("1e308 * 10", "not a finite number"),
        ("1e999", "not a finite number"),
        ("1.5 ** 100000", "too large"),
        ("10 ** 400 / 3", "too large"),
    ],
)
async def test_refuses_with_a_clear_tool_error(expression: str, message: str) -> None:
    with pytest.raises(ToolError, match="cannot compute") as info:
        await calc(expression)
    assert message in str(info.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "expression",
    ["9 ** 9 ** 9", "2 ** 2 ** 2 ** 2 ** 2", "10 ** 100000", "(10 ** 3000) * (10 ** 3000)"],
)
async def test_refuses_huge_results_without_computing_them(expression: str) -> None:
    with pytest.raises(ToolError, match="too large"):
        await calc(expression)


@pytest.mark.anyio
async def test_refuses_long_and_deep_expressions() -> None:
    with pytest.raises(ToolError, match=f"limit is {MAX_EXPRESSION_LENGTH}"):
        await calc("1 + " * 300 + "1")
    with pytest.raises(ToolError, match="nested"):
        await calc("-" * 500 + "1")
    with pytest.raises(ToolError):
        await calc("(" * 300 + "1" + ")" * 300)


@pytest.mark.anyio
async def test_error_message_shortens_long_expressions() -> None:
    with pytest.raises(ToolError) as info:
        await calc("x" * 200)
    assert len(str(info.value)) < 200


def test_argument_validation() -> None:
    with pytest.raises(ToolArgumentError, match="missing required argument 'expression'"):
        calculator.parse_arguments({})
    with pytest.raises(ToolArgumentError, match="unknown argument 'code'"):
        calculator.parse_arguments({"expression": "1", "code": "x"})


# -- property: agrees with Python's own arithmetic ---------------------------


@dataclass(frozen=True)
class Expr:
    text: str
    value: Callable[[], Any]


OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
}


def number(n: int) -> Expr:
    return Expr(f"({n})" if n < 0 else str(n), lambda: n)


def power(base: int, exponent: int) -> Expr:
    shown = f"({base})" if base < 0 else str(base)
    return Expr(f"{shown} ** {exponent}", lambda: base**exponent)


def combine(left: Expr, op: str, right: Expr) -> Expr:
    return Expr(f"({left.text} {op} {right.text})", lambda: OPS[op](left.value(), right.value()))


leaves = st.one_of(
    st.integers(-1000, 1000).map(number),
    st.builds(power, st.integers(-20, 20), st.integers(0, 5)),
)
expressions = st.recursive(
    leaves,
    lambda children: st.builds(combine, children, st.sampled_from(sorted(OPS)), children),
    max_leaves=12,
)


@given(expressions)
def test_agrees_with_python_arithmetic(expr: Expr) -> None:
    try:
        expected = expr.value()
    except ZeroDivisionError:
        with pytest.raises(ExpressionError, match="division by zero"):
            evaluate(expr.text)
        return
    got = evaluate(expr.text)
    assert got == expected
    assert type(got) is type(expected)  # integers stay exact, never become floats
