"""``koboi chat``: time from launch to the first prompt, and input latency during a stream.

Prints figures; asserts nothing. Three measurements:

1. **Launch to first prompt, real terminal**: ``koboi chat CONFIG`` started in an 80x24
   tmux pane (a new Python process: plugins, config, store, agent, Textual) until the
   status line says ``ready`` on the screen (``capture-pane`` polled every 10 ms).
   Also ``koboi chat --no-tui`` through a pipe until its first ``> `` prompt, and, for
   scale, a whole ``koboi run CONFIG -m hi`` (the same start-up and one short run).
2. **Launch to first prompt, in process**: ``ChatApp`` under Textual's headless driver,
   from ``run_test()`` until the agent is open and the prompt has the focus (what the
   app itself costs, without Python's start-up and the imports).
3. **Input latency while 1,000 tokens stream in**: a model streams 1,000 tokens at a
   steady pace (default 2 ms apart: 500 tokens/s, faster than any hosted model) while
   keys are typed into the prompt; each key's latency is the time from its key event
   being posted until the prompt's value holds it (Textual's pilot, headless). The
   same keys typed with nothing streaming give the baseline.

    uv run python benchmarks/tui/bench_chat.py            # ~1-2 min
    uv run python benchmarks/tui/bench_chat.py --quick    # fewer repetitions
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

KOBOI = str(Path(sys.executable).parent / "koboi")

CONFIG = """
agent: {name: bench_chat, mode: act}
llm:
  provider: scripted
  model: bench
  rules:
    - match: 'stream'
      reply: "streamed"
  fallback: "ok"
store: {url: "sqlite:///koboi.db"}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(label: str, values_ms: list[float]) -> str:
    return (
        f"  {label:<50} n={len(values_ms):<4} min {min(values_ms):8.1f}  "
        f"median {statistics.median(values_ms):8.1f}  p95 {percentile(values_ms, 0.95):8.1f}  "
        f"max {max(values_ms):8.1f} ms"
    )


# -- 1. a real terminal ------------------------------------------------------------------


def launch_in_tmux(config: Path, runs: int) -> list[float]:
    socket = f"koboi-bench-{os.getpid()}"
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    env = {**os.environ, "TERM": "xterm-256color"}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [*tmux, "new-session", "-d", "-s", "b", "-x", "80", "-y", "24", "-c",
             str(config.parent), f"{KOBOI} chat {config}"],
            check=True, env=env,
        )  # fmt: skip
        while True:
            shown = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "b"], capture_output=True, text=True, env=env
            ).stdout
            if "│ ready" in shown:
                times.append((time.perf_counter() - started) * 1000)
                break
            if time.perf_counter() - started > 120:
                raise SystemExit(f"koboi chat never became ready in tmux:\n{shown}")
            time.sleep(0.01)
        subprocess.run([*tmux, "send-keys", "-t", "b", "C-q"], env=env)
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            if subprocess.run([*tmux, "has-session", "-t", "b"], capture_output=True).returncode:
                break
            time.sleep(0.05)
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    return times


