from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import pluggy
import pytest

from koboi import hookspecs
from koboi.messages import Message, ModelRequest
from koboi_scripted import ScriptedOptions, ScriptedProvider


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "scripted"]
    assert ep.value == "koboi_scripted.plugin"


def registrations() -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    from koboi_scripted import plugin

    pm = pluggy.PluginManager("koboi")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def register(*args: Any, **kwargs: Any) -> None:
        calls.append((args, kwargs))

    pm.hook.koboi_register_providers(register=register)
    return calls


@pytest.mark.anyio
async def test_registers_the_scripted_provider_factory() -> None:
    ((args, kwargs),) = registrations()
    name, factory = args
    assert name == "scripted"
    assert kwargs["options"] is ScriptedOptions
    assert kwargs["description"]
    make: Callable[[ScriptedOptions], ScriptedProvider] = factory
    options = ScriptedOptions.model_validate(
        {
            "model": "demo",
            "rules": [
                {
                    "match": r"(?P<expr>\d[\d\s+*/().-]*\d)",
                    "tool": "calculator",
                    "arguments": {"expression": "{expr}"},
                    "reply": "{expr} = {result}",
                }
            ],
        }
    )
    provider = make(options)
    assert isinstance(provider, ScriptedProvider)
    assert (provider.name, provider.model) == ("scripted", "demo")
    response = await provider.complete(ModelRequest(messages=[Message.user("What is 2 + 2?")]))
    assert response.message.tool_calls[0].arguments == {"expression": "2 + 2"}


def test_loading_the_plugin_does_not_import_the_provider() -> None:
    code = "import sys, koboi_scripted.plugin; print('koboi_scripted.provider' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_readme_examples_are_valid_options() -> None:
    import re
    from pathlib import Path

    import yaml

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        llm = dict(yaml.safe_load(block)["llm"])
        assert llm.pop("provider") == "scripted"
        ScriptedOptions.model_validate(llm)


@pytest.mark.anyio
async def test_readme_rules_answer_the_quickstart_question() -> None:
    import re
    from pathlib import Path

    import yaml

    from koboi.messages import ToolCall

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    llm = dict(yaml.safe_load(re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)[0])["llm"])
    llm.pop("provider")
    provider = ScriptedProvider(ScriptedOptions.model_validate(llm))
    user = Message.user("What is 2 + 2?")
    first = await provider.complete(ModelRequest(messages=[user]))
    assert first.message.tool_calls == (
        ToolCall(id="call_0_0", name="calculator", arguments={"expression": "2 + 2"}),
    )
    call = first.message.tool_calls[0]
    second = await provider.complete(
        ModelRequest(messages=[user, first.message, Message.tool_result(call, "4")])
    )
    assert second.message.content == "2 + 2 = 4"
    hello = await provider.complete(ModelRequest(messages=[Message.user("Hello there")]))
    assert hello.message.content == "Hello! Ask me some arithmetic."
