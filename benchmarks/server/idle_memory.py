"""Where the idle RSS of a ``koboi serve`` replica goes.

1. Starts one real ``koboi serve`` (the config of ``bench_server.py``, SQLite,
   a current schema), waits until ``/readyz`` answers 200 and the process has
   been idle a moment, then reads its RSS and the modules it has imported (a
   small watcher thread in the server process writes them down on request).
2. In a fresh interpreter, imports those same modules again, group by group,
   and prints the RSS each group adds. A group is charged for the shared
   dependencies it imports first, so the order is from the bottom up.

The rest (ready RSS minus the imports) is what the server builds at runtime:
routes, the store's connections, the agent, caches, minus what was released.

    uv run python benchmarks/server/idle_memory.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_server import CONFIG, free_port, koboi, rss_mb

#: Runs in the server process: a watcher thread, then ``koboi serve`` via the CLI.
DRIVER = """
import json, sys, threading, time
from pathlib import Path

def watch(ask, answer):
    while not ask.exists():
        time.sleep(0.02)
    answer.write_text(json.dumps(sorted(sys.modules)))

threading.Thread(target=watch, args=(Path(sys.argv[1]), Path(sys.argv[2])), daemon=True).start()
sys.argv = ["koboi", "serve", *sys.argv[3:]]
from koboi_cli.app import main
main()
"""

#: (label, top-level names), in import order; the standard library comes first.
GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("pydantic + pydantic-core", ("pydantic", "pydantic_core", "typing_extensions",
                                  "typing_inspection", "annotated_types")),
    ("PyYAML, anyio, pluggy", ("yaml", "anyio", "sniffio", "idna", "pluggy")),
    ("koboi kernel", ("koboi",)),
    ("typer, click (the CLI)", ("typer", "click", "shellingham", "annotated_doc", "koboi_cli")),
    ("SQLAlchemy", ("sqlalchemy", "greenlet")),
    ("alembic, mako", ("alembic", "mako", "markupsafe")),
    ("FastAPI, Starlette, OpenTelemetry API", ("fastapi", "starlette", "opentelemetry",
                                               "python_multipart", "multipart",
                                               "pydantic_extra_types")),
    ("uvicorn, h11", ("uvicorn", "h11")),
    ("httpx (+ rich, pygments via httpx._main)", ("httpx", "httpcore", "certifi", "rich",
                                                   "pygments")),
    ("koboi plugins", ()),  # every koboi_* distribution but the CLI
]  # fmt: skip

MEASURE = """
import importlib, json, os, sys
def rss():
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
modules, groups = json.loads(sys.stdin.read())
def group_of(name):
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top.startswith("_"):
        return "the standard library (asyncio, ssl, sqlite3, email, ...)"
    for label, tops in groups:
        if top in tops:
            return label
    if top.startswith("koboi_"):
        return "koboi plugins"
    return "other"
order = ["the standard library (asyncio, ssl, sqlite3, email, ...)"]
order += [label for label, _ in groups] + ["other"]
rows = [["python itself", rss()]]
for label in order:
    before = rss()
    for name in modules:
        if group_of(name) == label and name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:
                pass  # e.g. a module that only imports inside its own package's __init__
    rows.append([label, rss() - before])
print(json.dumps(rows))
"""


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="koboi-idle-memory-") as tmp:
        directory = Path(tmp)
        config = directory / "agent.yaml"
        config.write_text(CONFIG.format(store="sqlite:///koboi.db"))
        koboi("keys", "create", "--config", str(config), "--principal", "bench", cwd=directory)
        port = free_port()
        ask, answer = directory / "ask", directory / "answer"
        proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(ask), str(answer), str(config), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=directory,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("koboi serve did not start")
                time.sleep(0.05)
            time.sleep(5)  # as bench_server.py: idle for a while after ready
            ready = rss_mb(proc.pid)
            ask.touch()
            while not answer.exists():
                time.sleep(0.02)
            time.sleep(0.1)
            modules = [
                m for m in json.loads(answer.read_text()) if m not in ("__main__", "__mp_main__")
            ]
        finally:
            proc.terminate()
            proc.wait(30)
    measured = subprocess.run(
        [sys.executable, "-c", MEASURE],
        input=json.dumps([modules, GROUPS]),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    rows = json.loads(measured.stdout)
    imported = sum(mb for _, mb in rows)
    print(f"koboi serve, ready and idle: {ready:.1f} MB RSS, {len(modules)} modules imported")
    for label, mb in rows:
        print(f"  {label:<58} {mb:6.1f} MB")
    print(f"  {'sum of the imports':<58} {imported:6.1f} MB")
    print(f"  {'built at runtime, net of what was released':<58} {ready - imported:6.1f} MB")


if __name__ == "__main__":
    main()
