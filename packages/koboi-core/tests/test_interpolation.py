"""Property tests of ${VAR} interpolation and .env parsing."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from koboi.interpolation import interpolate, interpolate_text, parse_dotenv

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
plain = st.text(alphabet=string.ascii_letters + string.digits + " .,:/-_!?", max_size=30)


@given(text=plain)
def test_text_without_dollar_is_unchanged(text: str) -> None:
    assert interpolate_text(text, {}, "k") == (text, [])


@given(name=names, value=plain, before=plain, after=plain)
def test_set_variable_is_substituted(name: str, value: str, before: str, after: str) -> None:
    result, found = interpolate_text(f"{before}${{{name}}}{after}", {name: value}, "k")
    assert found == []
    assert result == before + value + after


@given(name=names, default=plain.filter(lambda d: not d.startswith("-")))
def test_default_used_only_when_unset_or_empty(name: str, default: str) -> None:
    # A default that starts with '-' must be written ${NAME:--x}: ':-' is the shell-style form.
    assert interpolate_text(f"${{{name}:{default}}}", {}, "k")[0] == default
    assert interpolate_text(f"${{{name}:{default}}}", {name: ""}, "k")[0] == default
    assert interpolate_text(f"${{{name}:-{default}}}", {}, "k")[0] == default
    assert interpolate_text(f"${{{name}:{default}}}", {name: "set"}, "k")[0] == "set"


@given(name=names, path=names)
def test_unset_variable_is_an_error_naming_it_and_the_path(name: str, path: str) -> None:
    result, found = interpolate_text(f"x ${{{name}}} y", {}, path)
    assert len(found) == 1
    assert found[0].path == path
    assert name in found[0].message
    assert "${" not in result  # never left as literal text


@given(text=plain)
def test_escaped_dollar_brace_is_literal(text: str) -> None:
    assert interpolate_text(f"$${{{text}}}", {}, "k") == (f"${{{text}}}", [])


@given(
    value=st.recursive(
        st.one_of(st.integers(), st.booleans(), st.none(), plain),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=4)
        ),
        max_leaves=20,
    )
)
@settings(max_examples=60)
def test_structures_without_references_round_trip(value: object) -> None:
    assert interpolate(value, {}) == (value, [])


def test_nested_paths_are_reported() -> None:
    _, found = interpolate({"llm": {"keys": ["ok", "${MISSING}"]}}, {})
    assert [p.path for p in found] == ["llm.keys[1]"]


def test_bad_references() -> None:
    _, found = interpolate_text("${1BAD} and ${", {}, "k")
    assert [p.message for p in found] == [
        "invalid variable reference '${1BAD}'",
        "unclosed '${' in value",
    ]


@given(
    key=names, value=st.text(alphabet=string.ascii_letters + string.digits + " ./:-", max_size=20)
)
def test_dotenv_round_trip(key: str, value: str) -> None:
    text = f'# comment\nexport {key}="{value}"\n\n'
    assert parse_dotenv(text) == {key: value}


def test_dotenv_forms() -> None:
    text = "A=1\nB = two words # trailing\nC='single # kept'\nD=\"multi\\nline\"\nnot a line\n"
    assert parse_dotenv(text) == {
        "A": "1",
        "B": "two words",
        "C": "single # kept",
        "D": "multi\nline",
    }
