"""probe() agrees with the kernel, checked here by independent means, and changes nothing."""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import os
import platform
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from koboi_sandbox import probe as probe_module
from koboi_sandbox.probe import Capabilities, probe
from koboi_sandbox.seccomp_filter import available

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="probes Linux kernel features")
PROTECTIONS = [
    "seccomp filter",
    "Landlock",
    "user namespaces",
    "PID namespaces",
    "unprivileged user",
    "no_new_privs",
]


def kernel_landlock_abi() -> int:
    """landlock_create_ruleset(NULL, 0, VERSION), called here without the module under test."""
    if platform.machine().lower() not in {"x86_64", "amd64", "aarch64", "arm64"}:
        pytest.skip("no Landlock syscall number known for this architecture")
    syscall = ctypes.CDLL(None, use_errno=True)["syscall"]
    syscall.argtypes = (ctypes.c_long,) * 4
    syscall.restype = ctypes.c_long
    return max(int(syscall(444, 0, 0, 1)), 0)


def unshare_works(*flags: str) -> bool:
    """util-linux ``unshare`` as the second opinion on namespaces."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    return (
        subprocess.run(["unshare", *flags, "true"], capture_output=True, check=False).returncode
        == 0
    )


def process_state() -> dict[str, str]:
    """What probing must not change: this process's namespaces and NO_NEW_PRIVS."""
    state = {
        name: os.readlink(f"/proc/self/ns/{name}") for name in ("user", "pid", "pid_for_children")
    }
    status = Path("/proc/self/status").read_text()
    state["NoNewPrivs"] = next(
        line for line in status.splitlines() if line.startswith("NoNewPrivs:")
    )
    return state


def test_probe_is_cached() -> None:
    assert probe() is probe()


def test_identity_facts() -> None:
    caps = probe()
    assert caps.platform == sys.platform
    assert caps.root is (os.geteuid() == 0)
    try:
        nobody = pwd.getpwnam("nobody")
        expected = (nobody.pw_uid, nobody.pw_gid)
    except KeyError:
        expected = (65534, 65534)
    assert (caps.unprivileged_uid, caps.unprivileged_gid) == expected


@linux_only
def test_seccomp_matches_the_kernel() -> None:
    caps = probe()
    assert (caps.seccomp, caps.seccomp_reason) == available()
    status = Path("/proc/self/status").read_text()
    if "Seccomp_filters:" in status and importlib.util.find_spec("pyseccomp") is not None:
        assert caps.seccomp, caps.seccomp_reason


@linux_only
def test_landlock_matches_the_kernel() -> None:
    caps = probe()
    assert caps.landlock_abi == kernel_landlock_abi()
    assert (caps.landlock_abi >= 1) == caps.landlock_reason.startswith("Landlock ABI")


@linux_only
def test_namespaces_match_unshare() -> None:
    caps = probe()
    assert caps.user_namespaces == unshare_works("--user")
    pid_flags = ("--pid", "--fork") if caps.root else ("--user", "--pid", "--fork")
    assert caps.pid_namespaces == unshare_works(*pid_flags)


@linux_only
def test_no_new_privs_is_supported() -> None:
    assert probe().no_new_privs is ("NoNewPrivs:" in Path("/proc/self/status").read_text())


@linux_only
def test_probing_changes_nothing_in_the_calling_process() -> None:
    before = process_state()
    fresh = probe.__wrapped__()  # uncached: really fork and unshare again
    assert fresh == probe()
    assert process_state() == before


@linux_only
def test_this_machine_offers_hard_isolation() -> None:
    """The facts the sandbox's own tests rely on, where the kernel says they hold."""
    caps = probe()
    if kernel_landlock_abi() >= 1:
        assert caps.landlock_abi >= 1
    if os.geteuid() == 0 and unshare_works("--pid", "--fork"):
        assert caps.root and caps.pid_namespaces
    if "Seccomp_filters:" in Path("/proc/self/status").read_text():
        assert caps.seccomp


def test_rows_have_one_line_per_protection() -> None:
    caps = probe()
    rows = caps.rows()
    assert [name for name, _, _ in rows] == PROTECTIONS
    assert all(isinstance(ok, bool) and detail for _, ok, detail in rows)
    available_by_name = {name: ok for name, ok, _ in rows}
    assert available_by_name["seccomp filter"] == caps.seccomp
    assert available_by_name["Landlock"] == (caps.landlock_abi > 0)
    assert available_by_name["PID namespaces"] == caps.pid_namespaces
    if caps.landlock_abi:
        assert f"ABI {caps.landlock_abi}" in {n: d for n, _, d in rows}["Landlock"]


def test_rows_explain_what_is_missing() -> None:
    bare = Capabilities(
        platform="linux",
        seccomp=False,
        seccomp_reason="install libseccomp2",
        landlock_abi=0,
        landlock_reason="Landlock is disabled",
        user_namespaces=False,
        pid_namespaces=False,
        root=False,
        unprivileged_uid=65534,
        unprivileged_gid=65534,
        no_new_privs=False,
    )
    rows = {name: (ok, detail) for name, ok, detail in bare.rows()}
    assert not any(ok for ok, _ in rows.values())
    assert rows["seccomp filter"][1] == "install libseccomp2"
    assert rows["Landlock"][1] == "Landlock is disabled"
    assert "needs root" in rows["unprivileged user"][1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        bare.root = True  # type: ignore[misc]


def test_without_a_nobody_user_the_ids_fall_back_to_65534(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_user(name: str) -> pwd.struct_passwd:
        raise KeyError(name)

    monkeypatch.setattr(pwd, "getpwnam", no_such_user)
    assert probe_module._unprivileged_ids() == (65534, 65534)
