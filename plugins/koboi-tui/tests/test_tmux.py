"""``koboi chat`` in a real terminal: tmux runs it in an 80x24 pane; keys go in with
``send-keys`` and the screen comes out with ``capture-pane``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

KOBOI = str(Path(sys.executable).parent / "koboi")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    # A real process in a real terminal: its start alone took 15 s on a loaded 2-core machine.
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        shutil.which("tmux") is None, reason="tmux is not installed (apt-get install -y tmux)"
    ),
]


class Pane:
    """One tmux server of our own (its own socket), with ``koboi chat`` in its pane."""

    def __init__(self, workdir: Path) -> None:
        self.socket = f"koboi-tui-test-{os.getpid()}-{time.monotonic_ns()}"
        self.workdir = workdir

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "TERM": "xterm-256color", "KOBOI_STRICT_PLUGINS": "1"},
        )

    def start(self, command: str) -> None:
        started = self.tmux(
            "new-session", "-d", "-s", "chat", "-x", "80", "-y", "24", "-c", str(self.workdir),
            command,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "chat").stdout

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", "chat", *(["-l"] if literal else []), *keys)

    def type(self, text: str) -> None:
        self.keys(text, literal=True)
        self.keys("Enter")

    def wait_for(self, *texts: str, timeout: float = 60.0) -> str:
        """The screen once it shows every one of ``texts``."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if all(text in shown for text in texts):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"{texts!r} never all appeared; the screen:\n{shown}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.tmux("has-session", "-t", "chat").returncode == 0

    def kill(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    shown = Pane(tmp_path)
    try:
        yield shown
    finally:
        shown.kill()


def test_koboi_chat_in_an_80x24_terminal(pane: Pane, chat_config: Path) -> None:
    exit_file = chat_config.parent / "exit-code"
    pane.start(f"{KOBOI} chat {chat_config}; echo $? > {exit_file}")
    pane.wait_for("│ ready")

    pane.type("what is 2 + 3")
    shown = pane.wait_for("2 + 3 = 5", "│ ready")
    assert '→ calculator {"expression":"2 + 3"}' in shown and "← 5" in shown

    pane.type("write t.txt: from tmux")
    shown = pane.wait_for("Always (a)")
    assert "approval needed" in shown and "+from tmux" in shown  # the diff of the new file
    pane.keys("y")
    pane.wait_for("wrote 9 bytes to t.txt (new file)", "│ ready")  # the run has ended
    assert (chat_config.parent / "work" / "t.txt").read_text() == "from tmux"

    # Ctrl-C while an approval waits: the run is cancelled, the chat stays.
    pane.type("write u.txt: never")
    pane.wait_for("Always (a)")
    pane.keys("C-c")
    pane.wait_for("cancelled - the session is kept", "│ ready")
    assert pane.alive()
    pane.type("what is 3 * 3")
    shown = pane.wait_for("3 * 3 = 9", "│ ready")
    assert "│ act │" in shown and "│ ready" in shown
    assert all(len(line) <= 80 for line in shown.splitlines())

    pane.keys("C-q")
    deadline = time.monotonic() + 30
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0"
    assert not (chat_config.parent / "work" / "u.txt").exists()
