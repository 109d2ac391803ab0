"""The quickstart config (configs/quickstart.yaml): arithmetic through the real calculator.

Its model is already the scripted one, so these cases need no mock= to run under --mock.
"""

from __future__ import annotations

from koboi_eval import (
    called_tool,
    case,
    completed,
    cost_below,
    judge,
    max_steps,
    not_called_tool,
    output_contains,
    output_matches,
    tool_ran,
)

QUICKSTART = "../configs/quickstart.yaml"
# The quickstart declares no prices; charging for its (deterministic) tokens makes
# cost_below() check something real, offline.
PRICED = {"llm": {"pricing": {"input": 2.5, "output": 10.0}}}

case(
    "adds two numbers with the calculator",
    config=QUICKSTART,
    overrides=PRICED,
    input="What is 2 + 2?",
    expect=[
        called_tool("calculator", args={"expression": "2 + 2"}, times=1),
        tool_ran("calculator", args={"expression": "2 + 2"}),
        completed(),
        output_matches(r"^2 \+ 2 = 4$"),
        max_steps(2),
        # 46 tokens: 36 in at $2.50/M and 10 out at $10/M = $0.00019.
        cost_below(0.0002),
        judge("The answer says that 2 + 2 equals 4."),
    ],
)

case(
    "keeps operator precedence",
    config=QUICKSTART,
    input="What is 2 + 3 * 4?",
    expect=[
        called_tool("calculator", args={"expression": "2 + 3 * 4"}),
        output_contains("= 14"),
        completed(),
    ],
)

case(
    "a question without arithmetic gets the fallback, not a tool call",
    config=QUICKSTART,
    input="Hello there!",
    expect=[
        not_called_tool("calculator"),
        output_contains("Ask me an arithmetic question"),
        completed(),
        max_steps(1),
    ],
)

case(
    "a conversation keeps one session",
    config=QUICKSTART,
    conversation=["What is 6 * 7?", "And 10 / 4?"],
    expect=[
        called_tool("calculator", args={"expression": "6 * 7"}),
        called_tool("calculator", args={"expression": "10 / 4"}),
        output_contains("2.5"),
        max_steps(4),
    ],
)
