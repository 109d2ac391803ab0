"""Per-session identities: stable, distinct, never an account's, never reused, safe to share.

These need root (only root can give a directory to another uid).
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from koboi.errors import SandboxError
from koboi_sandbox import identity
from koboi_sandbox.identity import RECORD_NAME
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.restricted import RestrictedSandbox

# Skipped as an ordinary user, failed when CI is set (CI runs koboi's tests as root).
pytestmark = pytest.mark.needs(os.geteuid() == 0, "per-session ids need koboi as root")


def _record(root: Path) -> Path:
    """The machine's record these tests use: one per test (beside its roots), so the ids
    they take never fill the real one; every sandbox of a test shares it, as the real
    machine's processes share the default."""
    return root.parent / "machine" / "session-ids"


def _sandbox(root: Path, record: Path | None = None, **ids: int) -> RestrictedSandbox:
    options: dict[str, object] = {
        "workdir": str(root),
        "session_ids": {"record": str(record or _record(root)), **ids},
    }
    return RestrictedSandbox(RestrictedOptions.model_validate(options))


def _owner(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_uid, info.st_gid


def test_each_session_gets_its_own_id_from_the_range(open_dir: Path) -> None:
    sandbox = _sandbox(open_dir / "wd")
    first, count = sandbox.options.session_ids.first, sandbox.options.session_ids.count
    owners = {name: _owner(sandbox.workdir_for(name)) for name in ("a", "b", "c", "shared")}
    uids = [uid for uid, _ in owners.values()]
    assert len(set(uids)) == 4, owners
    assert all(uid == gid for uid, gid in owners.values()), "the gid is the uid's number"
    assert all(first <= uid < first + count for uid in uids)
    for name in owners:
        assert stat.S_IMODE((open_dir / "wd" / name).stat().st_mode) == 0o700
    # The root lets the ids pass to their own directory and list nothing.
    assert stat.S_IMODE((open_dir / "wd").stat().st_mode) == 0o711
    record = _record(open_dir / "wd")
    assert stat.S_IMODE(record.stat().st_mode) == 0o600 and record.stat().st_uid == 0
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700
    assert not (open_dir / "wd" / RECORD_NAME).exists()  # no record of the root's own
    # What koboi sandbox check and describe() say names the record.
    assert str(record) in " ".join(sandbox.session_isolation.mechanisms)


def test_an_id_is_stable_for_its_session(open_dir: Path) -> None:
    root = open_dir / "wd"
    first = _owner(_sandbox(root).workdir_for("a"))
    assert _owner(_sandbox(root).workdir_for("a")) == first  # a new sandbox, a new process...
    (root / "a").rmdir()
    assert _owner(_sandbox(root).workdir_for("a")) == first  # ...or the directory made again


def test_ids_are_never_reused(open_dir: Path) -> None:
    root = open_dir / "wd"
    sandbox = _sandbox(root, first=3_000_000_000, count=2)
    a = _owner(sandbox.workdir_for("a"))
    (root / "a").rmdir()  # the session is gone; its id stays taken
    b = _owner(sandbox.workdir_for("b"))
    assert a != b
    with pytest.raises(SandboxError, match="no free id left"):
        sandbox.workdir_for("c")


def test_ids_that_name_an_account_or_a_subordinate_range_are_skipped(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = 3_100_000_000
    real_getpwuid = pwd.getpwuid

    def pretend(uid: int) -> pwd.struct_passwd:
        if uid == first:  # as if an LDAP account had this id
            return real_getpwuid(0)
        return real_getpwuid(uid)

    monkeypatch.setattr(identity.pwd, "getpwuid", pretend)
    subuid = open_dir / "subuid"
    subuid.write_text(f"someone:{first + 1}:1\n")
    monkeypatch.setattr(identity, "_SUBORDINATE_FILES", (str(subuid),))
    sandbox = _sandbox(open_dir / "wd", first=first, count=3)
    assert _owner(sandbox.workdir_for("a"))[0] == first + 2
    with pytest.raises(SandboxError, match="no free id left"):
        sandbox.workdir_for("b")


def test_an_old_directory_is_given_to_its_sessions_new_id(open_dir: Path) -> None:
    root = open_dir / "wd"
    root.mkdir()
    old = root / "legacy"
    (old / "sub").mkdir(parents=True)
    (old / "sub" / "f.txt").write_text("mine")
    (old / "link").symlink_to("/etc/passwd")
    outside = open_dir / "outside.txt"
    outside.write_text("not the session's")
    os.link(outside, old / "linked.txt")  # a second name of a file elsewhere
    nobody = pwd.getpwnam("nobody")
    for path in (old, old / "sub", old / "sub" / "f.txt"):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    os.lchown(old / "link", nobody.pw_uid, nobody.pw_gid)
    old.chmod(0o755)
    uid, _ = _owner(_sandbox(root).workdir_for("legacy"))
    assert uid not in (0, nobody.pw_uid)
    assert stat.S_IMODE(old.stat().st_mode) == 0o700
    assert _owner(old / "sub") == _owner(old / "sub" / "f.txt") == (uid, uid)
    assert _owner(old / "link") == (uid, uid)
    assert _owner(Path("/etc/passwd")) == (0, 0)  # the link was not followed
    assert _owner(outside) == (0, 0), "a hard-linked file elsewhere was re-owned"


def test_a_symlink_in_place_of_a_session_directory_is_refused(open_dir: Path) -> None:
    sandbox = _sandbox(open_dir / "wd")
    (open_dir / "wd" / "evil").symlink_to(open_dir)
    with pytest.raises(SandboxError, match="not a directory"):
        sandbox.workdir_for("evil")
    assert _owner(open_dir) == (0, 0)


def test_two_processes_sharing_a_root_never_hand_out_one_id_twice(open_dir: Path) -> None:
    root = open_dir / "wd"
    script = (
        "import json, sys\n"
        "from koboi_sandbox.options import RestrictedOptions\n"
        "from koboi_sandbox.restricted import RestrictedSandbox\n"
        "s = RestrictedSandbox(RestrictedOptions(workdir=sys.argv[1], "
        "session_ids={'first': 3_200_000_000, 'count': 64, 'record': sys.argv[3]}))\n"
        "print(json.dumps({n: s.workdir_for(n).stat().st_uid "
        "for n in [f'{sys.argv[2]}-{i}' for i in range(25)]}))\n"
    )
    assert _run_workers(script, [(root, "x"), (root, "y")], _record(root)) == 50


def _run_workers(script: str, work: list[tuple[Path, str]], record: Path) -> int:
    """Run ``script ROOT NAME RECORD`` for each ``(root, name)`` at once; the number of
    distinct ids the sessions got (each worker's sessions are named by its ``name``)."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(root), name, str(record)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for root, name in work
    ]
    found: dict[str, int] = {}
    for (root, _), worker in zip(work, workers, strict=True):
        out, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0
        found.update({f"{root}/{n}": uid for n, uid in json.loads(out).items()})
    assert len(found) == 25 * len(work)
    return len(set(found.values()))


def test_two_processes_with_different_roots_never_hand_out_one_id_twice(
    open_dir: Path,
) -> None:
    # Same session names under two workdir roots (two configs, two koboi processes on one
    # machine), from a range too small for the hash to keep them apart by luck: the
    # machine's record does.
    script = (
        "import json, sys\n"
        "from koboi_sandbox.options import RestrictedOptions\n"
        "from koboi_sandbox.restricted import RestrictedSandbox\n"
        "s = RestrictedSandbox(RestrictedOptions(workdir=sys.argv[1], "
        "session_ids={'first': 3_250_000_000, 'count': 60, 'record': sys.argv[3]}))\n"
        "print(json.dumps({n: s.workdir_for(n).stat().st_uid "
        "for n in [f's-{i}' for i in range(25)]}))\n"
    )
    record = open_dir / "machine" / "session-ids"
    roots = [open_dir / "one" / "wd", open_dir / "two" / "wd"]
    assert _run_workers(script, [(roots[0], "a"), (roots[1], "b")], record) == 50
    owners = [_owner(path)[0] for root in roots for path in root.iterdir()]
    assert len(owners) == len(set(owners)) == 50
    # Control: a record per root (the scheme before this one) hands two roots' sessions
    # the same ids — 6 sessions in a range of 3 — where the machine's record refuses.
    got: list[int] = []
    for name in ("three", "four"):
        root = open_dir / name / "wd"
        own = {"first": 3_260_000_000, "count": 3, "record": str(root.parent / "own-record")}
        sandbox = RestrictedSandbox(
            RestrictedOptions.model_validate({"workdir": str(root), "session_ids": own})
        )
        got += [_owner(sandbox.workdir_for(f"s-{i}"))[0] for i in range(3)]
    assert len(got) == 6 and len(set(got)) == 3, got
    machine = open_dir / "machine-2" / "session-ids"
    shared = [
        _sandbox(open_dir / n / "wd", machine, first=3_270_000_000, count=3) for n in ("v", "w")
    ]
    assert len({_owner(shared[0].workdir_for(f"s-{i}"))[0] for i in range(3)}) == 3
    with pytest.raises(SandboxError, match="no free id left"):
        shared[1].workdir_for("s-0")


def test_a_session_keeps_the_id_an_earlier_record_of_its_root_gave_it(open_dir: Path) -> None:
    root = open_dir / "wd"
    root.mkdir()
    (root / RECORD_NAME).write_text("3300000005 old\n3300000006 taken\n")
    (root / RECORD_NAME).chmod(0o600)
    # Another root's session got 3300000006 from the machine's record meanwhile.
    other = _sandbox(open_dir / "other", _record(root), first=3_300_000_006, count=1)
    assert _owner(other.workdir_for("x"))[0] == 3_300_000_006
    sandbox = _sandbox(root, first=3_300_000_000, count=10)
    assert _owner(sandbox.workdir_for("old"))[0] == 3_300_000_005
    moved = _owner(sandbox.workdir_for("taken"))[0]
    assert moved not in (3_300_000_005, 3_300_000_006), "an id went to two sessions"


def test_a_record_others_may_write_to_is_refused(open_dir: Path) -> None:
    loose = open_dir / "loose"
    loose.mkdir(mode=0o777)
    loose.chmod(0o777)
    options = RestrictedOptions.model_validate(
        {"workdir": str(open_dir / "wd"), "session_ids": {"record": str(loose / "ids")}}
    )
    with pytest.raises(SandboxError, match="no one else may write to"):
        RestrictedSandbox(options).workdir_for("a")
    with pytest.raises(ValueError, match="absolute path"):
        RestrictedOptions.model_validate({"session_ids": {"record": "ids"}})


def test_the_range_is_validated() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 65536"):
        RestrictedOptions.model_validate({"session_ids": {"first": 1000}})
    with pytest.raises(ValueError, match="largest usable id"):
        RestrictedOptions.model_validate({"session_ids": {"first": 2**32 - 10, "count": 100}})


def test_sessions_ids_pass_through_koboi_state_directory(open_dir: Path) -> None:
    # The store makes .koboi 0700; the sandbox under it opens passage (x), never listing.
    state = open_dir / ".koboi"
    state.mkdir(mode=0o700)
    _sandbox(state / "workdirs")
    assert stat.S_IMODE(state.stat().st_mode) == 0o701  # others may pass, nothing more
