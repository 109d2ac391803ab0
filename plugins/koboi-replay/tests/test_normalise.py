"""The normal form events are compared in: only timestamps and ids are normalised."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from koboi_replay.normalise import (
    MISSING,
    Normaliser,
    encode,
    first_difference,
    render_path,
    value_at,
)


def _stream(events: list[tuple[str, dict[str, Any]]]) -> list[bytes]:
    normaliser = Normaliser()
    return [encode(normaliser.event(i, t, d)) for i, (t, d) in enumerate(events, start=1)]


def test_timestamps_and_runtime_ids_are_normalised() -> None:
    normal = Normaliser().event(
        3,
        "approval_requested",
        {
            "approval_id": "ap_123",
            "expires_at": 1700000000.5,
            "holder": "host:1:abc",
            "session_id": "s1",
            "at": 12.0,
            "call_id": "call_0_0",
            "reason": "risk",
            "decided_at": None,
        },
    )
    assert normal == {
        "seq": 3,
        "type": "approval_requested",
        "data": {
            "approval_id": "<id-1>",
            "expires_at": "<time>",
            "holder": "<id-2>",
            "session_id": "<id-3>",
            "at": "<time>",
            "call_id": "call_0_0",  # from the model's answer: compared exactly
            "reason": "risk",
            "decided_at": None,  # absent stays absent: only values are normalised
        },
    }


def test_nested_values_are_compared_exactly() -> None:
    """Tool arguments, answers and results may hold keys like created_at: never touched."""
    data = {"arguments": {"created_at": 5, "user_id": "u1"}, "response": {"id": "r"}}
    assert Normaliser().data(data) == data


def test_only_timestamps_and_ids_may_differ() -> None:
    recorded = _stream([("run_resumed", {"after_seq": 5, "holder": "a:1:x", "step": 2})])
    same = _stream([("run_resumed", {"after_seq": 5, "holder": "b:2:y", "step": 2})])
    other = _stream([("run_resumed", {"after_seq": 6, "holder": "a:1:x", "step": 2})])
    assert recorded == same
    assert recorded != other


def test_ids_are_renamed_consistently_not_blanket() -> None:
    """An id that recurs must recur at the same places in both streams."""
    recorded = _stream(
        [("approval_requested", {"approval_id": "A"}), ("approval_decided", {"approval_id": "A"})]
    )
    renamed = _stream(
        [("approval_requested", {"approval_id": "Z"}), ("approval_decided", {"approval_id": "Z"})]
    )
    split = _stream(
        [("approval_requested", {"approval_id": "Z"}), ("approval_decided", {"approval_id": "Y"})]
    )
    assert recorded == renamed
    assert recorded[1] != split[1]


_ids = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=12)


@given(_ids, st.permutations(["a", "b", "c", "d"]))
def test_a_bijective_renaming_of_ids_never_shows(ids: list[str], permutation: list[str]) -> None:
    mapping = dict(zip(["a", "b", "c", "d"], permutation, strict=True))
    original = _stream([("e", {"approval_id": i, "n": k}) for k, i in enumerate(ids)])
    renamed = _stream([("e", {"approval_id": mapping[i], "n": k}) for k, i in enumerate(ids)])
    assert original == renamed


@given(_ids, _ids)
def test_streams_are_equal_exactly_when_their_id_patterns_are(a: list[str], b: list[str]) -> None:
    def pattern(ids: list[str]) -> list[int]:
        first: dict[str, int] = {}
        return [first.setdefault(i, len(first)) for i in ids]

    left = _stream([("e", {"approval_id": i}) for i in a])
    right = _stream([("e", {"approval_id": i}) for i in b])
    assert (left == right) == (pattern(a) == pattern(b))


def test_first_difference_names_the_path() -> None:
    expected = {"seq": 4, "data": {"content": "42", "items": [1, 2, 3]}}
    assert first_difference(expected, expected) is None
    changed = {"seq": 4, "data": {"content": "43", "items": [1, 2, 3]}}
    path = first_difference(expected, changed)
    assert path is not None and render_path(path) == "data.content"
    assert value_at(changed, path) == "43"
    longer = {"seq": 4, "data": {"content": "42", "items": [1, 2, 3, 4]}}
    path = first_difference(expected, longer)
    assert path is not None and render_path(path) == "data.items[3]"
    assert value_at(expected, path) is MISSING and value_at(longer, path) == 4
    # A type change is a difference even when the values compare equal in Python.
    path = first_difference({"x": 1}, {"x": True})
    assert path is not None and render_path(path) == "x"
