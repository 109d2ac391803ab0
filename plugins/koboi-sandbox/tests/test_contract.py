"""The restricted sandbox passes the contract every sandbox must pass, at each level."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from koboi_sandbox.restricted import SHARED_SESSION, RestrictedSandbox
from koboi_testing.contracts import SandboxContract


class TestRestrictedContract(SandboxContract):
    @pytest.fixture
    def sandbox(self, make_sandbox: Callable[..., RestrictedSandbox]) -> RestrictedSandbox:
        return make_sandbox()

    @pytest.fixture
    def sandbox_workdir(self, sandbox: RestrictedSandbox) -> Path:
        return sandbox.workdir_for(SHARED_SESSION)


@pytest.mark.hard
class TestHardContract(SandboxContract):
    @pytest.fixture
    def sandbox(self, make_sandbox: Callable[..., RestrictedSandbox]) -> RestrictedSandbox:
        return make_sandbox(isolation="hard")

    @pytest.fixture
    def sandbox_workdir(self, sandbox: RestrictedSandbox) -> Path:
        return sandbox.workdir_for(SHARED_SESSION)
