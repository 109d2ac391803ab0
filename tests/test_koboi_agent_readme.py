"""koboi-agent's README, line by line, on a fresh copy of this checkout.

The lines of its Quickstart, "See it in 60 seconds", "Serve it" and "Configure"
sections that concern a capability koboi has, run as written (the commands through
the real ``koboi`` command, the curl lines with curl, the Python snippet verbatim).
Where a line cannot run as written here, the test says why beside it:

- ``pip install koboi-agent[...]``: that name on the public index is another project;
  koboi installs from a checkout or a wheelhouse (tests/test_install_from_wheels.py).
- ``--host 0.0.0.0 --port 8080``: run with a free port (the machine is shared).
- Docker: no image is published (not a capability of this repository).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE_OPENAI_KEY = "sk-proj-Xq7fake4Tests9Only2ZkLm8Np3Rs6TuVw"

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

# The README's "Configure" block, verbatim.
CONFIGURE = """\
agent:
  name: "my-agent"
  system_prompt: "You are helpful."
  mode: "chat"                  # chat | plan | act | auto | yolo

llm:
  provider: "openai"            # openai | anthropic | cloudflare
  model: "gpt-4o-mini"
  api_key: "${OPENAI_API_KEY}"

tools:
  builtin: [calculator, web_search, memory_store, memory_recall]

context:
  strategy: "smart_truncation"  # noop | truncation | smart_truncation | key_facts | sliding_window
  max_context_tokens: 8000

rag:
  enabled: true
  retriever: "hybrid"           # keyword | semantic | hybrid (BM25)
  top_k: 10
  documents:
    - path: "./data/sample/product_catalog.md"

guardrails:
  input: { max_length: 10000 }
rate_limit: { max_calls_per_minute: 20 }

sandbox:
  backend: "restricted"         # passthrough (default) | restricted (+ seccomp HARD)
"""

# The README's library snippet, verbatim.
LIBRARY = """\
import asyncio
from koboi import KoboiAgent

async def main():
    async with KoboiAgent.from_config("configs/simple_chat.yaml") as agent:
        result = await agent.run("What is 2 + 2?")
        print(result.content)

