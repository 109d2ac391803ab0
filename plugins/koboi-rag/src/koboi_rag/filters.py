"""Metadata filters: a small Mongo-like language over a chunk's metadata.

``{"lang": "en"}`` (equality), ``{"year": {"$gte": 2020}}``, ``{"tag": {"$in": ["a",
"b"]}}``, ``{"$or": [{...}, {...}]}``. Operators: ``$eq $ne $gt $gte $lt $lte $in $nin
$exists``, and ``$and``/``$or`` over lists of filters. A key may name a nested value
with dots (``"source.kind"``). A filter narrows what is searched; it is not access
control (documents are searchable by whoever can query the index).

A filter is compiled once (:func:`compile_filter`), so a mistake is reported when
the config loads, with the path of the bad part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Mapping[str, Any]], bool]

_MISSING = object()
_COMPARE = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


class FilterError(ValueError):
    """A filter that cannot be understood; the message names the part."""


def _lookup(metadata: Mapping[str, Any], key: str) -> Any:
    value: Any = metadata
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _ordered(a: Any, b: Any, compare: Callable[[Any, Any], bool]) -> bool:
    # Numbers compare with numbers, strings with strings; anything else never matches
    # (a missing or differently typed value is not "less than" a date).
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if (isinstance(a, numbers) and isinstance(b, numbers)) or (
        isinstance(a, str) and isinstance(b, str)
    ):
        return bool(compare(a, b))
    return False


def _operator(key: str, op: str, operand: Any, where: str) -> Predicate:
    """The predicate of one ``{op: operand}`` on ``key``."""

    def value(m: Mapping[str, Any]) -> Any:
        return _lookup(m, key)

    if op == "$eq":
        return lambda m: _equal(value(m), operand)
    if op == "$ne":
        return lambda m: not _equal(value(m), operand)
    if op in _COMPARE:
        if isinstance(operand, bool) or not isinstance(operand, int | float | str):
            raise FilterError(f"{where}: compare with a number or a string, not {operand!r}")
        compare = _COMPARE[op]

        def ordered(m: Mapping[str, Any]) -> bool:
            found = value(m)
            return found is not _MISSING and _ordered(found, operand, compare)

        return ordered
    if op in ("$in", "$nin"):
        if not isinstance(operand, list):
            raise FilterError(f"{where}: give a list of values")
        options = list(operand)

        def member(m: Mapping[str, Any]) -> bool:
            found = value(m)
            return any(_equal(found, x) for x in options) or _overlaps(found, options)

        if op == "$in":
            return member
        return lambda m: not member(m)
    if op == "$exists":
        if not isinstance(operand, bool):
            raise FilterError(f"{where}: give true or false")
        return lambda m: (value(m) is not _MISSING) == operand
    raise FilterError(f"{where}: unknown operator (use $eq $ne $gt $gte $lt $lte $in $nin $exists)")


def _field(key: str, condition: Any, path: str) -> Predicate:
    if not isinstance(condition, Mapping) or not any(str(k).startswith("$") for k in condition):
        return lambda m: _equal(_lookup(m, key), condition)
    tests = [_operator(key, str(op), operand, f"{path}.{op}") for op, operand in condition.items()]
    return lambda m: all(test(m) for test in tests)


def _equal(value: Any, wanted: Any) -> bool:
    if value is _MISSING:
        return False
    if isinstance(value, list) and not isinstance(wanted, list):
        return wanted in value  # a tag list matches any of its tags
    if isinstance(value, bool) != isinstance(wanted, bool):
        return False  # True is not 1 here
    return bool(value == wanted)


def _overlaps(value: Any, options: list[Any]) -> bool:
    return isinstance(value, list) and any(v in options for v in value)


def _combined(predicates: list[Predicate], *, every: bool) -> Predicate:
    if every:
        return lambda m: all(p(m) for p in predicates)
    return lambda m: any(p(m) for p in predicates)


def compile_filter(spec: Mapping[str, Any] | None, path: str = "filter") -> Predicate:
    """A predicate over metadata for ``spec``; :class:`FilterError` names a bad part."""
    if spec is None:
        return lambda m: True
    if not isinstance(spec, Mapping):
        raise FilterError(f"{path}: a filter is a mapping, not {type(spec).__name__}")
    parts: list[Predicate] = []
    for key, condition in spec.items():
        where = f"{path}.{key}"
        if key in ("$and", "$or"):
            if not isinstance(condition, list) or not condition:
                raise FilterError(f"{where}: give a non-empty list of filters")
            subs = [compile_filter(c, f"{where}[{n}]") for n, c in enumerate(condition)]
            parts.append(_combined(subs, every=key == "$and"))
        elif str(key).startswith("$"):
            raise FilterError(f"{where}: unknown operator at the top level (use $and or $or)")
        else:
            parts.append(_field(str(key), condition, where))
    return lambda m: all(p(m) for p in parts)


def merge_filters(*specs: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Every given filter must hold (``$and``); None when none is given."""
    given = [dict(s) for s in specs if s]
    if not given:
        return None
    return given[0] if len(given) == 1 else {"$and": given}
