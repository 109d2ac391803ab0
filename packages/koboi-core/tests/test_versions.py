from __future__ import annotations

import pytest

from koboi.versions import release, requirement_specifier, satisfies


@pytest.mark.parametrize(
    ("version", "spec", "ok"),
    [
        ("0.1.0", ">=0.1,<0.2", True),
        ("0.2.0", ">=0.1,<0.2", False),
        ("0.1.5", "~=0.1.0", True),
        ("0.2.0", "~=0.1.0", False),
        ("1.4", "~=1.2", True),
        ("2.0", "~=1.2", False),
        ("0.1.0", "==0.1.*", True),
        ("0.1.0", "!=0.1.0", False),
        ("0.1.0rc1", ">=0.1", True),
        ("0.1.0", "", True),
    ],
)
def test_satisfies(version: str, spec: str, ok: bool) -> None:
    assert satisfies(version, spec) is ok


def test_bad_specifier() -> None:
    with pytest.raises(ValueError, match="cannot read version specifier"):
        satisfies("1.0", "about 1")


def test_requirement_parsing() -> None:
    assert requirement_specifier("koboi-core>=0.1,<0.2", "koboi-core") == ">=0.1,<0.2"
    assert requirement_specifier("koboi_core (>=0.1)", "koboi-core") == ">=0.1"
    assert requirement_specifier("koboi-core>=0.1; extra == 'x'", "koboi-core") is None
    assert requirement_specifier("pluggy>=1", "koboi-core") is None
    assert release("1.2.3.post1") == (1, 2, 3)
