"""``koboi graph CONFIG [--format mermaid|json]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from orchestration_kit import agent_def, config
from typer.testing import CliRunner

from koboi_cli.app import app


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def dag() -> dict[str, Any]:
    return config(
        [
            agent_def("intake", "x"),
            agent_def("left", "x", depends_on=["intake"]),
            agent_def("right", "x", depends_on=["intake"]),
            agent_def(
                "review",
                "x",
                depends_on=["left", "right"],
                conditionals=[{"to": "end", "when": {"contains": 'say "ok"'}}],
            ),
            agent_def("end", "x"),
        ],
        mode="conditional",
    )


def test_mermaid_draws_the_dag_with_its_conditional_edge(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["graph", str(write(tmp_path, dag()))])
    assert done.exit_code == 0, done.output
    assert done.output == (
        "graph TD\n"
        '    n0_intake["intake"]\n'
        '    n1_left["left"]\n'
        '    n2_right["right"]\n'
        '    n3_review["review"]\n'
        '    n4_end["end"]\n'
        "    n0_intake --> n1_left\n"
        "    n0_intake --> n2_right\n"
        "    n1_left --> n3_review\n"
        "    n2_right --> n3_review\n"
        '    n3_review -- "contains: say #quot;ok#quot;" --> n4_end\n'
    )


def test_json_is_the_whole_section(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["graph", str(write(tmp_path, dag())), "--format", "json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["execution_mode"] == "conditional"
    assert data["router"] is None and data["planned_at_run_time"] is False
    assert [n["id"] for n in data["nodes"]] == ["intake", "left", "right", "review", "end"]
    assert data["edges"][-1] == {
        "from": "review",
        "to": "end",
        "when": {"contains": 'say "ok"'},
    }
    assert data["agents"][3]["conditionals"][0]["to"] == "end"


def test_a_router_is_a_node_of_its_own(tmp_path: Path) -> None:
    data = config(
        [agent_def("a", "x", keywords=["x"]), agent_def("b", "y")],
        mode="parallel",
        orchestration={"router": {"type": "hybrid"}},
    )
    done = CliRunner().invoke(app, ["graph", str(write(tmp_path, data))])
    assert done.exit_code == 0, done.output
    assert (
        '    router{"hybrid router"}\n    router -.-> n0_a\n    router -.-> n1_b\n' in done.output
    )


def test_a_config_without_the_section_is_one_error_line(tmp_path: Path) -> None:
    path = write(tmp_path, {"llm": {"provider": "scripted"}})
    done = CliRunner().invoke(app, ["graph", str(path)])
    assert done.exit_code == 1
    assert done.output.strip() == f"error: {path} has no orchestration section: nothing to draw"
