"""``koboi chat`` in line mode, as a real process: piped stdin and stdout, signals, a kill."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from chat_process import KOBOI, Chat


def test_a_conversation_through_pipes(chat_config: Path) -> None:
    """stdout is a pipe: line mode without being asked; approvals read from stdin."""
    chat = Chat(chat_config)
    for line in ("what is 6 * 7", "write a.txt: hi there", "y", "/status", "/journal"):
        chat.send(line)
    chat.send("/quit")
    assert chat.finish() == 0
    out = chat.output
    assert out.startswith("koboi chat - scripted:demo - mode act (/help for commands)\n")
    assert '→ calculator {"expression":"6 * 7"}\n← 42\n6 * 7 = 42\n' in out
    assert "approval needed: write_file (risk: moderate)" in out
    assert '  arguments: {"content":"hi there","path":"a.txt"}\n' in out
    assert "    +++ b/a.txt\n" in out and "    +hi there\n" in out
    assert "← wrote 8 bytes to a.txt (new file)" in out
    assert "\x1b[" not in out  # no escape codes in line mode
    assert (chat_config.parent / "work" / "a.txt").read_text() == "hi there"
    assert "model scripted:demo - mode act - session " in out
    assert "approval_decided" in out and '"decided_by":"chat"' in out


def test_sigint_cancels_the_run_and_the_chat_goes_on(chat_config: Path) -> None:
    chat = Chat(chat_config, "--no-tui")
    chat.send("write c.txt: never")
    chat.wait_for("approve? [y]es / [n]o / [a]lways: ")
    chat.process.send_signal(signal.SIGINT)
    chat.wait_for("(cancelled; the session is kept)")
    chat.send("what is 1 + 1")
    chat.wait_for("1 + 1 = 2")
    chat.send("/journal")
    chat.wait_for('"outcome":"completed"')
    assert chat.finish() == 0
    assert not (chat_config.parent / "work" / "c.txt").exists()
    assert '"outcome":"cancelled"' in chat.output
    # The cancelled run and the next one are one session.
    assert chat.output.count("run_started") == 2


def test_a_killed_chat_is_resumed_with_its_pending_approval(chat_config: Path) -> None:
    killed = Chat(chat_config, "--no-tui")
    killed.send("write d.txt: after the crash")
    killed.wait_for("approve? [y]es / [n]o / [a]lways: ")
    killed.kill()

    chat = Chat(chat_config, "--no-tui", "--session", "last")
    chat.wait_for("its last run was interrupted: finishing it")
    chat.wait_for("approve? [y]es / [n]o / [a]lways: ")
    chat.send("y")
    chat.wait_for("← wrote 15 bytes to d.txt (new file)")
    chat.send("/journal")
    chat.wait_for("run_finished")
    assert chat.finish() == 0
    assert (chat_config.parent / "work" / "d.txt").read_text() == "after the crash"
    # The same approval, asked again after the crash: one request, one decision.
    assert chat.output.count("approval_requested") == 1
    assert chat.output.count("approval_decided") == 1
    assert "run_resumed" in chat.output


def test_a_config_that_does_not_load_is_one_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("agent: {mode: sometimes}\nllm: {provider: scripted}\n")
    done = subprocess.run(
        [KOBOI, "chat", str(bad), "--no-tui"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "agent.mode" in done.stderr
    assert "Traceback" not in done.stderr


def test_mistakes_in_commands_are_one_line_each(chat_config: Path) -> None:
    chat = Chat(chat_config, "--no-tui")
    for command in ("/resume nope", "/mode sometimes", "/capture", "/frobnicate"):
        chat.send(command)
    chat.send("/quit")
    assert chat.finish() == 0
    assert chat.output.splitlines()[1:] == [
        "> error: no session id starts with 'nope'",
        "> error: unknown mode 'sometimes'; choose one of chat, plan, act, auto, yolo",
        "> usage: /capture FILE",
        "> unknown command '/frobnicate' (/help lists them)",
        "> ",
    ], chat.output
    assert chat.errors == ""
