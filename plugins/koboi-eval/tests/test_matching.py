"""BFCL-style comparison of tool calls: values as trees, alternatives, call syntax."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koboi_eval.matching import (
    ANY,
    CallSpec,
    MadeCall,
    argument_problems,
    compare_calls,
    from_spec,
    matches,
    one_of,
    optional,
    parse_calls,
)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_arguments_equal_themselves_whatever_the_key_order(arguments: dict[str, object]) -> None:
    reordered = dict(reversed(list(arguments.items())))
    assert argument_problems(arguments, reordered) == []


@given(st.integers(-(10**9), 10**9))
def test_numbers_are_equal_across_int_and_float(number: int) -> None:
    assert argument_problems({"n": number}, {"n": float(number)}) == []
    assert argument_problems({"n": float(number)}, {"n": number}) == []


def test_a_different_number_is_reported_with_both_values() -> None:
    assert argument_problems({"n": 2}, {"n": 2.5}) == ["n: expected 2, got 2.5"]


def test_booleans_are_not_numbers() -> None:
    assert argument_problems({"flag": True}, {"flag": 1}) == ["flag: expected true, got 1"]
    assert argument_problems({"flag": True}, {"flag": True}) == []


def test_strings_are_exact_unless_loose() -> None:
    assert argument_problems({"e": "2 + 2"}, {"e": "2+2"}) == ['e: expected "2 + 2", got "2+2"']
    assert argument_problems({"e": "2 + 2"}, {"e": "2+2"}, strings="loose") == []
    assert argument_problems({"city": "New York"}, {"city": "new-york"}, strings="loose") == []
    # Loose still tells different words apart.
    assert argument_problems({"city": "Paris"}, {"city": "Berlin"}, strings="loose")


def test_lists_keep_their_order_and_nested_objects_do_not() -> None:
    assert argument_problems({"xs": [1, 2]}, {"xs": [2, 1]}) == [
        "xs[0]: expected 1, got 2",
        "xs[1]: expected 2, got 1",
    ]
    assert argument_problems({"o": {"a": 1, "b": [1.0]}}, {"o": {"b": [1], "a": 1.0}}) == []
    assert argument_problems({"o": {"a": 1}}, {"o": {"a": 1, "z": 0}}) == [
        "o.z: not expected (got 0)"
    ]


def test_missing_and_unexpected_arguments() -> None:
    assert argument_problems({"a": 1, "b": 2}, {"a": 1, "c": 3}) == [
        "b: missing (expected 2)",
        "c: not expected (got 3)",
    ]


def test_alternatives_optional_any_and_regex() -> None:
    expected = {
        "unit": one_of("celsius", "c"),
        "days": optional(7),
        "city": ANY,
        "query": matches(r"^weather in "),
    }
    good = {"unit": "c", "city": "Oslo", "query": "weather in Oslo"}
    assert argument_problems(expected, good) == []
    assert argument_problems(expected, {**good, "days": 7.0}) == []
    assert argument_problems(expected, {**good, "days": 3, "unit": "kelvin"}) == [
        "days: expected 7, got 3",
        'unit: expected one_of("celsius", "c"), got "kelvin"',
    ]
    assert argument_problems(expected, {"unit": "c", "query": "x"}) == [
        "city: missing (expected ANY)",
        "query: expected a string matching '^weather in ', got \"x\"",
    ]


def test_matchers_from_json() -> None:
    spec = from_spec(
        {
            "a": {"$one_of": [1, 2]},
            "b": {"$optional": {"$any": True}},
            "c": {"$regex": "^x"},
            "d": [{"k": {"$one_of": ["v", "w"]}}],
        }
    )
    assert argument_problems(spec, {"a": 2, "c": "xy", "d": [{"k": "w"}]}) == []
    assert argument_problems(spec, {"a": 3, "c": "xy", "d": [{"k": "w"}]})
    with pytest.raises(ValueError, match="unknown matcher '\\$oneof'"):
        from_spec({"a": {"$oneof": [1]}})
    with pytest.raises(ValueError, match="exactly one key"):
        from_spec({"a": {"$any": True, "$regex": "x"}})


def test_call_syntax_is_parsed_never_run() -> None:
    assert parse_calls("calculator(expression='2 + 2')") == [
        ("calculator", {"expression": "2 + 2"})
    ]
    calls = parse_calls("[math.add(a=1, b=2.5), search(q=one_of('x', 'y'), flags=[true, null])]")
    assert calls[0] == ("math.add", {"a": 1, "b": 2.5})
    assert calls[1][0] == "search"
    assert argument_problems(calls[1][1], {"q": "y", "flags": [True, None]}) == []
    for bad, message in [
        ("calculator('2 + 2')", "by name"),
        ("calculator(**x)", "name each argument"),
        ("calculator(expression=__import__('os').getcwd())", "must be literals"),
        ("not a call", "not a call expression"),
        ("42", "expected a call"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_calls(bad)


def _call(name: str, **arguments: object) -> MadeCall:
    return MadeCall(name, arguments)


def test_calls_match_as_a_set_by_default() -> None:
    expected = [CallSpec("a", {"x": 1}), CallSpec("b", {"y": 2})]
    made = [_call("b", y=2.0), _call("a", x=1)]
    comparison = compare_calls(expected, made)
    assert comparison.exact and comparison.problems == ()
    ordered = compare_calls(expected, made, ordered=True)
    assert not ordered.exact
    assert ordered.matched == 0
    assert ordered.problems[0].startswith('call 1: expected a {"x": 1}, got b {"y": 2.0}')


def test_the_matching_finds_the_assignment_that_fits_all() -> None:
    # A greedy match would give the first made call to the ANY call and leave x=1 unmatched.
    expected = [CallSpec("f", {"x": ANY}), CallSpec("f", {"x": 1})]
    made = [_call("f", x=1), _call("f", x=2)]
    assert compare_calls(expected, made).exact


def test_missing_wrong_and_extra_calls_are_explained() -> None:
    expected = [CallSpec("calculator", {"expression": "2 + 3"}), CallSpec("clock", {})]
    made = [_call("calculator", expression="2 + 2"), _call("search", q="x")]
    comparison = compare_calls(expected, made)
    assert comparison.matched == 0 and not comparison.exact
    assert comparison.problems == (
        'expected calculator {"expression": "2 + 3"}; the closest call, calculator '
        '{"expression": "2 + 2"}, differs: expression: expected "2 + 3", got "2 + 2"',
        "expected clock {}; no call of 'clock' left to match it",
        'unexpected call calculator {"expression": "2 + 2"}',
        'unexpected call search {"q": "x"}',
    )
