"""docs/ and the kernel cannot drift: hooks.md against hookspecs.py, config.md against config.py."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from koboi import hookspecs
from koboi.config import KERNEL_SECTIONS

DOCS = Path(__file__).resolve().parents[1] / "docs"
HOOKS_MD = DOCS / "hooks.md"
CONFIG_MD = DOCS / "config.md"


def _sections(text: str, level: int) -> dict[str, str]:
    """Heading text -> body, for headings of exactly ``level`` '#' characters."""
    marks = "#" * level
    pattern = re.compile(rf"^{marks} (?P<title>.+?)\s*$", re.MULTILINE)
    found = list(pattern.finditer(text))
    sections: dict[str, str] = {}
    for index, match in enumerate(found):
        end = found[index + 1].start() if index + 1 < len(found) else len(text)
        # A body ends at the next heading of the same or a higher level.
        body = text[match.end() : end]
        higher = re.search(rf"^#{{1,{level}}} ", body, re.MULTILINE)
        sections[match.group("title").strip("` ")] = body[: higher.start()] if higher else body
    return sections


def _hook_sections() -> dict[str, str]:
    sections = _sections(HOOKS_MD.read_text(encoding="utf-8"), 2)
    return {title: body for title, body in sections.items() if title.startswith("koboi_")}


def test_hook_names_are_the_specs() -> None:
    specs = sorted(n for n, v in vars(hookspecs).items() if n.startswith("koboi_") and callable(v))
    assert sorted(hookspecs.HOOK_NAMES) == specs
    assert specs, "no hook specs found"


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_spec_has_a_docstring(name: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, name))
    assert doc, f"hook spec {name} has no docstring"
    for parameter in inspect.signature(getattr(hookspecs, name)).parameters:
        assert f":param {parameter}:" in doc, f"{name}: docstring does not describe {parameter!r}"


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_spec_is_documented(name: str) -> None:
    sections = _hook_sections()
    assert name in sections, f"docs/hooks.md has no '## {name}' section"
    body = sections[name]
    for parameter in inspect.signature(getattr(hookspecs, name)).parameters:
        assert re.search(rf"\b{re.escape(parameter)}\b", body), (
            f"docs/hooks.md '## {name}' does not mention the parameter {parameter!r}"
        )
    assert "register(" in body, f"docs/hooks.md '## {name}' does not show the register(...) call"
    assert "@hookimpl" in body, f"docs/hooks.md '## {name}' has no example"


def test_no_documented_hook_is_missing_from_the_kernel() -> None:
    unknown = sorted(set(_hook_sections()) - set(hookspecs.HOOK_NAMES))
    assert not unknown, f"docs/hooks.md documents hooks the kernel does not define: {unknown}"


def test_interceptor_methods_are_documented() -> None:
    from koboi.interceptors import Interceptor

    text = HOOKS_MD.read_text(encoding="utf-8")
    methods = [n for n, v in vars(Interceptor).items() if inspect.iscoroutinefunction(v)]
    assert methods
    for method in methods:
        assert re.search(rf"`{method}[`(]", text), (
            f"docs/hooks.md does not document Interceptor.{method}"
        )
    for word in ("priority", "Verdict", "skip_approval"):
        assert word in text


KERNEL_FIELDS = [
    (section, field) for section, model in KERNEL_SECTIONS.items() for field in model.model_fields
]


@pytest.mark.parametrize(("section", "field"), KERNEL_FIELDS)
def test_kernel_config_field_has_a_description(section: str, field: str) -> None:
    info = KERNEL_SECTIONS[section].model_fields[field]
    assert info.description, f"{section}.{field} has no description"


@pytest.mark.parametrize(("section", "field"), KERNEL_FIELDS)
def test_kernel_config_field_is_in_config_md(section: str, field: str) -> None:
    sections = _sections(CONFIG_MD.read_text(encoding="utf-8"), 3)
    assert section in sections, f"docs/config.md has no '### `{section}`' section"
    assert f"`{field}`" in sections[section], (
        f"docs/config.md '### `{section}`' does not document the field {field!r}"
    )
