"""No session's processes can touch another session, the store, the config or koboi's files.

Every attack is a command session A runs, the way a prompt-injected model would ask
``run_shell`` for it; each has its positive control — the same command aimed at
A's own workdir (or its own copy of the file) works — so "blocked" means blocked,
not broken. The project looks like a real one::

    project/                 the config's directory (0755)
        agent.yaml           the config, holding a secret
        .env                 secrets
        .koboi/              the store's directory
            koboi.db         the store, holding a secret
            workdirs/        the sandbox's root: sess-a/, sess-b/

Scenarios: ``isolation: standard`` and ``hard`` with Landlock (then the files are
left world-readable, 0644 in 0755 directories, to show that Landlock alone keeps
them out of reach), and, when koboi is root, ``standard`` *without* Landlock
(simulated), where the per-session uid is what isolates and koboi's files have
the modes koboi gives them (0600; the store's directory 0700).

The whole module runs as root (this machine) and again as an ordinary user:
``test_everything_holds_when_koboi_is_an_ordinary_user`` reruns it under
``setpriv`` with a uid that is not root.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pwd
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from koboi.sandbox import ProcessResult
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import Capabilities, probe
from koboi_sandbox.restricted import RestrictedSandbox
from koboi_testing.users import rerun_as_ordinary_user

pytestmark = pytest.mark.anyio

SECRET = "kb-Bsecret-4Rt7Qp9Zx"
MINE = "kb-Amine-8Lm2Wc5Vn"
CAPS = probe()
AS_ROOT = CAPS.root
#: A marker the inner (non-root) run sets, so it does not start itself again.
_INNER = "KOBOI_SESSION_TESTS_AS_USER"


def _scenarios() -> list[object]:
    found: list[object] = [
        pytest.param(("standard", True), id="standard"),
        pytest.param(("hard", True), id="hard", marks=pytest.mark.hard),
    ]
    if AS_ROOT:
        found.append(pytest.param(("standard", False), id="standard-without-landlock"))
    return found


def _without_landlock(caps: Capabilities) -> Capabilities:
    return dataclasses.replace(
        caps, landlock_abi=0, landlock_reason="Landlock switched off for this test"
    )


@dataclass
class Project:
    top: Path
    config: Path
    env: Path
    state: Path
    store: Path
    sandbox: RestrictedSandbox
    a: Path
    b: Path
    landlock: bool

    async def run(self, script: str, session: str = "sess-a") -> ProcessResult:
        return await self.sandbox.run_process(["sh", "-c", script], session_id=session, timeout=20)


def _build(root: Path, isolation: str, landlock: bool, caps: Capabilities | None = None) -> Project:
    top = root / "project"
    top.mkdir()
    top.chmod(0o755)
    config = top / "agent.yaml"
    config.write_text(f"llm: {{api_key: {SECRET}}}\n")
    env = top / ".env"
    env.write_text(f"OPENAI_API_KEY={SECRET}\n")
    state = top / ".koboi"
    state.mkdir()
    store = state / "koboi.db"
    store.write_bytes(b"SQLite format 3\0" + f"user_message {SECRET}".encode())
    if landlock:  # careless modes: only Landlock stands between
        for path in (config, env, store):
            path.chmod(0o644)
        state.chmod(0o755)
    else:  # the modes koboi gives them (koboi-store-sql: 0600 files in a 0700 directory)
        for path in (config, env, store):
            path.chmod(0o600)
        state.chmod(0o700)
    if caps is None:
        caps = CAPS if landlock else _without_landlock(CAPS)
    sandbox = RestrictedSandbox(
        RestrictedOptions(workdir=str(state / "workdirs"), isolation=isolation),  # type: ignore[arg-type]
        base_dir=top,
        private=[config, state],
        capabilities=caps,
    )
    return Project(
        top,
        config,
        env,
        state,
        store,
        sandbox,
        sandbox.workdir_for("sess-a"),
        sandbox.workdir_for("sess-b"),
        landlock,
    )


@pytest.fixture(params=_scenarios())
async def project(
    request: pytest.FixtureRequest, open_dir: Path, require: Callable[[bool, str], None]
) -> Project:
    isolation, landlock = request.param
    if landlock:
        require(CAPS.landlock_abi >= 1, f"no Landlock here: {CAPS.landlock_reason}")
    built = _build(open_dir, isolation, landlock)
    # B is careless: its secret is world-readable inside its workdir.
    made = await built.run(
        f"umask 022; echo {SECRET} > secret.txt; chmod 644 secret.txt", session="sess-b"
    )
    assert made.returncode == 0, made.stderr
    mine = await built.run(f"echo {MINE} > mine.txt")
    assert mine.returncode == 0, mine.stderr
    assert built.sandbox.isolates_sessions, built.sandbox.session_isolation
    return built


async def _blocked(project: Project, attack: str, control: str, expected: str = MINE) -> None:
    """``attack`` (as session A) shows no secret and fails; ``control`` shows ``expected``."""
    allowed = await project.run(control)
    assert allowed.returncode == 0 and expected in allowed.stdout, f"control failed: {allowed}"
    result = await project.run(attack)
    assert SECRET not in result.stdout + result.stderr, f"{attack!r} got the secret: {result}"
    assert result.returncode != 0, f"{attack!r} succeeded: {result}"


# -- another session's workdir ------------------------------------------------------------


async def test_a_cannot_read_b(project: Project) -> None:
    await _blocked(project, "cat ../sess-b/secret.txt", "cat ../sess-a/mine.txt")
    await _blocked(project, f"cat {project.b}/secret.txt", f"cat {project.a}/mine.txt")


async def test_a_cannot_list_the_other_sessions(project: Project) -> None:
    allowed = await project.run("ls .")
    assert "mine.txt" in allowed.stdout  # control
    result = await project.run("ls ..; ls ../sess-b")
    assert "sess-b" not in result.stdout and "secret.txt" not in result.stdout
    assert result.returncode != 0


async def test_a_cannot_write_into_b(project: Project) -> None:
    await _blocked(
        project,
        "echo planted > ../sess-b/planted.txt",
        "echo planted > ../sess-a/planted.txt && echo " + MINE,
    )
    assert (project.a / "planted.txt").exists()  # control
    assert not (project.b / "planted.txt").exists()
    await _blocked(
        project, "rm -f ../sess-b/secret.txt", "rm ../sess-a/planted.txt && echo " + MINE
    )
    assert (project.b / "secret.txt").read_text() == SECRET + "\n"


async def test_proc_self_root_leads_nowhere_else(project: Project) -> None:
    await _blocked(
        project,
        f"cat /proc/self/root{project.b}/secret.txt",
        f"cat /proc/self/root{project.a}/mine.txt",
    )
    await _blocked(
        project,
        f"echo planted > /proc/self/root{project.b}/planted.txt",
        f"echo planted > /proc/self/root{project.a}/via-root.txt && echo {MINE}",
    )
    assert not (project.b / "planted.txt").exists()


async def test_proc_pid_of_another_sessions_process_or_koboi_leads_nowhere(
    project: Project,
) -> None:
    async with project.sandbox.open_process(["sleep", "60"], session_id="sess-b") as held:
        for attack in (
            f"cat /proc/{held.pid}/cwd/secret.txt",
            f"cat /proc/{held.pid}/root{project.b}/secret.txt",
            f"cat /proc/{os.getpid()}/root{project.b}/secret.txt",
            f"ls /proc/{os.getpid()}/cwd/",
            f"cat /proc/{os.getpid()}/environ",
        ):
            await _blocked(project, attack, "cat /proc/self/cwd/mine.txt")


async def test_links_do_not_lead_into_b(project: Project) -> None:
    await _blocked(
        project,
        "ln ../sess-b/secret.txt hl.txt; cat hl.txt",
        "ln mine.txt hl-own.txt && cat hl-own.txt",
    )
    await _blocked(
        project,
        f"ln -s {project.b}/secret.txt sl.txt; cat sl.txt",
        f"ln -s {project.a}/mine.txt sl-own.txt && cat sl-own.txt",
    )


# -- the store, the config, koboi's files ---------------------------------------------------


async def test_the_store_cannot_be_read_or_grepped(project: Project) -> None:
    await _blocked(project, f"grep -r -a {SECRET} {project.state}", f"grep -r -a {MINE} .")
    await _blocked(project, f"cat {project.store}", "cat mine.txt")
    await _blocked(project, f"ls {project.state}", "ls . && echo " + MINE)


async def test_the_config_and_its_secrets_cannot_be_read_or_changed(project: Project) -> None:
    assert (await project.run(f"echo own copy {MINE} > agent.yaml")).returncode == 0
    await _blocked(project, f"cat {project.config}", "cat agent.yaml")
    await _blocked(project, f"cat {project.env}", "cat agent.yaml")
    await _blocked(
        project, f"echo pwned >> {project.config}", "echo x >> agent.yaml && cat agent.yaml"
    )
    assert "pwned" not in project.config.read_text()
    if project.landlock:  # without it, the directory's own mode (the operator's) decides
        await _blocked(project, f"ls -a {project.top}", "ls -a . && echo " + MINE)


async def test_koboi_itself_cannot_be_changed(project: Project) -> None:
    await _blocked(
        project, f"touch {sys.prefix}/planted", "touch planted && echo " + MINE
    )  # koboi's virtualenv
    assert not await anyio.Path(sys.prefix, "planted").exists()
    if project.landlock:
        await _blocked(project, f"ls {sys.prefix}", "ls . && echo " + MINE)


async def test_each_session_runs_as_its_own_user_when_koboi_is_root(project: Project) -> None:
    a, b = project.a.stat(), project.b.stat()
    result = await project.run("id -u; id -g; id -G")
    uid, gid, groups = result.stdout.split("\n")[:3]
    if AS_ROOT:
        assert (int(uid), int(gid)) == (a.st_uid, a.st_gid)
        assert a.st_uid != b.st_uid, "two sessions share a uid"
        assert a.st_uid not in (0, pwd.getpwnam("nobody").pw_uid)
        assert groups.split() == [gid], "no supplementary groups"
        first = project.sandbox.options.session_ids.first
        assert first <= a.st_uid < first + project.sandbox.options.session_ids.count
        assert (a.st_mode & 0o777, b.st_mode & 0o777) == (0o700, 0o700)
        assert project.sandbox.root.stat().st_mode & 0o777 == 0o711  # passable, not listable
    else:
        # One identity, koboi's (inside the user namespace its PID namespace needs, it
        # shows as the overflow id); Landlock is what keeps the sessions apart.
        assert a.st_uid == b.st_uid == os.geteuid()


# -- where isolation cannot be had, it is said -----------------------------------------------


async def test_the_attacks_are_real_where_nothing_isolates(open_dir: Path) -> None:
    """The control of the whole module: with neither Landlock nor a uid per session,
    the same attacks reach B, the store and the config."""
    bare = dataclasses.replace(_without_landlock(CAPS), root=False)
    built = _build(open_dir, "standard", landlock=True, caps=bare)
    assert not built.sandbox.isolates_sessions
    await built.run(f"echo {SECRET} > secret.txt", session="sess-b")
    for attack in (
        "cat ../sess-b/secret.txt",
        f"cat /proc/self/root{built.b}/secret.txt",
        "ln ../sess-b/secret.txt hl.txt && cat hl.txt",
        f"grep -r -a {SECRET} {built.state}",
        f"cat {built.config}",
        f"cat {built.env}",
    ):
        result = await built.run(attack)
        assert SECRET in result.stdout, f"{attack!r} should reach the secret here: {result}"


async def test_without_landlock_an_ordinary_user_cannot_isolate_and_says_so(
    open_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if AS_ROOT:  # as root, without Landlock, the per-session uid isolates (above)
        caps = dataclasses.replace(_without_landlock(CAPS), root=False)
    else:
        caps = _without_landlock(CAPS)
    with caplog.at_level(logging.WARNING, logger="koboi.sandbox"):
        sandbox = RestrictedSandbox(
            RestrictedOptions(workdir=str(open_dir / "wd")), base_dir=open_dir, capabilities=caps
        )
    assert sandbox.isolates_sessions is False
    described = sandbox.describe()
    assert described["sessions_isolated"] is False
    assert any("no Landlock" in gap for gap in described["session_isolation"]["gaps"])
    assert "cannot isolate sessions" in caplog.text
    if not AS_ROOT:  # and it is true: B's file is A's to read
        b = sandbox.workdir_for("sess-b")
        (b / "secret.txt").write_text(SECRET)
        sandbox.workdir_for("sess-a")
        result = await sandbox.run_process(
            ["sh", "-c", "cat ../sess-b/secret.txt"], session_id="sess-a", timeout=20
        )
        assert SECRET in result.stdout


async def test_without_landlock_a_readable_config_is_a_gap(open_dir: Path) -> None:
    if not AS_ROOT:
        pytest.skip("as an ordinary user without Landlock nothing isolates anyway (above)")
    config = open_dir / "agent.yaml"
    config.write_text("llm: {}\n")
    config.chmod(0o644)
    sandbox = RestrictedSandbox(
        RestrictedOptions(workdir=str(open_dir / "wd")),
        base_dir=open_dir,
        private=[config],
        capabilities=_without_landlock(CAPS),
    )
    assert not sandbox.isolates_sessions
    assert any(str(config) in gap for gap in sandbox.session_isolation.gaps)
    config.chmod(0o600)  # control: as koboi would want it, it is no gap
    again = RestrictedSandbox(
        RestrictedOptions(workdir=str(open_dir / "wd")),
        base_dir=open_dir,
        private=[config],
        capabilities=_without_landlock(CAPS),
    )
    assert again.isolates_sessions, again.session_isolation


def test_user_keep_as_root_isolates_nothing(open_dir: Path) -> None:
    caps = dataclasses.replace(CAPS, root=True)
    sandbox = RestrictedSandbox(
        RestrictedOptions(workdir=str(open_dir / "wd"), user="keep"), capabilities=caps
    )
    assert not sandbox.isolates_sessions
    assert "user: keep" in sandbox.session_isolation.gaps[0]


# -- the same, as an ordinary user ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_everything_holds_when_koboi_is_an_ordinary_user(
    require: Callable[[bool, str], None],
) -> None:
    if os.environ.get(_INNER):
        pytest.skip("this is the ordinary user's run already")
    if not AS_ROOT:
        pytest.skip("koboi already runs as an ordinary user: the tests above are that run")
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is not installed")
    ran = rerun_as_ordinary_user(__file__, inner=_INNER, timeout=540)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-6000:]
    summary = output.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, output[-3000:]
