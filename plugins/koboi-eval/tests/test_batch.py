"""Batch evaluation: datasets, scorers, results, and the regression gate."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from koboi_eval import baseline as gate
from koboi_eval.batch import BatchOptions, BatchResults, load_dataset, run_batch
from koboi_eval.errors import BaselineError, DatasetError
from koboi_eval.scorers import percentile

ROWS = [
    {
        "id": "add",
        "input": "What is 2 + 2?",
        "expected_output": "2 + 2 = 4",
        "expected_tool_calls": ["calculator(expression='2 + 2')"],
    },
    {
        "id": "mul",
        "input": "What is 6 * 7?",
        "expected_contains": ["42", "6 * 7"],
        "expected_tool_calls": [
            {"name": "calculator", "arguments": {"expression": {"$one_of": ["6*7", "6 * 7"]}}}
        ],
    },
    {"id": "hello", "input": "hello", "expected_regex": "^Ask me", "expected_tool_calls": []},
    {"id": "wrong", "input": "What is 1 + 1?", "expected_output": "3", "metadata": {"k": 1}},
]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def config(tmp_path: Path, calculator_config: dict[str, Any]) -> Path:
    path = tmp_path / "calc.yaml"
    calculator_config["llm"]["pricing"] = {"input": 1.0, "output": 2.0}
    path.write_text(yaml.safe_dump(calculator_config), encoding="utf-8")
    return path


def batch(config: Path, dataset: Path, **options: Any) -> BatchResults:
    return anyio.run(run_batch, config, dataset, load_dataset(dataset), BatchOptions(**options))


def test_every_scorer_scores_what_its_rows_expect(tmp_path: Path, config: Path) -> None:
    results = batch(config, write_jsonl(tmp_path / "d.jsonl", ROWS))
    by_id = {r.id: r for r in results.rows}
    assert by_id["add"].scores == {"exact_match": 1.0, "tool_call_accuracy": 1.0}
    assert by_id["mul"].scores == {"contains": 1.0, "tool_call_accuracy": 1.0}
    assert by_id["hello"].scores == {"regex": 1.0, "tool_call_accuracy": 1.0}
    assert by_id["wrong"].scores == {"exact_match": 0.0}
    assert by_id["wrong"].details == {"exact_match": 'expected "3", got "1 + 1 = 2"'}
    assert by_id["wrong"].metadata == {"k": 1}
    metrics = results.metrics()
    assert metrics["completed"] == 1.0
    assert metrics["exact_match"] == 0.5
    assert metrics["contains"] == metrics["regex"] == metrics["tool_call_accuracy"] == 1.0
    assert metrics["cost_total_usd"] > 0
    assert metrics["cost_mean_usd"] == pytest.approx(metrics["cost_total_usd"] / 4)
    assert 0 < metrics["latency_p50_s"] <= metrics["latency_p95_s"]
    data = json.loads(results.to_json())
    assert [r["id"] for r in data["rows"]] == ["add", "mul", "hello", "wrong"]
    assert data["rows_by_status"] == {"ran": 4, "skipped": 0, "error": 0}


def test_tool_call_accuracy_explains_and_can_compare_strings_loosely(
    tmp_path: Path, config: Path
) -> None:
    rows = [
        {
            "id": "spaced",
            "input": "What is 1 + 1?",
            "expected_tool_calls": ["calculator(expression='1+1')"],
        }
    ]
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    exact = batch(config, dataset).rows[0]
    assert exact.scores == {"tool_call_accuracy": 0.0}
    assert exact.details["tool_call_accuracy"].startswith(
        'expected calculator {"expression": "1+1"}; the closest call, calculator '
        '{"expression": "1 + 1"} (step 1), differs: expression: expected "1+1", got "1 + 1"'
    )
    assert batch(config, dataset, string_match="loose").rows[0].scores == {
        "tool_call_accuracy": 1.0
    }


def test_mock_rows_run_offline_and_rows_without_one_are_skipped(tmp_path: Path) -> None:
    live = tmp_path / "live.yaml"
    live.write_text(
        yaml.safe_dump({"llm": {"provider": "openai", "model": "gpt-4o-mini"}}), encoding="utf-8"
    )
    rows = [
        {"id": "m", "input": "hi", "mock": ["hello there"], "expected_output": "hello there"},
        {"id": "n", "input": "hi", "expected_output": "x"},
    ]
    results = batch(live, write_jsonl(tmp_path / "d.jsonl", rows), mock=True)
    assert [(r.id, r.status) for r in results.rows] == [("m", "ran"), ("n", "skipped")]
    assert results.metrics()["exact_match"] == 1.0  # the skipped row does not count
    assert results.rows[1].reason.startswith("no scripted model for --mock")


def test_a_row_that_cannot_run_scores_zero_and_says_why(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        yaml.safe_dump({"llm": {"provider": "scripted"}, "tools": {"builtin": ["nope"]}}),
        encoding="utf-8",
    )
    rows = [{"id": "r", "input": "hi", "expected_output": "x"}]
    row = batch(broken, write_jsonl(tmp_path / "d.jsonl", rows)).rows[0]
    assert (row.status, row.scores) == ("error", {"exact_match": 0.0})
    assert "unknown tool 'nope'" in row.reason


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], "line 1: not JSON"),
        (
            ['{"input": "x", "expected_outptu": "y"}'],
            re.escape("expected_outptu: unknown key (did you mean 'expected_output'?)"),
        ),
        (['{"input": "x", "conversation": ["y"]}'], "not both"),
        (
            ['{"id": "a", "input": "x"}', '{"id": "a", "input": "y"}'],
            "line 2: id 'a' is also the id of line 1",
        ),
        (['{"input": "x", "expected_regex": "("}'], "expected_regex: invalid regular expression"),
        (
            ['{"input": "x", "expected_tool_calls": ["f(1)"]}'],
            r"expected_tool_calls\[0\]: f\(...\): give arguments by name",
        ),
        (['{"input": "x", "mock": {"scipt": []}}'], "mock: unknown key 'scipt'"),
        (["[1, 2]"], "a row is a JSON object, not list"),
        ([""], "holds no rows"),
    ],
)
def test_a_malformed_dataset_names_the_line_and_the_fix(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        load_dataset(path)


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"input": "ok"}\n{bad\n{"inputt": "x"}\n', encoding="utf-8")
    with pytest.raises(DatasetError) as caught:
        load_dataset(path)
    assert str(caught.value).startswith(f"2 problems in {path}:\n  - line 2: not JSON")
    assert "  - line 3: " in str(caught.value)


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(n) for n in range(1, 101)], 0.95) == 95.0
    assert percentile([1.0, 2.0], 0.95) == 2.0


# -- the regression gate -------------------------------------------------------------------


def test_the_gate_passes_an_equal_run_and_fails_a_drop(tmp_path: Path, config: Path) -> None:
    dataset = write_jsonl(tmp_path / "d.jsonl", ROWS)
    stored = tmp_path / "baseline.json"
    gate.write(stored, batch(config, dataset))
    same = gate.compare(gate.read(stored), batch(config, dataset))
    assert not same.regressed, same.render()
    assert "result: no regression" in same.render()

    worse_rows = [dict(ROWS[0], expected_output="2 + 2 = 5"), *ROWS[1:]]
    worse = batch(config, write_jsonl(tmp_path / "d.jsonl", worse_rows))
    comparison = gate.compare(gate.read(stored), worse)
    assert comparison.regressed
    text = comparison.render(stored)
    assert "exact_match         0.5 -> 0  REGRESSED: dropped by 0.5 (tolerance 0)" in text
    assert "    add: exact_match 1 -> 0" in text
    assert "the baseline was recorded on a different dataset" in text
    # Within the tolerance, the same drop passes.
    assert not gate.compare(gate.read(stored), worse, tolerance=0.5).regressed


def test_the_gate_fails_when_cost_rises(tmp_path: Path, config: Path) -> None:
    dataset = write_jsonl(tmp_path / "d.jsonl", ROWS)
    stored = tmp_path / "baseline.json"
    gate.write(stored, batch(config, dataset))
    pricier = tmp_path / "pricier.yaml"
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["llm"]["pricing"] = {"input": 2.0, "output": 4.0}
    pricier.write_text(yaml.safe_dump(data), encoding="utf-8")
    comparison = gate.compare(gate.read(stored), batch(pricier, dataset))
    assert comparison.regressed
    assert [c.metric for c in comparison.changes if c.regressed] == ["cost_mean_usd"]
    assert not gate.compare(
        gate.read(stored), batch(pricier, dataset), cost_tolerance=1.5
    ).regressed


def test_a_scorer_that_disappears_is_a_regression(tmp_path: Path, config: Path) -> None:
    stored = tmp_path / "baseline.json"
    gate.write(stored, batch(config, write_jsonl(tmp_path / "d.jsonl", ROWS)))
    fewer = batch(config, write_jsonl(tmp_path / "d.jsonl", ROWS[:1]))
    # The one row left costs more than the mean did: not what this test is about.
    comparison = gate.compare(gate.read(stored), fewer, cost_tolerance=10)
    regressed = {c.metric: c.why for c in comparison.changes if c.regressed}
    assert regressed == {
        "contains": "no longer measured (no row is scored by it)",
        "regex": "no longer measured (no row is scored by it)",
    }


def test_unreadable_baselines_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="no such baseline; create it with"):
        gate.read(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(BaselineError, match="invalid JSON"):
        gate.read(bad)
    bad.write_text('{"metrics": {}}', encoding="utf-8")
    with pytest.raises(BaselineError, match="not a koboi eval baseline"):
        gate.read(bad)
    bad.write_text('{"kind": "koboi-eval-baseline", "format": 99, "metrics": {}}', encoding="utf-8")
    with pytest.raises(BaselineError, match="newer than this koboi-eval reads"):
        gate.read(bad)


@pytest.mark.slow  # a real process: runs in this member's own session
@pytest.mark.e2e
def test_the_command_saves_a_baseline_then_gates_on_it(
    koboi: Any, tmp_path: Path, config: Path
) -> None:
    dataset = write_jsonl(tmp_path / "d.jsonl", ROWS)
    stored = tmp_path / "baseline.json"
    saved = koboi("eval", str(config), str(dataset), "--baseline", str(stored), "--save-baseline")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert "exact_match                2  0.500" in saved.stdout
    assert '  wrong: exact_match: expected "3", got "1 + 1 = 2"' in saved.stdout
    assert json.loads(stored.read_text(encoding="utf-8"))["metrics"]["exact_match"] == 0.5

    write_jsonl(dataset, [dict(ROWS[0], expected_output="nope"), *ROWS[1:]])
    output = tmp_path / "results.json"
    gated = koboi("eval", str(config), str(dataset), "--baseline", str(stored), "-o", str(output))
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "REGRESSED" in gated.stdout and "result: REGRESSED" in gated.stdout
    assert "Traceback" not in gated.stdout + gated.stderr
    assert json.loads(output.read_text(encoding="utf-8"))["metrics"]["exact_match"] == 0.0

    as_json = koboi("eval", str(config), str(dataset), "--baseline", str(stored), "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["baseline"]["regressed"] is True

    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"input": "x", "expected": 1}\n', encoding="utf-8")
    refused = koboi("eval", str(config), str(broken))
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"error: {broken}: line 1: expected: unknown key")
    missing = koboi("eval", str(config), str(dataset), "--save-baseline")
    assert missing.returncode == 1
    assert "error: --save-baseline needs --baseline FILE" in missing.stderr
