"""The commands, through the real ``koboi`` app: capture, run BUNDLE, export, import, workflows."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from koboi_cli.app import app
from koboi_replay import bundle as B

Write = Callable[..., Path]

DURABLE = """
    agent: {name: durable, mode: act, approval_risk: safe}
    llm:
      provider: scripted
      rules:
        - match: '(?P<expr>\\d+ [*+] \\d+)'
          tool: calculator
          arguments: {expression: "{expr}"}
          reply: "{expr} = {result}"
    tools: {builtin: [calculator]}
    store: {url: "sqlite:///koboi.db"}
"""


def koboi(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def config(write_config: Write, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_config(DURABLE)


@pytest.fixture
def recorded(config: Path, tmp_path: Path) -> Path:
    """A session of ``config`` that used the calculator, captured into run.koboi."""
    code, out, err = koboi("run", str(config), "-m", "6 * 7", "--yes")
    assert code == 0, err
    assert "6 * 7 = 42" in out
    bundle = tmp_path / "run.koboi"
    code, out, err = koboi("capture", "last", "--config", str(config), "-o", str(bundle))
    assert code == 0, err
    assert out.startswith("captured session ") and "(1 run, " in out
    return bundle


def test_capture_then_replay(recorded: Path) -> None:
    code, out, err = koboi("run", str(recorded), "--replay-mode", "replay")
    assert code == 0, err
    assert out.splitlines()[0] == "replay: identical"
    code, out, _ = koboi("run", str(recorded), "--replay-mode", "replay", "--json")
    report = json.loads(out)
    assert code == 0 and report["identical"] is True and report["divergence"] is None
    assert report["events"]["expected"] == report["events"]["replayed"] > 0


def test_a_divergence_is_printed_with_its_event(recorded: Path, tmp_path: Path) -> None:
    bundle = B.read_bundle(recorded)
    results = bundle.records(B.TOOL_RESULTS)
    results[0]["content"] = "41"
    bundle.files[B.TOOL_RESULTS] = B.jsonl(results)
    bundle.seal()
    tampered = tmp_path / "tampered.koboi"
    bundle.write(tampered)
    index = next(e.seq for e in bundle.events() if e.type == "tool_call_finished")
    code, out, _ = koboi("run", str(tampered), "--replay-mode", "replay")
    assert code == 1
    lines = out.splitlines()
    assert (
        lines[0]
        == f"replay: diverged at event {index} of {len(bundle.events())} (tool_call_finished)"
    )
    assert "  differs at data.content" in lines
    assert '  expected: "42"' in lines and '  actual:   "41"' in lines
    code, out, _ = koboi("run", str(tampered), "--replay-mode", "replay", "--json")
    divergence = json.loads(out)["divergence"]
    assert code == 1 and divergence["index"] == index and divergence["path"] == "data.content"


def test_damaged_and_newer_bundles_are_refused_in_one_line(recorded: Path, tmp_path: Path) -> None:
    data = bytearray(recorded.read_bytes())
    broken = tmp_path / "broken.koboi"
    bundle = B.read_bundle(recorded)
    bundle.files[B.EVENTS] += b"\n"  # changed, not resealed
    broken.write_bytes(bundle.to_bytes())
    code, _, err = koboi("run", str(broken), "--replay-mode", "replay")
    assert code == 1
    assert err.startswith(f"error: {broken}: checksum mismatch in events.jsonl")
    assert "Traceback" not in err
    newer = B.read_bundle(recorded)
    newer.manifest["format_version"] = B.FORMAT_VERSION + 1
    newer.seal()
    newer.write(tmp_path / "newer.koboi")
    code, _, err = koboi("run", str(tmp_path / "newer.koboi"), "--replay-mode", "replay")
    assert code == 1 and "upgrade koboi-replay" in err
    assert bytes(data) == recorded.read_bytes()


def test_run_option_rules(recorded: Path, config: Path) -> None:
    code, _, err = koboi("run", str(recorded))
    assert code == 1 and "give -m MESSAGE to run its config, or --replay-mode replay" in err
    code, _, err = koboi("run", str(recorded), "--replay-mode", "replay", "--session", "x")
    assert code == 1 and "--session does not apply to a replay" in err
    code, _, err = koboi("run", str(recorded), "-m", "hi", "--tools", "live")
    assert code == 1 and "--tools applies only to a replay" in err
    code, _, err = koboi("run", str(config), "-m", "hi", "--tools", "live")
    assert code == 2 and "--tools applies only when replaying a bundle" in err
    code, _, err = koboi(
        "run", str(config), "-m", "hi", "--cache-mode", "record", "--replay-mode", "replay"
    )
    assert code == 2 and "not both" in err
    # Control: the bundle's config runs on a new message, like a config file.
    code, out, err = koboi("run", str(recorded), "-m", "2 + 3", "--yes")
    assert code == 0, err
    assert out.endswith("2 + 3 = 5\n")


def test_capture_refuses_what_it_cannot_freeze(
    recorded: Path, config: Path, tmp_path: Path
) -> None:
    before = recorded.read_bytes()
    code, _, err = koboi("capture", "last", "--config", str(config), "-o", str(recorded))
    assert code == 1 and "already exists" in err and recorded.read_bytes() == before
    code, _, err = koboi("capture", "last", "--config", str(config), "-o", str(recorded), "--force")
    assert code == 0, err
    edited = tmp_path / "edited.yaml"
    edited.write_text(config.read_text().replace("name: durable", "name: edited"))
    code, _, err = koboi(
        "capture", "last", "--config", str(edited), "-o", str(tmp_path / "x.koboi")
    )
    assert code == 1 and "is not the config session" in err
    assert "pass the config as it was" in err
    code, _, err = koboi(
        "capture", "nope", "--config", str(config), "-o", str(tmp_path / "y.koboi")
    )
    assert code == 1 and "no session id starts with 'nope'" in err


def test_capture_finds_the_config_by_its_hash(
    recorded: Path, config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOBOI_STORE", f"sqlite:///{tmp_path / 'koboi.db'}")
    (tmp_path / "unrelated.yaml").write_text("llm: {provider: scripted}\n")
    out_path = tmp_path / "found.koboi"
    code, _, err = koboi("capture", "last", "-o", str(out_path))
    assert code == 0, err
    assert f"note: the session's config is {config}" in err
    assert B.read_bundle(out_path).config_text == config.read_text()
    (tmp_path / "copy.yaml").write_text(config.read_text())
    code, _, err = koboi("capture", "last", "-o", str(tmp_path / "again.koboi"))
    assert code == 1 and "several configs match" in err


def test_an_interrupted_session_and_a_running_one(config: Path, tmp_path: Path) -> None:
    """A run whose process is gone is captured (and replays to the point it died); one that
    is still running is refused until it is not."""
    from koboi.config import config_hash, read_with_extends
    from koboi.store import NewEvent
    from koboi_store_sql.plugin import create_store

    digest = config_hash(read_with_extends(config))
    holder = f"{socket.gethostname()}:{os.getpid()}:live"
    from koboi.config import load_config
    from koboi.models import build_model
    from koboi.plugins import default_host

    catalog = default_host().catalog()
    model_identity = build_model(load_config(config, catalog), catalog, None).cache_identity()

    async def start_a_run() -> None:
        store = create_store("sqlite:///koboi.db", tmp_path)
        async with store:
            info = await store.create_session(
                "s-running", config_name="durable", config_hash=digest
            )
            await store.acquire_lease(info.id, holder, 60)
            data = {
                "input": "6 * 7",
                "agent": "durable",
                "config_hash": digest,
                "autonomous": False,
                "tools": ["calculator"],
                # The caller's trace context: the replay journals this very one.
                "trace": {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"},
                # What the loop journals of its model: its provider's cache identity.
                "model": model_identity,
            }
            # What the loop commits first, in one transaction; the process "dies" in the
            # model call that follows.
            started = [NewEvent("run_started", data), NewEvent("model_call_started", {"step": 1})]
            await store.append(info.id, started)

    async def let_go() -> None:
        store = create_store("sqlite:///koboi.db", tmp_path)
        async with store:
            lease = await store.get_lease("s-running")
            assert lease is not None
            await store.release_lease(lease)

    anyio.run(start_a_run)
    out_path = tmp_path / "running.koboi"
    code, _, err = koboi("capture", "s-running", "--config", str(config), "-o", str(out_path))
    assert code == 1 and "is being run right now" in err and not out_path.exists()
    anyio.run(let_go)
    code, _, err = koboi("capture", "s-running", "--config", str(config), "-o", str(out_path))
    assert code == 0, err
    assert B.read_bundle(out_path).manifest["session"]["interrupted"] is True
    code, out, err = koboi("run", str(out_path), "--replay-mode", "replay")
    assert code == 0, out + err
    assert out.startswith("replay: identical")


def test_export_import_and_workflows(config: Path, tmp_path: Path, recorded: Path) -> None:
    flow = tmp_path / "flow.koboi"
    code, out, err = koboi("export", str(config), "-o", str(flow))
    assert code == 0, err
    assert out.startswith(f"exported {config} as a workflow into {flow}")
    assert B.read_bundle(flow).kind == "workflow"
    code, out, err = koboi("import", str(flow), "--config", str(config))
    assert code == 0, err
    assert "as workflow 'durable'" in out
    code, _, err = koboi("import", str(flow), "--config", str(config))
    assert code == 1 and "already stored; pass --replace" in err
    code, _, err = koboi("import", str(flow), "--config", str(config), "--replace")
    assert code == 0, err
    code, _, err = koboi("import", str(flow), "--config", str(config), "--name", "bad name!")
    assert code == 1 and "not a valid workflow name" in err
    code, _, err = koboi("import", str(recorded), "--config", str(config))
    assert code == 1 and "is a captured run" in err
    code, out, _ = koboi("workflows", "list", "--config", str(config))
    assert code == 0 and out.splitlines()[1].startswith("durable")
    code, out, _ = koboi("workflows", "list", "--config", str(config), "--json")
    listed = json.loads(out)
    assert [w["name"] for w in listed] == ["durable"]
    assert listed[0]["checksum"] == B.read_bundle(flow).checksum
    code, out, _ = koboi("workflows", "show", "durable", "--config", str(config))
    assert code == 0 and "workflow durable" in out and "provider: scripted" in out
    back = tmp_path / "back.koboi"
    code, _, err = koboi("workflows", "export", "durable", "-o", str(back), "--config", str(config))
    assert code == 0, err
    assert B.read_bundle(back).files == B.read_bundle(flow).files
    code, out, err = koboi("run", str(back), "-m", "3 * 3", "--yes")
    assert code == 0, err
    assert out.endswith("3 * 3 = 9\n")
    code, out, _ = koboi("workflows", "delete", "durable", "--config", str(config))
    assert code == 0 and out == "deleted workflow 'durable'\n"
    code, _, err = koboi("workflows", "show", "durable", "--config", str(config))
    assert code == 1 and "no workflow named 'durable'" in err
    code, _, err = koboi("workflows", "delete", "durable", "--config", str(config))
    assert code == 1 and "nothing was deleted" in err


def test_workflows_need_a_store_that_keeps_them(write_config: Write, tmp_path: Path) -> None:
    memory = write_config("llm: {provider: scripted}\nstore: {url: 'memory://'}\n", "memory.yaml")
    code, _, err = koboi("workflows", "list", "--config", str(memory))
    assert code == 1 and "keeps nothing between commands" in err


def test_a_bundle_cache_answers_offline(
    write_config: Write, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--with-cache: the bundle's config runs under --replay-mode replay from its cache."""
    monkeypatch.chdir(tmp_path)
    config = write_config(DURABLE + "    cache: {mode: record}\n")
    code, _, err = koboi("run", str(config), "-m", "6 * 7", "--yes")
    assert code == 0, err
    with_cache, without = tmp_path / "cached.koboi", tmp_path / "plain.koboi"
    assert (
        koboi("capture", "last", "--config", str(config), "-o", str(with_cache), "--with-cache")[0]
        == 0
    )
    assert koboi("capture", "last", "--config", str(config), "-o", str(without))[0] == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = koboi(
        "run", str(with_cache), "-m", "6 * 7", "--replay-mode", "replay", "--yes"
    )
    assert code == 0, err
    assert "seeded the response cache with 2 answer(s)" in err
    assert out.endswith("6 * 7 = 42\n")
    # The mode went to the kernel as an argument: no variable was set to carry it.
    assert "KOBOI_CACHE_MODE" not in os.environ
    # Control, in a directory of its own (the seeded answers stay in the store they went to):
    # without the cache, nothing answers offline.
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    code, out, err = koboi("run", str(without), "-m", "6 * 7", "--replay-mode", "replay", "--yes")
    assert code == 1 and "no recorded response" in err + out
