"""The file tools never follow a hard link to a file the session could not open as itself.

A hard link is a second name, inside the working directory, for a file that
lives elsewhere: another session's secret, the store, the config. Resolving the
path beneath the root cannot see it; the tools run in koboi's process (as root,
often), so they would read it for the session. The rule (koboi_confine.paths):

- the session has an id of its own (koboi as root, ``restricted``): a file with
  more than one link is opened only if that id may open it by its mode bits;
- the session runs as koboi's own user: a file with more than one link is never
  opened (nothing tells a harmless link from one that leads out).

Every refusal has its control: the same tool on a file with one link, or on the
session's own hard link, works. The module runs as root and again as an
ordinary user (``test_the_rule_holds_when_koboi_is_an_ordinary_user``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koboi.tools import ToolContext
from koboi_confine.paths import PathRefused, session_identity
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.restricted import RestrictedSandbox
from koboi_testing.users import rerun_as_ordinary_user
from koboi_tools_fs.tools import make_tools

pytestmark = pytest.mark.anyio

SECRET = "kb-linked-secret-3Jq8"
AS_ROOT = os.geteuid() == 0
_INNER = "KOBOI_HARD_LINK_TESTS_AS_USER"


class Session:
    """The nine tools as one session of a sandbox calls them."""

    def __init__(self, sandbox: Any, session_id: str) -> None:
        self.sandbox = sandbox
        self.workdir = sandbox.workdir_for(session_id) or sandbox.workdir
        self.ctx = ToolContext(session_id, "call-1", 1, sandbox, workdir=self.workdir)
        self.tools = make_tools()

    async def __call__(self, name: str, **arguments: Any) -> str:
        tool = self.tools[name]
        result = await tool(tool.parse_arguments(arguments), self.ctx)
        return result.content

    async def sh(self, script: str) -> str:
        result = await self.ctx.run_process(["sh", "-c", script], timeout=20)
        assert result.returncode == 0, result
        return result.stdout


@pytest.fixture
def open_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="koboi-fs-links-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sessions(open_dir: Path) -> tuple[Session, Session]:
    sandbox = RestrictedSandbox(RestrictedOptions(workdir=str(open_dir / "wd")))
    return Session(sandbox, "sess-a"), Session(sandbox, "sess-b")


async def _refused(session: Session, name: str, **arguments: Any) -> None:
    with pytest.raises(PathRefused, match="hard link") as refused:
        await session(name, **arguments)
    assert SECRET not in str(refused.value)


async def test_a_link_to_another_sessions_file_is_refused(
    sessions: tuple[Session, Session],
) -> None:
    a, b = sessions
    await b.sh(f"umask 022; echo {SECRET} > secret.txt")
    mine = await a.sh(
        "echo solo > solo.txt && echo mine > mine.txt && ln mine.txt mine-too.txt && echo ok"
    )
    assert mine == "ok\n"
    # The attack as a model would try it: the shell cannot even make the link...
    attempt = await a.ctx.run_process(["sh", "-c", "ln ../sess-b/secret.txt hl.txt"], timeout=20)
    assert attempt.returncode != 0
    # ...so make it as a machine with neither Landlock nor per-session ids would let it be.
    os.link(b.workdir / "secret.txt", a.workdir / "hl.txt")
    await _refused(a, "read_file", path="hl.txt")
    await _refused(a, "grep", pattern="kb-", path="hl.txt")
    await _refused(a, "edit_file", path="hl.txt", old_text=SECRET, new_text="x")
    await _refused(a, "write_file", path="hl.txt", content="overwritten")
    await _refused(
        a, "apply_patch", patch=f"--- hl.txt\n+++ hl.txt\n@@ -1 +1 @@\n-{SECRET}\n+pwned\n"
    )
    tree = await a("grep", pattern="kb-|mine|solo")
    assert SECRET not in tree and "hard-linked files skipped" in tree
    assert (b.workdir / "secret.txt").read_text() == SECRET + "\n"
    # Control: a file with one link, and (with an id of its own) the session's own link.
    assert await a("read_file", path="solo.txt") == "solo\n"
    assert "solo.txt:1: solo" in tree
    if session_identity(a.workdir).own:
        assert await a("read_file", path="mine-too.txt") == "mine\n"
        assert "mine-too.txt:1: mine" in tree
        await a("write_file", path="mine-too.txt", content="changed\n")
    else:
        await _refused(a, "read_file", path="mine-too.txt")
    # Removing the name is fine: it removes only A's name, never B's file.
    await a("delete_file", path="hl.txt")
    assert (b.workdir / "secret.txt").read_text() == SECRET + "\n"


async def test_a_link_to_koboi_files_is_refused_for_a_session_of_koboi_user(
    open_dir: Path,
) -> None:
    """Where sessions run as koboi's own user (the passthrough sandbox here, or koboi not
    root), a link to the store or the config must not be read for the session."""
    from koboi.sandbox import PassthroughSandbox

    workdir = open_dir / "work"
    workdir.mkdir()
    store = open_dir / "koboi.db"
    store.write_text(SECRET)
    session = Session(PassthroughSandbox(workdir), "s1")
    (workdir / "plain.txt").write_text("plain")
    assert await session("read_file", path="plain.txt") == "plain"  # control
    os.link(store, workdir / "store-link.txt")
    await _refused(session, "read_file", path="store-link.txt")
    await _refused(session, "write_file", path="store-link.txt", content="x")
    assert store.read_text() == SECRET


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_rule_holds_when_koboi_is_an_ordinary_user() -> None:
    if os.environ.get(_INNER):
        pytest.skip("this is the ordinary user's run already")
    if not AS_ROOT:
        pytest.skip("koboi already runs as an ordinary user: the tests above are that run")
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is not installed")
    ran = rerun_as_ordinary_user(__file__, inner=_INNER, timeout=240)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-6000:]
    summary = output.strip().splitlines()[-1]
    assert "2 passed" in summary and "failed" not in summary, output[-3000:]
