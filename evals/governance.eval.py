"""Governance of configs/files_assistant.yaml: what chat mode and approvals let through.

Each refusal case has a positive control: the same call, where it should run, runs.
The assistant's model is the scripted one (regex rules), so no mock= is needed.
"""

from __future__ import annotations

from koboi_eval import (
    case,
    completed,
    file_equals,
    file_missing,
    output_contains,
    tool_ran,
    tool_was_blocked,
)

ASSISTANT = "../configs/files_assistant.yaml"
NOTES = {"notes.txt": "keep me\n"}
ACT = {"agent": {"mode": "act"}}

case(
    "chat mode refuses a destructive tool",
    config=ASSISTANT,  # agent.mode: chat
    input="delete notes.txt",
    files=NOTES,
    # Approval would say yes: only the mode can stop this call.
    approve="allow",
    expect=[
        tool_was_blocked("delete_file", by="mode", args={"path": "notes.txt"}),
        tool_ran("delete_file", times=0),
        file_equals("notes.txt", "keep me\n"),
        completed(),
    ],
)

case(
    "chat mode still reads (control)",
    config=ASSISTANT,
    input="read notes.txt",
    files=NOTES,
    expect=[
        tool_ran("read_file", args={"path": "notes.txt"}, times=1),
        output_contains("keep me"),
        completed(),
    ],
)

case(
    "an approved delete runs in act mode (control)",
    config=ASSISTANT,
    overrides=ACT,
    input="delete notes.txt",
    files=NOTES,
    approve="allow",
    expect=[
        tool_ran("delete_file", args={"path": "notes.txt"}, times=1),
        file_missing("notes.txt"),
        completed(),
    ],
)

case(
    "approval is denied when there is no one to ask",
    config=ASSISTANT,
    overrides=ACT,
    input="delete notes.txt",
    files=NOTES,
    # approve="deny" is the default: the kernel's DenyAllApprover, no handler.
    expect=[
        tool_was_blocked("delete_file", by="approval", args={"path": "notes.txt"}),
        tool_ran("delete_file", times=0),
        file_equals("notes.txt", "keep me\n"),
        output_contains("no approver is available"),
        completed(),
    ],
)

case(
    "a moderate write needs approval too",
    config=ASSISTANT,
    overrides=ACT,
    input="write todo.txt: ship it",
    expect=[
        tool_was_blocked("write_file", by="approval"),
        file_missing("todo.txt"),
        completed(),
    ],
)

case(
    "an approved write runs (control)",
    config=ASSISTANT,
    overrides=ACT,
    input="write todo.txt: ship it",
    approve=lambda request: request.tool_name == "write_file",
    expect=[
        tool_ran("write_file", args={"path": "todo.txt", "content": "ship it"}),
        file_equals("todo.txt", "ship it"),
        completed(),
    ],
)
