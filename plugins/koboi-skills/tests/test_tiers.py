"""Three tiers through a real agent: the list before every call, a body when activated,
a file on demand; the budget cuts with a notice; the journal rebuilds the session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi import PluginHost

pytestmark = pytest.mark.anyio

Kit = Any


def _library(kit: Kit, root: Path) -> None:
    kit.write_skill(
        root,
        "pdf-forms",
        "Fill PDF forms. Use when a PDF form must be completed.",
        "# PDF forms\nRead references/fields.md, then fill every field.\n",
        {"references/fields.md": "name: full legal name\ndate: YYYY-MM-DD\n"},
    )
    kit.write_skill(root, "haiku", "Write haiku. Use for short poems.", "Five, seven, five.\n")


async def test_the_list_is_sent_before_every_call_and_a_body_when_activated(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    _library(kit, tmp_path / "skills")
    turns = [
        kit.call("skills__activate", name="pdf-forms"),
        kit.call("skills__read_file", skill="pdf-forms", path="references/fields.md"),
        "filled",
    ]
    agent, model = kit.make_agent({"search_paths": ["skills"]}, turns, tmp_path)
    async with agent:
        result = await agent.run("fill the form")
        events = await agent.store.read(result.session_id)
    assert result.output == "filled"
    for request in model.requests:
        listing = request.messages[0].content  # placed first: there is no system prompt
        assert listing.startswith("<available_skills>") and 'name="haiku"' in listing
    results = [m.content for m in model.requests[2].messages if m.role == "tool"]
    assert results[0].startswith('<skill name="pdf-forms">') and "fill every field" in results[0]
    assert "Files of this skill (skills__read_file): references/fields.md" in results[0]
    assert results[1] == "name: full legal name\ndate: YYYY-MM-DD\n"
    catalog = [e.data for e in events if e.type == "skills.catalog"]
    assert [s["source"] for s in catalog[0]["skills"]] == ["skills/haiku", "skills/pdf-forms"]
    loaded = [(e.data["skill"], e.data["part"]) for e in events if e.type == "skills.loaded"]
    assert loaded == [("pdf-forms", "body"), ("pdf-forms", "file:references/fields.md")]
    started = [e.data for e in events if e.type == "model_call_started"]
    assert all(s["rewritten_by"] == ["skills"] for s in started)


async def test_files_need_activation_and_stay_inside_the_skill(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    _library(kit, tmp_path / "skills")
    (tmp_path / "secret.txt").write_text("top secret")
    turns = [
        kit.call("skills__read_file", skill="pdf-forms", path="references/fields.md"),
        kit.call("skills__activate", name="pdf-forms"),
        kit.call("skills__read_file", skill="pdf-forms", path="../../secret.txt"),
        kit.call("skills__activate", name="nope"),
        "done",
    ]
    agent, model = kit.make_agent({"search_paths": ["skills"]}, turns, tmp_path)
    async with agent:
        await agent.run("go")
    results = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert "activate the skill 'pdf-forms' first" in results[0]
    assert "has no file '../../secret.txt'" in results[2] and "top secret" not in results[2]
    assert "no skill named 'nope' is offered (skills: haiku, pdf-forms)" in results[3]


async def test_a_skill_over_budget_is_truncated_with_a_notice(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    kit.write_skill(tmp_path / "skills", "long", "A long skill.", "word " * 2000)
    again = kit.call("skills__activate", name="long")
    turns = [kit.call("skills__activate", name="long"), again, "done"]
    agent, model = kit.make_agent(
        {"search_paths": ["skills"], "budget_tokens": 300}, turns, tmp_path
    )
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    body, again = [m.content for m in model.requests[2].messages if m.role == "tool"]
    assert "[skill 'long' truncated: about" in body
    # Asked again: not charged twice, and never more than the budget lets through.
    assert len(again) <= len(body) and "truncated" in again
    assert "(skills.budget_tokens = 300); the rest is not shown]" in body
    assert len(body) < 1200  # what was left of 300 tokens, not the whole 10 000 characters
    loaded = next(e.data for e in events if e.type == "skills.loaded")
    assert loaded["truncated"] is True
    assert [e.type for e in events].count("skills.loaded") == 1
    catalog_cost = -(-len(model.requests[0].messages[0].content) // 4)
    assert catalog_cost + loaded["tokens"] <= 300


async def test_the_list_itself_is_cut_to_the_budget(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    for index in range(30):
        kit.write_skill(tmp_path / "skills", f"skill-{index:02d}", "d" * 200, "body")
    agent, model = kit.make_agent(
        {"search_paths": ["skills"], "budget_tokens": 600}, ["ok"], tmp_path
    )
    async with agent:
        await agent.run("go")
    listing = model.requests[0].messages[0].content
    listed = listing.count("<skill name=")
    assert 0 < listed < 30
    assert f"[{30 - listed} more skill(s) not listed: the skills budget" in listing
    assert -(-len(listing) // 4) <= 600


async def test_a_later_run_sends_the_journaled_list_even_if_the_folders_changed(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    _library(kit, tmp_path / "skills")
    agent, model = kit.make_agent({"search_paths": ["skills"]}, ["one", "two"], tmp_path)
    async with agent:
        first = await agent.run("a")
        kit.write_skill(tmp_path / "skills", "added-later", "New.", "x")
        await agent.run("b", session_id=first.session_id)
        events = await agent.store.read(first.session_id)
    assert model.requests[0].messages[0].content == model.requests[1].messages[0].content
    assert "added-later" not in model.requests[1].messages[0].content
    assert [e.type for e in events].count("skills.catalog") == 1


async def test_the_shipped_examples_and_problems_are_reported(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    bad = tmp_path / "skills" / "Bad_Name"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_text("---\nname: Bad_Name\ndescription: d\n---\n")
    agent, _ = kit.make_agent(
        {"search_paths": ["skills", "missing"], "examples": ["code-review"]}, ["ok"], tmp_path
    )
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    catalog = next(e.data for e in events if e.type == "skills.catalog")
    assert [s["name"] for s in catalog["skills"]] == ["code-review"]
    assert catalog["skills"][0]["source"] == "examples/code-review"
    problems = catalog["problems"]
    assert any(p.startswith("skills/Bad_Name:") and "lower case" in p for p in problems)
    assert "missing: no such folder" in problems


async def test_budget_chars_of_koboi_agent_is_read(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    from koboi import validate_config

    config = validate_config(
        {"llm": {"provider": "scripted"}, "skills": {"budget_chars": 8000}}, host.catalog()
    )
    section: Any = config.section("skills")
    assert section.budget_tokens == 2000


async def test_a_direct_tool_call_activates_a_skill_in_a_new_session(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    _library(kit, tmp_path / "skills")
    agent, _ = kit.make_agent({"search_paths": ["skills"]}, [], tmp_path)
    async with agent:
        called = await agent.call_tool("skills__activate", {"name": "haiku"})
        events = await agent.store.read(called.session_id)
    assert called.outcome == "completed" and "Five, seven, five." in called.content
    types = [e.type for e in events]
    assert types.index("skills.catalog") < types.index("skills.loaded")
