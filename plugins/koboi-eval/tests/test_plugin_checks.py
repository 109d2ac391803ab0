"""Checks other plugins provide: koboi-eval's hook ``koboi_eval_register_checks``, on the
one plugin system. Plugin objects are added to a host of the test's own
(``PluginHost(load_entry_points=False)``), made the default with ``use_host``, and
used by eval cases end to end."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import koboi_eval.plugin
import koboi_scripted.plugin
import koboi_tools_basic.plugin
from koboi import hookimpl
from koboi.plugins import PluginHost, registered_hooks, use_host
from koboi_cli.app import app
from koboi_eval import (
    Check,
    CheckResult,
    RunOptions,
    Trace,
    completed,
    output_contains,
    plugin_check,
    retrieved_chunk,
    run_case,
)
from koboi_eval import hookspecs as eval_hooks
from koboi_eval.errors import EvalDefinitionError
from koboi_eval.hookspecs import REGISTER_CHECKS
from koboi_eval.loader import load, load_file
from koboi_eval.plugin_checks import installed_checks

DOC = Path(__file__).resolve().parents[3] / "docs" / "eval.md"


class AnswerIs(Check):
    def __init__(self, text: str) -> None:
        self.text = text

    @property
    def label(self) -> str:
        return f"answer_is({self.text!r})"

    def check(self, trace: Trace) -> CheckResult:
        if trace.output == self.text:
            return self.passed()
        return self.failed(f"the answer {self.text!r}", f"the answer {trace.output!r}")


class AnswerChecks:
    """A check provider: a plugin object implementing koboi-eval's hook."""

    @hookimpl
    def koboi_eval_register_checks(self, register: Any) -> None:
        register("answer_is", AnswerIs, description="the final answer is exactly TEXT")


class SameName:
    @hookimpl
    def koboi_eval_register_checks(self, register: Any) -> None:
        register("answer_is", AnswerIs)


class Broken:
    @hookimpl
    def koboi_eval_register_checks(self, register: Any) -> None:
        raise RuntimeError("the provider is broken")


def make_host(
    *plugins: tuple[str, object], eval_plugin: bool = True, strict: bool = False
) -> PluginHost:
    """The calculator agent's plugins, koboi-eval's (unless ``eval_plugin=False``), then
    ``plugins`` as ``(id, plugin object)``."""
    host = PluginHost(load_entry_points=False, strict=strict)
    host.add_plugin(koboi_scripted.plugin, "scripted")
    host.add_plugin(koboi_tools_basic.plugin, "tools-basic")
    if eval_plugin:
        host.add_plugin(koboi_eval.plugin, "eval")
    for name, plugin in plugins:
        host.add_plugin(plugin, name)
    host.load()
    return host


def run(made: Any) -> Any:
    return anyio.run(run_case, made, RunOptions(mock=True))


ANSWERS = """
from koboi_eval import case, plugin_check

case("right", config=CALCULATOR, input="What is 2 + 2?",
     expect=[plugin_check("answer_is", "2 + 2 = 4")])
case("wrong", config=CALCULATOR, input="What is 2 + 2?", expect=[plugin_check("answer_is", "5")])
"""


def test_koboi_eval_publishes_its_hook() -> None:
    host = make_host()
    assert host.hook_owner(REGISTER_CHECKS) == "eval"
    eval_info = host.get("eval")
    assert eval_info is not None and eval_info.defines == [REGISTER_CHECKS]
    assert registered_hooks(host)[REGISTER_CHECKS] == "eval"
    assert len(installed_checks(host)) == 0


def test_a_plugin_check_is_used_by_an_eval_file_end_to_end(write_eval: Any) -> None:
    host = make_host(("answers", AnswerChecks()))
    path = write_eval("answers.eval.py", ANSWERS)
    with use_host(host):
        right, wrong = load_file(path)
        passed, failed = run(right), run(wrong)
    assert passed.status == "passed", passed
    assert failed.status == "failed"
    [check] = failed.checks
    assert check.label == "answer_is('5')"
    assert (check.expected, check.actual) == ("the answer '5'", "the answer '2 + 2 = 4'")
    entry = installed_checks(host).get("answer_is")
    assert entry is not None and entry.plugin == "answers"
    assert entry.description == "the final answer is exactly TEXT"
    answers = host.get("answers")
    assert answers is not None and answers.hooks == [REGISTER_CHECKS] and answers.waiting == []