def launch_line_mode(config: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        process = subprocess.Popen(
            [KOBOI, "chat", str(config), "--no-tui"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=config.parent,
        )
        assert process.stdout is not None and process.stdin is not None
        seen = b""
        while not seen.endswith(b"> "):
            chunk = process.stdout.read1(4096)
            if not chunk:
                raise SystemExit("koboi chat --no-tui ended before its prompt")
            seen += chunk
        times.append((time.perf_counter() - started) * 1000)
        process.stdin.close()
        process.wait(30)
        process.stdout.close()
    return times


def koboi_run(config: Path, runs: int) -> list[float]:
    """For scale: a whole ``koboi run CONFIG -m hi`` (the same start-up, one short run)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [KOBOI, "run", str(config), "-m", "hi"],
            capture_output=True,
            check=True,
            cwd=config.parent,
        )
        times.append((time.perf_counter() - started) * 1000)
    return times


# -- 2 and 3. in process -----------------------------------------------------------------


def paced_provider(tokens: int, gap: float) -> Any:
    """A model that streams ``tokens`` words, ``gap`` seconds apart."""
    from koboi.messages import Message, ModelResponse, ResponseDone, TextDelta, Usage
    from koboi.provider import ModelProvider

    class Paced(ModelProvider):
        name = "paced"
        model = "paced"

        async def complete(self, request: Any) -> ModelResponse:
            raise NotImplementedError

        async def stream(self, request: Any) -> AsyncIterator[Any]:
            words = [f"w{i} " for i in range(tokens)]
            next_at = time.perf_counter()
            for word in words:
                next_at += gap
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                yield TextDelta(text=word)
            message = Message.assistant("".join(words))
            usage = Usage(input_tokens=1, output_tokens=tokens, requests=1)
            yield ResponseDone(response=ModelResponse(message=message, usage=usage, model="paced"))

    return Paced()


async def in_process(config: Path, runs: int, tokens: int, gap: float, keys: int) -> None:
    from textual import events
    from textual.widgets import Input

    from koboi.config import load_config
    from koboi.plugins import default_host
    from koboi_tui.app import ChatApp, MessageView

    host = default_host()
    loaded = load_config(config, host.catalog())

    async def until(pilot: Any, condition: Any, timeout: float = 60.0) -> None:
        # Not pilot.pause(): it waits for the app to be idle, which it never is while a
        # stream arrives. Polling the event loop keeps the measurement to what it says.
        deadline = time.perf_counter() + timeout
        while not condition():
            if time.perf_counter() > deadline:
                raise SystemExit("timed out")
            await asyncio.sleep(0.0002)

    launch = []
    for _ in range(runs):
        app = ChatApp(loaded, host)
        started = time.perf_counter()
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda a=app: a.state == "ready" and a.focused is not None)
            launch.append((time.perf_counter() - started) * 1000)
    print(row("ChatApp under the headless driver", launch))

    def post_key(app: Any, key: str, char: str | None) -> None:
        # What the driver does with a key read from the terminal (and what pilot.press
        # does, before it waits for the app to be idle: never, while a stream arrives).
        event = events.Key(key, char)
        event.set_sender(app)
        app._driver.send_message(event)

    async def type_keys(pilot: Any, prompt: Input, count: int) -> list[float]:
        latencies = []
        for i in range(count):
            char = "abcdefghij"[i % 10]
            before = len(prompt.value)
            started = time.perf_counter()
            post_key(pilot.app, char, char)
            await until(pilot, lambda p=prompt, n=before: len(p.value) > n)
            latencies.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.01)
        return latencies

    app = ChatApp(loaded, host, agent_options={"provider": paced_provider(tokens, gap)})
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.state == "ready")
        prompt = app.query_one("#prompt", Input)
        prompt.focus()
        idle = await type_keys(pilot, prompt, keys)
        prompt.value = "stream please"
        stream_started = time.perf_counter()
        post_key(app, "enter", "\r")
        await until(pilot, lambda: app.controller.running)
        prompt.focus()
        during: list[float] = []
        while app.controller.running and len(during) < 100 * keys:
            during += await type_keys(pilot, prompt, 1)
        await until(pilot, lambda: not app.controller.running)
        stream_ms = (time.perf_counter() - stream_started) * 1000
        answer = app.query(MessageView).last().text
    print()
    print(
        f"Input latency, key posted -> in the prompt ({tokens:,} tokens, {gap * 1000:g} ms apart):"
    )
    print(row("no stream", idle))
    print(row(f"while {tokens:,} tokens stream in", during))
    print(
        f"  the stream took {stream_ms:,.0f} ms (ideal {tokens * gap * 1000:,.0f} ms); "
        f"{len(answer.split())} of {tokens:,} tokens shown; {len(during)} keys typed meanwhile"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--gap-ms", type=float, default=2.0, help="ms between streamed tokens")
    args = parser.parse_args()
    runs = 3 if args.quick else 7
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "chat.yaml"
        config.write_text(CONFIG)
        print(f"koboi chat benchmark - {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
        print("Launch to the first prompt, new process:")
        if shutil.which("tmux"):
            print(row("koboi chat in an 80x24 tmux pane", launch_in_tmux(config, runs)))
        else:
            print("  (tmux is not installed: apt-get install -y tmux)")
        print(row("koboi chat --no-tui, through a pipe", launch_line_mode(config, runs)))
        print(row("for scale: koboi run CONFIG -m hi, start to exit", koboi_run(config, runs)))
        print("Launch to the first prompt, in process:")
        asyncio.run(
            in_process(config, runs, args.tokens, args.gap_ms / 1000, 20 if args.quick else 40)
        )


if __name__ == "__main__":
    main()