asyncio.run(main())
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of what a clone holds that the README uses, as working directory."""
    for name in ("configs", "data", "examples"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns(".koboi"))
    shutil.copy(ROOT / ".env.example", tmp_path / ".env.example")
    tmp_path.chmod(0o711)  # the restricted sandbox's session users pass through it
    monkeypatch.chdir(tmp_path)
    return tmp_path


def environment(**extra: str) -> dict[str, str]:
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KOBOI_", "OPENAI_", "ANTHROPIC_", "CLOUDFLARE_"))
    }
    return {**keep, "KOBOI_STRICT_PLUGINS": "1", **extra}


def koboi(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "koboi", *args],
        cwd=project,
        env=environment(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve(project: Path) -> Iterator[Any]:
    """``serve(config, *args)``: ``koboi serve`` in the project until the test ends."""
    started: list[subprocess.Popen[str]] = []

    def start(config: str, *args: str) -> str:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "koboi", "serve", config, *args, "--port", str(port)],
            cwd=project,
            env=environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while True:
            probe = subprocess.run(
                ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{url}/readyz"],
                capture_output=True,
                text=True,
                check=False,
            )
            if probe.stdout == "200":
                return url
            assert proc.poll() is None, f"koboi serve {config} exited: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "koboi serve did not become ready"
            time.sleep(0.3)

    yield start
    for proc in started:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def create_key(project: Path) -> str:
    """``koboi keys create`` — no config: the default store of the working directory."""
    made = koboi(project, "keys", "create", "--json")
    assert made.returncode == 0, made.stderr
    return str(json.loads(made.stdout)["key"])


# -- Quickstart ------------------------------------------------------------------------


def test_quickstart(project: Path) -> None:
    # export OPENAI_API_KEY=sk-...  /  cp .env.example .env and edit it: koboi loads .env.
    env_file = (project / ".env.example").read_text(encoding="utf-8")
    assert "# OPENAI_API_KEY=" in env_file
    edited = env_file.replace("# OPENAI_API_KEY=sk-...", f"OPENAI_API_KEY={FAKE_OPENAI_KEY}")
    (project / ".env").write_text(edited, encoding="utf-8")
    checked = koboi(project, "validate", "configs/openai.yaml")
    assert checked.returncode == 0, checked.stderr  # the key came from .env alone
    (project / ".env").unlink()
    unset = koboi(project, "validate", "configs/openai.yaml")
    assert unset.returncode != 0 and "OPENAI_API_KEY" in unset.stderr

    # koboi run configs/simple_chat.yaml -m "What is 2 + 2?"
    done = koboi(project, "run", "configs/simple_chat.yaml", "-m", "What is 2 + 2?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "2 + 2 = 4"

    # Or as a library (the snippet as written: result.content).
    snippet = subprocess.run(
        [sys.executable, "-c", LIBRARY],
        cwd=project,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert snippet.returncode == 0, snippet.stderr
    assert snippet.stdout == "2 + 2 = 4\n"

    # Durable by default: both runs are in the store, and the quickstart's last one
    # can be frozen into a bundle right away.
    listed = koboi(project, "sessions", "configs/simple_chat.yaml", "--json")
    assert len(json.loads(listed.stdout)) == 2
    captured = koboi(project, "capture", "last")
    assert captured.returncode == 0, captured.stderr
    bundle = next(p for p in project.glob("*.koboi") if p.is_file())
    replayed = koboi(project, "run", bundle.name, "--replay-mode", "replay")
    assert replayed.returncode == 0 and "replay: identical" in replayed.stdout


# -- See it in 60 seconds ----------------------------------------------------------------


def test_see_it_in_60_seconds(project: Path, serve: Any) -> None:
    # koboi run configs/simple_chat.yaml -m "Read ./data and summarize each file"
    done = koboi(
        project, "run", "configs/simple_chat.yaml", "-m", "Read ./data and summarize each file"
    )
    assert done.returncode == 0, done.stderr
    assert "data/sample/product_catalog.md:1: # Product catalog" in done.stdout
    assert "data/sample/Q3_report.md:1: # Q3 report" in done.stdout

    # koboi sessions configs/simple_chat.yaml
    listed = koboi(project, "sessions", "configs/simple_chat.yaml")
    assert listed.returncode == 0 and "simple_chat" in listed.stdout
    session = listed.stdout.splitlines()[1].split()[0]

    # koboi run configs/simple_chat.yaml --resume <session>: this run finished (it takes
    # well under a second, too fast to kill by hand), so there is nothing to resume, and
    # koboi says so; killing and resuming mid-run is tests/test_crash_resume.py's.
    resumed = koboi(project, "run", "configs/simple_chat.yaml", "--resume", session)
    assert resumed.returncode == 1
    assert resumed.stderr.strip() == (
        f"error: session {session} has no interrupted run to resume (its last run: completed)"
    )

    # python benchmarks/crash_recovery/run.py (here its --help: the benchmark takes minutes)
    bench = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "crash_recovery" / "run.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bench.returncode == 0 and "--trials" in bench.stdout

    # koboi keys create / koboi serve configs/hitl_demo.yaml / python examples/hitl_client.py
    key = create_key(project)
    url = serve("configs/hitl_demo.yaml")
    client = subprocess.run(
        [sys.executable, "examples/hitl_client.py", "--url", url],
        cwd=project,
        env=environment(KOBOI_API_KEY=key),
        input="y\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert client.returncode == 0, client.stdout + client.stderr
    assert "needs approval" in client.stdout and "logged: appended hello" in client.stdout
    assert (project / "configs" / ".koboi" / "hitl_demo" / "crash_demo.log").read_text() == (
        "hello\n"
    )


# -- Serve it --------------------------------------------------------------------------


def test_serve_it(project: Path, serve: Any) -> None:
    # koboi keys create, then koboi serve configs/server_deploy.yaml --host 0.0.0.0 --port …
    key = create_key(project)
    url = serve("configs/server_deploy.yaml", "--host", "0.0.0.0")
    auth = ["-H", f"Authorization: Bearer {key}", "-H", "Content-Type: application/json"]

    # curl -N … -d '{"message":"What is 2+2?"}' …/v1/chat/stream
    chat = subprocess.run(
        ["curl", "-sS", "-N", *auth, "-d", '{"message":"What is 2+2?"}', f"{url}/v1/chat/stream"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "event: tool_call" in chat.stdout and "event: final" in chat.stdout
    final = chat.stdout.split("event: final", 1)[1]
    assert '"outcome":"completed"' in final.replace(" ", "") and "2+2 = 4" in final

    # curl -X POST … -d '{"message":"Summarize the Q3 report"}' …/v1/jobs
    job_body = ["-d", '{"message":"Summarize the Q3 report"}', f"{url}/v1/jobs"]
    job = subprocess.run(
        ["curl", "-sS", "-X", "POST", *auth, "-w", "\n%{http_code}", *job_body],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    body, status = job.stdout.rsplit("\n", 1)
    assert status == "202", job.stdout
    job_id = json.loads(body)["id"]
    deadline = time.monotonic() + 120
    while True:
        view = json.loads(
            subprocess.run(
                ["curl", "-sS", *auth, f"{url}/v1/jobs/{job_id}"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )
        if view["status"] in ("completed", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline, view
        time.sleep(0.2)
    assert view["status"] == "completed", view
    assert "Revenue grew 12% over Q2" in view["result"]["output"]


def test_create_app_takes_the_readmes_keywords(project: Path) -> None:
    # create_app(config, extra_tools=..., extra_hooks=..., approval_handler=...)
    from starlette.testclient import TestClient

    from koboi import tool
    from koboi.approval import DenyAllApprover
    from koboi.interceptors import Interceptor
    from koboi_server import create_app

    @tool(risk="safe", idempotent=True)
    def shout(text: str) -> str:
        """Say it loudly.

        Args:
            text: What to say.
        """
        return text.upper()

    seen: list[str] = []

    class Recorder(Interceptor):
        name = "recorder"

        async def on_run_start(self, run: Any) -> None:
            seen.append("run")

    app = create_app(
        "configs/server_deploy.yaml",
        extra_tools=[shout],
        extra_hooks=[Recorder()],
        approval_handler=DenyAllApprover(),
        settings={"dev_no_auth": True},
    )
    with TestClient(app) as client:
        answer = client.post("/v1/chat", json={"message": "What is 2+2?"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["output"] == "2+2 = 4"
    assert seen == ["run"]


# -- Configure ---------------------------------------------------------------------------


def test_configure_block_is_accepted_as_written(project: Path) -> None:
    (project / "agent.yaml").write_text(CONFIGURE, encoding="utf-8")
    checked = koboi(project, "validate", "agent.yaml", "--suggest", OPENAI_API_KEY=FAKE_OPENAI_KEY)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("ok: agent.yaml is valid (agent my-agent, provider openai")
    assert "suggest: guardrails: is accepted; koboi's own spelling is:" in checked.stdout
    assert "max_chars: 10000" in checked.stdout and "per_minute: 20" in checked.stdout
    assert FAKE_OPENAI_KEY not in checked.stdout + checked.stderr

    # Every section at run time: the same block with the scripted model in place of
    # OpenAI (no key here): RAG indexes the catalog, the calculator runs in the
    # restricted sandbox, the guardrail refuses a message over max_length.
    offline = CONFIGURE.replace(
        textwrap.dedent("""\
            llm:
              provider: "openai"            # openai | anthropic | cloudflare
              model: "gpt-4o-mini"
              api_key: "${OPENAI_API_KEY}"
        """),
        textwrap.dedent("""\
            llm:
              provider: scripted
              rules:
                - match: '(?P<expr>\\d[\\d\\s+*/-]*\\d)'
                  tool: calculator
                  arguments: {expression: "{expr}"}
                  reply: "{expr} = {result}"
        """),
    )
    assert offline != CONFIGURE
    (project / "offline.yaml").write_text(offline, encoding="utf-8")
    ingested = koboi(project, "rag", "ingest", "offline.yaml")
    assert ingested.returncode == 0, ingested.stderr
    searched = koboi(project, "rag", "search", "offline.yaml", "how much is the widget?")
    assert searched.returncode == 0, searched.stderr
    assert "product_catalog.md" in searched.stdout
    done = koboi(project, "run", "offline.yaml", "-m", "What is 6 * 7?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "6 * 7 = 42"
    refused = koboi(project, "run", "offline.yaml", "-m", "x" * 10_001)
    assert refused.returncode == 1
    assert "more than the 10000 allowed" in refused.stderr


# -- the commands around them ------------------------------------------------------------


def test_python_m_koboi_and_version_list_every_plugin(project: Path) -> None:
    from importlib import metadata

    shown = koboi(project, "--version")
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split()[1:] for line in shown.stdout.splitlines()[3:]}
    for ep in metadata.entry_points(group="koboi.plugins"):
        assert ep.dist is not None
        assert rows[ep.name][:2] == [ep.dist.name, ep.dist.version], ep.name
