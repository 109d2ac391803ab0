"""A ``koboi chat`` process for the tests, its output read as it comes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

KOBOI = str(Path(sys.executable).parent / "koboi")


class Chat:
    """A ``koboi chat`` process whose output is read as it comes."""

    def __init__(self, config: Path, *args: str) -> None:
        env = {**os.environ, "KOBOI_STRICT_PLUGINS": "1", "NO_COLOR": "1"}
        self.process = subprocess.Popen(
            [KOBOI, "chat", str(config), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=config.parent,
            env=env,
        )
        self.output = ""
        self.errors = ""
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := self.process.stdout.read(1):
            self.output += chunk

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        self.errors = self.process.stderr.read()

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if time.monotonic() > deadline or self.process.poll() is not None:
                time.sleep(0.2)
                raise AssertionError(f"no {text!r} in:\n{self.output}\nstderr:\n{self.errors}")
            time.sleep(0.02)

    def finish(self, timeout: float = 30.0) -> int:
        """Close stdin, wait for the exit; return its code (the output is all read)."""
        assert self.process.stdin is not None
        if not self.process.stdin.closed:
            self.process.stdin.close()
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        if code != 0:
            print(f"exit code {code}; stderr:\n{self.errors}")
        return code

    def kill(self) -> None:
        self.process.kill()
        self.finish()
