"""``koboi skills list|show|validate``, in process, through the real CLI app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from koboi import PluginHost
from koboi_cli.app import app

Kit = Any


def _config(tmp_path: Path, kit: Kit, budget: int = 4000) -> Path:
    kit.write_skill(
        tmp_path / "skills", "haiku", "Write haiku.", "Five, seven, five.\n", {"ref.md": "x"}
    )
    (tmp_path / "skills" / "Broken").mkdir()
    (tmp_path / "skills" / "Broken" / "SKILL.md").write_text("no frontmatter")
    path = tmp_path / "agent.yaml"
    path.write_text(
        "llm: {provider: scripted}\n"
        f"skills: {{search_paths: [skills], examples: [code-review], budget_tokens: {budget}}}\n"
    )
    return path


def test_list_shows_the_skills_and_warns_about_the_rest(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    config = _config(tmp_path, kit)
    shown = CliRunner().invoke(app, ["skills", "list", str(config)])
    assert shown.exit_code == 0, shown.output
    assert "haiku" in shown.stdout and "examples/code-review" in shown.stdout
    assert "skills/Broken: SKILL.md must begin with YAML frontmatter" in shown.stderr
    data = json.loads(CliRunner().invoke(app, ["skills", "list", str(config), "--json"]).stdout)
    assert [s["name"] for s in data["skills"]] == ["haiku", "code-review"] and data["listed"] == 2


def test_show_prints_a_skill_and_names_the_others_when_missing(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    config = _config(tmp_path, kit)
    shown = CliRunner().invoke(app, ["skills", "show", str(config), "haiku", "--json"])
    data = json.loads(shown.stdout)
    assert data["body"] == "Five, seven, five." and data["files"] == ["ref.md"]
    missing = CliRunner().invoke(app, ["skills", "show", str(config), "sonnet"])
    assert missing.exit_code == 1
    assert "no skill named 'sonnet'" in missing.stderr and "haiku, code-review" in missing.stderr


def test_validate_exits_1_on_an_invalid_folder(host: PluginHost, tmp_path: Path, kit: Kit) -> None:
    _config(tmp_path, kit)
    checked = CliRunner().invoke(app, ["skills", "validate", str(tmp_path / "skills")])
    assert checked.exit_code == 1
    assert "invalid  " in checked.stdout and "valid    " in checked.stdout
    good = CliRunner().invoke(
        app, ["skills", "validate", str(tmp_path / "skills" / "haiku"), "--json"]
    )
    assert good.exit_code == 0 and json.loads(good.stdout)["valid"] is True


def test_a_config_without_the_section_is_one_error_line(host: PluginHost, tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("llm: {provider: scripted}\n")
    shown = CliRunner().invoke(app, ["skills", "list", str(path)])
    assert (
        shown.exit_code == 1
        and shown.stderr.startswith("error: ")
        and "Traceback" not in shown.output
    )