def test_the_cli_runs_plugin_checks_and_lists_their_provider(write_eval: Any) -> None:
    host = make_host(("answers", AnswerChecks()), ("broken", Broken()))
    path = write_eval("answers.eval.py", ANSWERS)
    runner = CliRunner()
    with use_host(host):
        ran = runner.invoke(app, ["eval-test", "--mock", str(path)])
        inspected = runner.invoke(app, ["plugins", "inspect", "answers", "--json"])
    assert ran.exit_code == 1, ran.output  # the case "wrong" fails, saying why
    assert "2 case(s): 1 passed, 1 failed" in ran.output
    assert "FAIL answer_is('5')" in ran.output
    assert "expected: the answer '5'" in ran.output
    answers = json.loads(inspected.output)
    assert answers["status"] == "loaded" and REGISTER_CHECKS in answers["implements"]
    assert answers["waiting"] == []


def test_koboi_plugins_list_check_finds_a_broken_provider_before_any_eval() -> None:
    host = make_host(("answers", AnswerChecks()), ("broken", Broken()))
    with use_host(host):
        listed = CliRunner().invoke(app, ["plugins", "list", "--check", "--json"])
    assert listed.exit_code == 0, listed.output
    status = {p["id"]: (p["status"], p["reason"]) for p in json.loads(listed.output)}
    assert status["answers"] == ("loaded", "")
    assert status["broken"] == (
        "failed",
        "koboi_eval_register_checks failed: RuntimeError: the provider is broken",
    )
    eval_info = next(p for p in json.loads(listed.output) if p["id"] == "eval")
    assert eval_info["defines"] == [REGISTER_CHECKS]


def test_a_check_name_two_plugins_register_fails_naming_both() -> None:
    host = make_host(("answers", AnswerChecks()), ("copycat", SameName()))
    entry = installed_checks(host).get("answer_is")
    assert entry is not None and entry.plugin == "answers"
    copycat = host.get("copycat")
    assert copycat is not None and copycat.status == "failed"
    assert "eval check 'answer_is' is registered by two plugins: 'answers' and 'copycat'" in (
        copycat.reason
    )
    strict = make_host(("answers", AnswerChecks()), ("copycat", SameName()), strict=True)
    with pytest.raises(EvalDefinitionError, match="two plugins: 'answers' and 'copycat'"):
        installed_checks(strict)


def test_a_failing_provider_is_isolated_with_its_reason() -> None:
    host = make_host(("answers", AnswerChecks()), ("broken", Broken()))
    assert installed_checks(host).names() == ["answer_is"]
    broken = host.get("broken")
    assert broken is not None and broken.status == "failed"
    assert (
        broken.reason == "koboi_eval_register_checks failed: RuntimeError: the provider is broken"
    )
    with use_host(host), pytest.raises(EvalDefinitionError) as caught:
        plugin_check("answer_iz", "4")
    message = str(caught.value)
    assert "no installed plugin provides the eval check 'answer_iz'" in message
    assert "installed eval checks: answer_is (plugin 'answers')" in message
    assert "did you mean 'answer_is'?" in message
    assert "plugin 'broken' would provide checks but is failed: koboi_eval_register_checks" in (
        message
    )


def test_a_failing_provider_is_an_error_in_strict_mode(write_eval: Any) -> None:
    host = make_host(("answers", AnswerChecks()), ("broken", Broken()), strict=True)
    path = write_eval("strict.eval.py", ANSWERS)
    with use_host(host):
        cases, failures = load([path])
    assert cases == []
    [failure] = failures
    assert re.match(
        rf"{re.escape(failure.shown_file)}:\d+: answer_is\(\): checks from plugins are unavailable",
        failure.message,
    )
    assert "plugin 'broken'" in failure.message
    assert "RuntimeError: the provider is broken" in failure.message


def test_without_koboi_eval_the_hook_waits_and_nothing_breaks(calc_case: Any) -> None:
    host = make_host(("answers", AnswerChecks()), eval_plugin=False, strict=True)
    answers = host.get("answers")
    assert answers is not None and answers.status == "loaded"
    assert answers.waiting == [REGISTER_CHECKS]
    assert host.hook_owner(REGISTER_CHECKS) is None
    host.catalog()  # every kernel hook is still collected
    with use_host(host):
        result = run(calc_case(completed(), output_contains("4")))
        with pytest.raises(
            EvalDefinitionError,
            match=r"^answer_is\(\): checks from plugins need koboi-eval's plugin .* this plugin host",
        ):
            plugin_check("answer_is", "4")
    assert result.status == "passed", result
    # Once koboi-eval joins, the waiting hook has its owner and is called.
    host.add_plugin(koboi_eval.plugin, "eval")
    assert answers.waiting == []
    entry = installed_checks(host).get("answer_is")
    assert entry is not None and entry.plugin == "answers"


