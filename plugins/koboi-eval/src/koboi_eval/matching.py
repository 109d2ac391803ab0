"""Comparing tool calls the way BFCL's AST checker does.

Used by the eval DSL (``called_tool(name, args=...)``) and by the batch scorer
``tool_call_accuracy``, so a call is judged the same way in both places:

* the tool's name must be equal;
* arguments are compared as trees, not as text: objects ignore key order,
  lists keep theirs, numbers are equal across int and float (``2 == 2.0``, but
  ``True`` is not ``1``), strings are exact (or, with ``strings="loose"``,
  compared the way BFCL does: case, spaces and ``,./-_*^`` ignored);
* every expected argument must be given and no unexpected one may be, except
  arguments marked :func:`optional`;
* an expected value may be a matcher instead of a value: :data:`ANY`,
  :func:`one_of` (allowed alternatives), :func:`optional`, :func:`matches`
  (a regular expression).

Expected calls may also be written as Python call syntax, parsed with
:mod:`ast` (never evaluated): ``calculator(expression="2 + 2")``.
"""

from __future__ import annotations

import ast
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

StringMatch = Literal["exact", "loose"]

#: What BFCL's checker drops from strings before comparing them (besides case).
_LOOSE_DROP = re.compile(r"[\s,./\-_*^]+")


class Matcher(ABC):
    """An expected argument value that is a rule rather than a value."""

    #: True when the argument may be left out.
    optional: bool = False

    @abstractmethod
    def problem(self, actual: Any, path: str, strings: StringMatch) -> str | None:
        """None when ``actual`` is acceptable, else one line saying why not."""

    @abstractmethod
    def __repr__(self) -> str:
        """A stable label, shown in reports (so it must not contain ids or addresses)."""


class _Anything(Matcher):
    def problem(self, actual: Any, path: str, strings: StringMatch) -> str | None:
        return None

    def __repr__(self) -> str:
        return "ANY"


ANY: Matcher = _Anything()
"""Any value (the argument must still be given, unless wrapped in :func:`optional`)."""


class OneOf(Matcher):
    """Any one of several allowed values (BFCL's list of acceptable answers)."""

    def __init__(self, *alternatives: Any) -> None:
        if not alternatives:
            raise ValueError("one_of() needs at least one allowed value")
        self.alternatives = alternatives

    def problem(self, actual: Any, path: str, strings: StringMatch) -> str | None:
        for alternative in self.alternatives:
            if not value_problems(alternative, actual, path, strings):
                return None
        return f"{_where(path)}expected {show(self)}, got {show(actual)}"

    def __repr__(self) -> str:
        return f"one_of({', '.join(show(a) for a in self.alternatives)})"


class Optional(Matcher):
    """An argument that may be left out; when given, it must match ``expected``."""

    optional = True

    def __init__(self, expected: Any = ANY) -> None:
        self.expected = expected

    def problem(self, actual: Any, path: str, strings: StringMatch) -> str | None:
        found = value_problems(self.expected, actual, path, strings)
        return found[0] if found else None

    def __repr__(self) -> str:
        return "optional()" if self.expected is ANY else f"optional({show(self.expected)})"


