"""Defining cases and loading eval files: every mistake is a clear error before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi_eval import (
    called_tool,
    case,
    completed,
    judge,
    kill_after,
    output_contains,
    retrieved_chunk,
    scripted,
)
from koboi_eval.errors import EvalDefinitionError
from koboi_eval.loader import discover, load, load_file, select

CONFIG = {"llm": {"provider": "scripted"}}


def make(**overrides: Any) -> Any:
    settings: dict[str, Any] = {"config": CONFIG, "input": "hi", "expect": [completed()]}
    settings.update(overrides)
    return case("a case", **settings)


def test_a_well_formed_case() -> None:
    made = make(
        mock=[{"name": "calculator", "arguments": {"expression": "1 + 1"}}, "2"],
        tags=["smoke"],
    )
    assert made.inputs == ("hi",)
    assert made.mock is not None
    assert made.mock.options["script"][0]["tool_calls"][0]["name"] == "calculator"
    assert made.mock.options["on_exhausted"] == "error"
    assert made.store == "memory" and not made.isolated
    assert made.id == "<code>::a case"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"input": None}, "give input= .* or conversation="),
        ({"conversation": ["a"]}, "not both"),
        ({"input": "  "}, "input must be a non-empty string"),
        ({"input": None, "conversation": "one string"}, "list of user messages"),
        ({"expect": []}, "at least one check"),
        ({"expect": ["4"]}, r"expect\[0\] is a str, not a check"),
        ({"expect": completed()}, "list of at least one check"),
        ({"config": "no/such/file.yaml"}, "config file not found"),
        ({"config": 42}, "config must be"),
        ({"mock": "reply"}, "mock must be"),
        ({"mock": [{"reply": None}]}, "mock: scripted model:"),
        ({"overrides": {"store": {"url": "sqlite:///x.db"}}}, "may not set the store"),
        ({"approve": "maybe"}, "approve must be"),
        ({"files": {"../escape.txt": "x"}}, "relative path without"),
        ({"files": {"/etc/passwd": "x"}}, "relative path without"),
        ({"crash": kill_after("tool_call_started"), "store": "memory"}, "needs store='sqlite'"),
        ({"timeout": 0}, "timeout must be"),
        ({"skip": ""}, "skip must be"),
    ],
)
def test_malformed_cases_say_what_to_fix(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(EvalDefinitionError, match=message):
        make(**overrides)


def test_a_crash_case_keeps_its_journal_in_sqlite_and_runs_alone() -> None:
    made = make(crash=kill_after("tool_call_started", name="x"))
    assert made.store == "sqlite" and made.isolated
    assert make(env={"A": "1"}).isolated


def test_kill_points() -> None:
    point = kill_after("tool_call_started", name="append_log", arguments={"line": "step-3"}, nth=2)
    assert point.label == (
        'kill_after("tool_call_started", nth=2, name="append_log", arguments={"line": "step-3"})'
    )
    data = {"name": "append_log", "arguments": {"line": "step-3"}, "call_id": "c"}
    assert point.matches("tool_call_started", data)
    assert not point.matches("tool_call_finished", data)
    assert not point.matches("tool_call_started", {**data, "arguments": {"line": "step-4"}})
    with pytest.raises(EvalDefinitionError, match="not a journal event type"):
        kill_after("tool_started")
    assert kill_after("notes.saved", text="x").event == "notes.saved"  # a plugin's own event
    with pytest.raises(EvalDefinitionError, match="nothing to resume"):
        kill_after("run_finished")
    with pytest.raises(EvalDefinitionError, match="nth must be"):
        kill_after("tool_call_started", nth=0)


def test_check_arguments_are_checked() -> None:
    with pytest.raises(EvalDefinitionError, match="non-empty string"):
        called_tool("")
    with pytest.raises(EvalDefinitionError, match="times must be"):
        called_tool("x", times=-1)
    with pytest.raises(EvalDefinitionError, match="give the rubric"):
        judge(" ")
    with pytest.raises(EvalDefinitionError, match="config file not found"):
        judge("good", config="missing-judge.yaml")
    with pytest.raises(EvalDefinitionError, match="give the text"):
        output_contains("")
    with pytest.raises(EvalDefinitionError, match="scripted model: pricing"):
        scripted(["x"], pricing={"input": -1})


def test_the_scripted_model_is_the_installed_provider_found_through_the_host() -> None:
    """koboi-eval asks the plugin host for the provider named ``scripted`` and validates the
    mock with the options model that provider registered; it imports nothing of it."""
    import koboi_scripted.plugin
    from koboi.plugins import PluginHost, use_host

    host = PluginHost(load_entry_points=False, strict=True)
    with use_host(host), pytest.raises(EvalDefinitionError) as caught:
        scripted(["hi"])
    assert str(caught.value) == (
        "scripted model: no installed plugin provides the 'scripted' provider "
        "(install koboi-scripted)"
    )
    # Control: with the provider's plugin in the host, the shorthands become its options.
    host.add_plugin(koboi_scripted.plugin, "scripted")
    with use_host(host):
        made = scripted(
            ["hi", {"name": "calculator", "arguments": {"expression": "1 + 1"}}], fallback="?"
        )
        with pytest.raises(EvalDefinitionError, match=r"scripted model: script\.0"):
            scripted([42])
    assert made.options["script"][0] == {"reply": "hi", "tool_calls": []}
    assert made.options["script"][1]["tool_calls"] == [
        {"name": "calculator", "arguments": {"expression": "1 + 1"}}
    ]
    assert (made.options["fallback"], made.options["on_exhausted"]) == ("?", "error")
    source = Path(__file__).parents[1] / "src" / "koboi_eval"
    assert not any("koboi_scripted" in p.read_text() for p in source.glob("*.py"))


def test_retrieved_chunk_is_an_error_until_a_plugin_provides_it() -> None:
    import koboi_eval.plugin
    from koboi.plugins import PluginHost, use_host

    # A host with koboi-eval and no retrieval plugin (koboi-rag may be installed here).
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_eval.plugin, "eval", dist="koboi-eval")
    with use_host(host), pytest.raises(EvalDefinitionError) as caught:
        retrieved_chunk("refund policy")
    message = str(caught.value)
    assert "koboi_eval_register_checks" in message
    assert "no retrieval (RAG) plugin" in message


# -- eval files -----------------------------------------------------------------------------


def test_a_file_registers_its_cases_in_order(write_eval: Any) -> None:
    path = write_eval(
        "ok.eval.py",
        """
        from koboi_eval import case, completed
        for n in (1, 2):
            case(f"case {n}", config=CALCULATOR, input=f"{n} + {n}", expect=[completed()],
                 tags=["math"] if n == 2 else [])
        """,
    )
    cases = load_file(path)
    assert [c.name for c in cases] == ["case 1", "case 2"]
    assert all(c.file == path.resolve() for c in cases)
    assert [c.name for c in select(cases, "MATH")] == ["case 2"]
    assert [c.name for c in select(cases, "case 1")] == ["case 1"]


def test_config_paths_are_relative_to_the_eval_file(tmp_path: Path, write_eval: Any) -> None:
    (tmp_path / "agent.yaml").write_text("llm: {provider: scripted}\n", encoding="utf-8")
    path = write_eval(
        "rel.eval.py",
        """
        from koboi_eval import case, completed
        case("c", config="agent.yaml", input="x", expect=[completed()])
        """,
    )
    assert load_file(path)[0].config == (tmp_path / "agent.yaml").resolve()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = (\n", r"bad\.eval\.py:\d+: syntax error"),
        ("import nonexistent_module_xyz\n", r"bad\.eval\.py:2: ModuleNotFoundError"),
        (
            "from koboi_eval import case, completed\n"
            "case('c', config=CALCULATOR, input='x', expect=[completed()])\n"
            "case('c', config=CALCULATOR, input='y', expect=[completed()])\n",
            r"bad\.eval\.py:4: case 'c': another case in this file has the same name",
        ),
        ("from koboi_eval import case\n", r"bad\.eval\.py: defines no cases"),
    ],
)
def test_a_broken_file_is_one_clear_error_with_its_line(
    write_eval: Any, source: str, message: str
) -> None:
    path = write_eval("bad.eval.py", source)
    with pytest.raises(EvalDefinitionError, match=message) as caught:
        load_file(path)
    assert "Traceback" not in str(caught.value)


def test_broken_files_do_not_stop_the_others(tmp_path: Path, write_eval: Any) -> None:
    write_eval("a_bad.eval.py", "raise RuntimeError('boom')\n")
    write_eval(
        "b_good.eval.py",
        "from koboi_eval import case, completed\n"
        "case('fine', config=CALCULATOR, input='x', expect=[completed()])\n",
    )
    (tmp_path / "not_an_eval.py").write_text("raise SystemExit\n", encoding="utf-8")
    hidden = tmp_path / ".hidden"
    hidden.mkdir()
    (hidden / "skip.eval.py").write_text("raise SystemExit\n", encoding="utf-8")
    cases, failures = load([tmp_path])
    assert [c.name for c in cases] == ["fine"]
    assert len(failures) == 1
    assert failures[0].message.endswith("a_bad.eval.py:2: RuntimeError: boom")


def test_paths_that_are_not_eval_files(tmp_path: Path) -> None:
    with pytest.raises(EvalDefinitionError, match="no such file or directory"):
        discover([tmp_path / "missing"])
    other = tmp_path / "x.py"
    other.write_text("", encoding="utf-8")
    with pytest.raises(EvalDefinitionError, match=r"named \*\.eval\.py"):
        discover([other])
    same = tmp_path / "s.eval.py"
    same.write_text("", encoding="utf-8")
    assert discover([same, tmp_path, same]) == [same]
