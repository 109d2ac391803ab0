"""``koboi skills``: list the skills a config offers, show one, validate skill folders."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from koboi_cli.api import (
    CliError,
    ConfigArgument,
    JsonOption,
    Style,
    get_host,
    note,
    print_json,
    table,
    warn,
    write,
)

app = typer.Typer(
    help="Agent skills (SKILL.md folders).", no_args_is_help=True, rich_markup_mode=None
)


def _library(config: Path) -> tuple[Any, Any]:
    from koboi.config import load_config
    from koboi_skills.discovery import discover
    from koboi_skills.settings import SkillsSettings

    loaded = load_config(config, get_host().catalog())
    settings = loaded.section("skills")
    if not isinstance(settings, SkillsSettings):
        raise CliError(f"{config} has no skills section; add one (skills: {{search_paths: [...]}})")
    return settings, discover(settings, loaded.base_dir)


@app.command("list")
def list_skills(config: ConfigArgument, as_json: JsonOption = False) -> None:
    """The skills an agent of CONFIG is offered, and the folders left out (with why)."""
    from koboi_skills.session import catalog_entries, render_catalog

    settings, library = _library(config)
    entries = catalog_entries(library)
    _, listed = render_catalog(entries, settings.budget_tokens)
    if as_json:
        print_json({"skills": entries, "listed": listed, "problems": library.problems})
        return
    for problem in library.problems:
        warn(problem)
    if not entries:
        note("no skill found")
        return
    rows = [[e["name"], _clip(e["description"], 70), e["source"]] for e in entries]
    write(sys.stdout, table(["NAME", "DESCRIPTION", "SOURCE"], rows, Style(sys.stdout)))
    if listed < len(entries):
        note(
            f"the model is shown {listed} of {len(entries)}: the list is cut to "
            f"skills.budget_tokens = {settings.budget_tokens}"
        )


@app.command("show")
def show(
    config: ConfigArgument,
    name: Annotated[str, typer.Argument(help="The skill's name.")],
    as_json: JsonOption = False,
) -> None:
    """A skill of CONFIG: its frontmatter, its instructions and its files."""
    _, library = _library(config)
    found = library.get(name)
    if found is None:
        offered = ", ".join(library.skills) or "none"
        raise CliError(f"no skill named {name!r} in {config} (skills: {offered})")
    skill = found.skill
    data = {
        "name": skill.name,
        "description": skill.description,
        "source": found.source,
        "license": skill.license,
        "compatibility": skill.compatibility,
        "allowed_tools": skill.allowed_tools,
        "metadata": skill.metadata,
        "files": skill.files(),
        "body": skill.body(),
    }
    if as_json:
        print_json(data)
        return
    style = Style(sys.stdout)
    lines = [style.bold(skill.name), f"  {skill.description}", f"  source: {found.source}"]
    for key in ("license", "compatibility", "allowed_tools"):
        if data[key]:
            lines.append(f"  {key.replace('_', '-')}: {data[key]}")
    if skill.metadata:
        lines.append("  metadata: " + ", ".join(f"{k}={v}" for k, v in skill.metadata.items()))
    if data["files"]:
        lines.append("  files: " + ", ".join(data["files"]))
    write(sys.stdout, "\n".join(lines) + "\n\n" + data["body"] + "\n")


@app.command("validate")
def validate(
    paths: Annotated[
        list[Path], typer.Argument(help="Skill folders, or folders of skill folders.")
    ],
    as_json: JsonOption = False,
) -> None:
    """Check skill folders against the SKILL.md format; exit code 1 when one is invalid."""
    from koboi_skills.discovery import candidates
    from koboi_skills.spec import check_folder

    results: list[dict[str, Any]] = []
    for path in paths:
        if not path.exists():
            raise CliError(f"{path} does not exist")
        for folder in candidates(path) or [path]:
            results.append({"path": str(folder), "problems": check_folder(folder)})
    bad = [r for r in results if r["problems"]]
    if as_json:
        print_json({"valid": not bad, "skills": results})
    else:
        style = Style(sys.stdout)
        for result in results:
            if result["problems"]:
                write(sys.stdout, f"{style.red('invalid')}  {result['path']}\n")
                for problem in result["problems"]:
                    write(sys.stdout, f"  - {problem}\n")
            else:
                write(sys.stdout, f"{style.green('valid')}    {result['path']}\n")
    if bad:
        raise typer.Exit(1)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