class Regex(Matcher):
    """A string in which the regular expression is found (``re.search``; anchor it for more)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        try:
            self.compiled = re.compile(pattern, flags)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        self.pattern = pattern

    def problem(self, actual: Any, path: str, strings: StringMatch) -> str | None:
        if isinstance(actual, str) and self.compiled.search(actual):
            return None
        return f"{_where(path)}expected a string matching {self.pattern!r}, got {show(actual)}"

    def __repr__(self) -> str:
        return f"matches({self.pattern!r})"


def one_of(*alternatives: Any) -> Matcher:
    """Any one of ``alternatives`` (each compared like a plain expected value)."""
    return OneOf(*alternatives)


def optional(expected: Any = ANY) -> Matcher:
    """The argument may be absent; when present it must match ``expected``."""
    return Optional(expected)


def matches(pattern: str, flags: int = 0) -> Matcher:
    """A string argument in which ``pattern`` is found."""
    return Regex(pattern, flags)


# -- values ------------------------------------------------------------------------


def canonical(value: Any, strings: StringMatch = "exact") -> Hashable:
    """A hashable tree equal for values BFCL would call equal."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):  # before int: True is an int to Python, not to a schema
        return ("bool", value)
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return ("number", repr(value))
        return ("number", Fraction(value))
    if isinstance(value, str):
        return ("string", loose_string(value) if strings == "loose" else value)
    if isinstance(value, Mapping):
        return ("object", frozenset((str(k), canonical(v, strings)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(canonical(v, strings) for v in value))
    return ("other", repr(value))


def loose_string(text: str) -> str:
    """BFCL's string standardisation: case-folded, without spaces and ``,./-_*^``."""
    return _LOOSE_DROP.sub("", text).casefold()


def show(value: Any) -> str:
    """Compact, stable JSON-like text for a value (matchers by their label)."""
    if isinstance(value, Matcher):
        return repr(value)
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: str(kv[0]))
        return "{" + ", ".join(f"{json.dumps(str(k))}: {show(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(show(v) for v in value) + "]"
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _where(path: str) -> str:
    return f"{path}: " if path else ""


def value_problems(expected: Any, actual: Any, path: str, strings: StringMatch) -> list[str]:
    """Why ``actual`` is not ``expected`` (one line each); empty when it is."""
    if isinstance(expected, Matcher):
        found = expected.problem(actual, path, strings)
        return [found] if found else []
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return [f"{_where(path)}expected an object, got {show(actual)}"]
        return mapping_problems(expected, actual, path, strings)
    if isinstance(expected, list | tuple):
        if not isinstance(actual, list | tuple):
            return [f"{_where(path)}expected a list, got {show(actual)}"]
        if len(expected) != len(actual):
            return [
                f"{_where(path)}expected {len(expected)} item(s) {show(expected)}, "
                f"got {len(actual)} {show(actual)}"
            ]
        problems: list[str] = []
        for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
            problems += value_problems(e, a, f"{path}[{index}]", strings)
        return problems
    if canonical(expected, strings) != canonical(actual, strings):
        return [f"{_where(path)}expected {show(expected)}, got {show(actual)}"]
    return []


def mapping_problems(
    expected: Mapping[str, Any], actual: Mapping[str, Any], path: str, strings: StringMatch
) -> list[str]:
    """Key by key: missing keys, unexpected keys, and values that differ."""
    problems: list[str] = []
    for key in sorted(expected, key=str):
        where = f"{path}.{key}" if path else str(key)
        wanted = expected[key]
        if key not in actual:
            if isinstance(wanted, Matcher) and wanted.optional:
                continue
            problems.append(f"{where}: missing (expected {show(wanted)})")
            continue
        problems += value_problems(wanted, actual[key], where, strings)
    for key in sorted(set(actual) - set(expected), key=str):
        where = f"{path}.{key}" if path else str(key)
        problems.append(f"{where}: not expected (got {show(actual[key])})")
    return problems


def argument_problems(
    expected: Mapping[str, Any], actual: Mapping[str, Any], *, strings: StringMatch = "exact"
) -> list[str]:
    """Why a call's ``actual`` arguments are not the ``expected`` ones; empty when they are."""
    return mapping_problems(expected, actual, "", strings)


# -- expected values written as JSON (datasets) ---------------------------------------

_MARKERS = ("$any", "$one_of", "$optional", "$regex")


def from_spec(value: Any) -> Any:
    """Turn the JSON form of matchers into matchers, recursively.

    ``{"$any": true}``, ``{"$one_of": [a, b]}``, ``{"$optional": X}`` and
    ``{"$regex": "..."}``; any other value is an expected value as it is.
    """
    if isinstance(value, Mapping):
        markers = [k for k in value if isinstance(k, str) and k.startswith("$")]
        if not markers:
            return {k: from_spec(v) for k, v in value.items()}
        if len(value) != 1:
            raise ValueError(f"a matcher object has exactly one key, got {sorted(map(str, value))}")
        marker, inner = markers[0], value[markers[0]]
        if marker == "$any":
            if inner is not True:
                raise ValueError('write {"$any": true}')
            return ANY
        if marker == "$one_of":
            if not isinstance(inner, list) or not inner:
                raise ValueError('"$one_of" takes a non-empty list of allowed values')
            return OneOf(*(from_spec(v) for v in inner))
        if marker == "$optional":
            return Optional(from_spec(inner))
        if marker == "$regex":
            if not isinstance(inner, str):
                raise ValueError('"$regex" takes a regular expression string')
            return Regex(inner)
        raise ValueError(f"unknown matcher {marker!r} (known: {', '.join(_MARKERS)})")
    if isinstance(value, list):
        return [from_spec(v) for v in value]
    return value


# -- expected calls written as Python call syntax ------------------------------------

_JSON_NAMES = {"true": True, "false": False, "null": None}


def parse_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Parse ``f(a=1)`` or ``[f(a=1), g(b="x")]`` into (name, arguments) pairs.

    The text is parsed, never run: argument values must be literals (and may
    use ``ANY``, ``one_of(...)``, ``optional(...)``, ``matches(...)``).
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a call expression: {text!r} ({exc.msg})") from None
    body = tree.body
    nodes = body.elts if isinstance(body, ast.List | ast.Tuple) else [body]
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            raise ValueError(f"expected a call such as name(arg=value), got {ast.unparse(node)!r}")
        name = _dotted(node.func)
        if node.args:
            raise ValueError(f"{name}(...): give arguments by name (name=value), not by position")
        arguments: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise ValueError(f"{name}(...): **mappings are not allowed; name each argument")
            arguments[keyword.arg] = _literal(keyword.value)
        calls.append((name, arguments))
    return calls


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise ValueError(f"a tool name must be a plain or dotted name, got {ast.unparse(node)!r}")


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name):
        if node.id == "ANY":
            return ANY
        if node.id in _JSON_NAMES:
            return _JSON_NAMES[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [_literal(a) for a in node.args]
        if node.func.id == "one_of":
            return OneOf(*args)
        if node.func.id == "optional" and len(args) <= 1:
            return Optional(*args)
        if node.func.id == "matches" and len(args) == 1 and isinstance(args[0], str):
            return Regex(args[0])
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        result: dict[Any, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise ValueError("**mappings are not allowed inside an argument value")
            result[_literal(key)] = _literal(value)
        return result
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"argument values must be literals, got {ast.unparse(node)!r}") from None


# -- whole calls ---------------------------------------------------------------------


@dataclass(frozen=True)
class CallSpec:
    """An expected call: the tool's name and its expected arguments (values or matchers)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.name} {show(self.arguments)}"


@dataclass(frozen=True)
class MadeCall:
    """A call the model made."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    step: int = 0

    def __str__(self) -> str:
        where = f" (step {self.step})" if self.step else ""
        return f"{self.name} {show(self.arguments)}{where}"


def call_problems(
    expected: CallSpec, actual: MadeCall, strings: StringMatch = "exact"
) -> list[str]:
    """Why ``actual`` is not the ``expected`` call; empty when it is."""
    if expected.name != actual.name:
        return [f"tool: expected {expected.name!r}, got {actual.name!r}"]
    return argument_problems(expected.arguments, actual.arguments, strings=strings)


@dataclass(frozen=True)
class CallsComparison:
    """How a list of calls compares with the expected list."""

    expected: int
    actual: int
    matched: int
    problems: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        """Every expected call made, nothing else."""
        return self.matched == self.expected == self.actual


def compare_calls(
    expected: Sequence[CallSpec],
    actual: Sequence[MadeCall],
    *,
    ordered: bool = False,
    strings: StringMatch = "exact",
) -> CallsComparison:
    """Match expected calls with the calls made: in order, or as a set (BFCL's parallel
    calls, the default), one made call per expected call."""
    if ordered:
        problems: list[str] = []
        matched = 0
        for index, (e, a) in enumerate(zip(expected, actual, strict=False)):
            found = call_problems(e, a, strings)
            if found:
                problems.append(f"call {index + 1}: expected {e}, got {a}: {'; '.join(found)}")
            else:
                matched += 1
        problems += [
            f"missing call {i + 1}: {e}" for i, e in enumerate(expected) if i >= len(actual)
        ]
        problems += [
            f"unexpected call {i + 1}: {a}" for i, a in enumerate(actual) if i >= len(expected)
        ]
        return CallsComparison(len(expected), len(actual), matched, tuple(problems))
    fits = [[not call_problems(e, a, strings) for a in actual] for e in expected]
    pairs = _max_matching(fits, len(actual))
    problems = []
    used = set(pairs.values())
    for index, e in enumerate(expected):
        if index in pairs:
            continue
        same_name = [a for j, a in enumerate(actual) if a.name == e.name and j not in used]
        if same_name:
            closest = min(same_name, key=lambda a: len(call_problems(e, a, strings)))
            why = "; ".join(call_problems(e, closest, strings))
            problems.append(f"expected {e}; the closest call, {closest}, differs: {why}")
        else:
            problems.append(f"expected {e}; no call of {e.name!r} left to match it")
    problems += [f"unexpected call {a}" for j, a in enumerate(actual) if j not in used]
    return CallsComparison(len(expected), len(actual), len(pairs), tuple(problems))


def _max_matching(fits: list[list[bool]], right: int) -> dict[int, int]:
    """Maximum bipartite matching (Kuhn's augmenting paths): expected index -> made index."""
    owner: dict[int, int] = {}  # made index -> expected index

    def augment(i: int, seen: set[int]) -> bool:
        for j in range(right):
            if fits[i][j] and j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(fits)):
        augment(i, set())
    return {i: j for j, i in owner.items()}