def test_an_implementation_asking_for_more_than_the_hook_offers_is_incompatible() -> None:
    class Wrong:
        @hookimpl
        def koboi_eval_register_checks(self, register: Any, config: Any) -> None:
            raise AssertionError("never called")

    host = make_host(("answers", AnswerChecks()), ("wrong", Wrong()))
    wrong = host.get("wrong")
    assert wrong is not None and wrong.status == "incompatible"
    assert "config" in wrong.reason
    assert installed_checks(host).names() == ["answer_is"]


def test_factories_that_do_not_make_checks_are_refused_naming_the_plugin() -> None:
    class Odd:
        @hookimpl
        def koboi_eval_register_checks(self, register: Any) -> None:
            register("not_callable", 42)
            register("not_a_check", lambda: "a string")

    with use_host(make_host(("odd", Odd()))):
        with pytest.raises(EvalDefinitionError, match="'not_callable' of plugin 'odd' is 42"):
            plugin_check("not_callable")
        with pytest.raises(
            EvalDefinitionError, match=r"'not_a_check' \(plugin 'odd'\) returned 'a string'"
        ):
            plugin_check("not_a_check")
        with pytest.raises(EvalDefinitionError, match="give the name of the check"):
            plugin_check("")


def test_retrieved_chunk_is_what_a_retrieval_plugin_provides() -> None:
    class Retrieval:
        @hookimpl
        def koboi_eval_register_checks(self, register: Any) -> None:
            register("retrieved_chunk", AnswerIs)

    with use_host(make_host(("rag", Retrieval()))):
        made = retrieved_chunk("refund policy")
    assert isinstance(made, AnswerIs) and made.text == "refund policy"
    with use_host(make_host()), pytest.raises(EvalDefinitionError) as caught:
        retrieved_chunk("refund policy")
    assert "installed eval checks: none" in str(caught.value)
    assert "no retrieval (RAG) plugin" in str(caught.value)


def test_the_hook_is_documented() -> None:
    spec = eval_hooks.koboi_eval_register_checks
    assert list(inspect.signature(spec).parameters) == ["register"]
    doc = inspect.getdoc(spec) or ""
    for promise in (":param register:", "factory(*args, **kwargs)", "description", "Sync only"):
        assert promise in doc
    page = DOC.read_text(encoding="utf-8")
    assert "koboi_eval_register_checks(register)" in page
    assert 'register(name, factory, *, description="")' in page
    assert "koboi_eval.checks" not in page.replace("koboi_eval.checks import", "")


# -- the documented example ---------------------------------------------------------------


def documented_files() -> dict[str, str]:
    """The code blocks of docs/eval.md that open with ``# <file>``, by file."""
    blocks = re.findall(r"```(?:python|toml)\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return {b.split()[1]: b for b in blocks if b.startswith("# ")}


@pytest.fixture
def notes_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The docs' koboi-notes plugin, written out as a package and imported."""
    files = documented_files()
    package = tmp_path / "koboi_notes"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    for module in ("tools", "checks", "plugin"):
        (package / f"{module}.py").write_text(files[f"koboi_notes/{module}.py"], encoding="utf-8")
    assert 'notes = "koboi_notes.plugin"' in files["pyproject.toml"]
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module("koboi_notes.plugin")
    finally:
        for name in [m for m in sys.modules if m == "koboi_notes" or m.startswith("koboi_notes.")]:
            del sys.modules[name]


def test_the_documented_check_plugin_works(tmp_path: Path, notes_plugin: Any) -> None:
    eval_file = tmp_path / "evals" / "notes.eval.py"
    eval_file.parent.mkdir()
    eval_file.write_text(documented_files()["evals/notes.eval.py"], encoding="utf-8")
    host = make_host(("notes", notes_plugin), strict=True)
    with use_host(host):
        [made] = load_file(eval_file)
        result = run(made)
        missed = run(replace(made, checks=(plugin_check("saved_note", "midnight"),)))
        with pytest.raises(EvalDefinitionError, match="give the text the note must contain"):
            plugin_check("saved_note", "")
    assert result.status == "passed", result
    assert [c.label for c in result.checks] == ['saved_note("noon")', "completed()"]
    [check] = missed.checks
    assert check.expected == "a note containing 'midnight'"
    assert check.actual == "notes saved: ['meeting at noon']"
    entry = installed_checks(host).get("saved_note")
    assert entry is not None and entry.plugin == "notes"
