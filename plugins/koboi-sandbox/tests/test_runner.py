"""A child that cannot be confined as asked never runs the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from koboi.sandbox import run_capped_process
from koboi_sandbox import landlock
from koboi_sandbox.restricted import _spawner
from koboi_sandbox.runner import CONFINEMENT_FAILED, Confinement

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("pid_namespace", [False, True])
async def test_a_failed_confinement_step_stops_before_exec(
    tmp_path: Path, pid_namespace: bool
) -> None:
    marker = tmp_path / "ran.txt"
    command = ["/bin/sh", "-c", f"echo ran > {marker}"]
    control = await run_capped_process(
        command, spawn=_spawner(Confinement(pid_namespace=pid_namespace)), timeout=10
    )
    assert control.returncode == 0 and marker.exists()  # control: it runs when confinable
    marker.unlink()
    # A Landlock ruleset descriptor that does not exist: restrict_self must fail.
    broken = Confinement(
        pid_namespace=pid_namespace, landlock_fd=987654, restrict_self=landlock.restrict_self
    )
    result = await run_capped_process(command, spawn=_spawner(broken), timeout=10)
    assert result.returncode == CONFINEMENT_FAILED
    assert "koboi sandbox: could not apply Landlock" in result.stderr
    assert not marker.exists(), "the command ran without the confinement it was given"
