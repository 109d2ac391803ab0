"""Every tool of koboi-tools-fs passes the tool contract every tool plugin must pass."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from koboi.sandbox import PassthroughSandbox
from koboi.tools import Tool, ToolContext
from koboi_testing.contracts import ToolContract
from koboi_tools_fs.tools import make_tool


class _FsContract(ToolContract):
    """The contract, run in a small working directory the valid arguments fit."""

    name: str

    @pytest.fixture
    def tool(self) -> Tool:
        return make_tool(self.name)

    @pytest.fixture
    def tool_context(self, tmp_path: Path) -> ToolContext:
        (tmp_path / "notes.txt").write_text("hello notes\n")
        (tmp_path / "victim.txt").write_text("to delete\n")
        (tmp_path / "sub").mkdir()
        return ToolContext(
            session_id="contract-session",
            call_id="contract-call-1",
            step=1,
            sandbox=PassthroughSandbox(workdir=tmp_path),
            workdir=tmp_path,
        )


class TestReadFileContract(_FsContract):
    name = "read_file"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"path": "notes.txt", "offset": 0, "limit": 10}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"path": 3}, {"path": "a", "offset": -1}, {"path": "a", "limit": 0}]


class TestWriteFileContract(_FsContract):
    name = "write_file"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"path": "sub/new.txt", "content": "hi\n"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"path": "a"}, {"path": "a", "content": 5}, {"path": None, "content": ""}]


class TestEditFileContract(_FsContract):
    name = "edit_file"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"path": "notes.txt", "old_text": "hello", "new_text": "bye"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [
            {"path": "a", "old_text": "x"},
            {"path": "a", "old_text": "x", "new_text": "y", "replace_all": "sometimes"},
        ]


class TestApplyPatchContract(_FsContract):
    name = "apply_patch"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"patch": "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-hello notes\n+bye\n"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"patch": ["-a", "+b"]}, {"diff": "x"}]


class TestListDirContract(_FsContract):
    name = "list_dir"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"path": "."}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"path": 1}, {"directory": "."}]


class TestGlobContract(_FsContract):
    name = "glob"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"pattern": "**/*.txt"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"pattern": None}, {"pattern": "*", "recursive": True}]


class TestGrepContract(_FsContract):
    name = "grep"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"pattern": "hello", "path": ".", "include": "*.txt", "ignore_case": True}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"pattern": ""}, {"pattern": "x" * 1001}, {"pattern": "a", "path": 2}]


class TestDeleteFileContract(_FsContract):
    name = "delete_file"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"path": "victim.txt"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"path": ["victim.txt"]}, {"path": "x", "empty_dir": "maybe"}]


class TestMoveFileContract(_FsContract):
    name = "move_file"

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"source": "notes.txt", "destination": "sub/notes.txt"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"source": "a"}, {"source": "a", "destination": "b", "overwrite": "yes please"}]


RISKS = {
    "read_file": ("safe", True),
    "list_dir": ("safe", True),
    "glob": ("safe", True),
    "grep": ("safe", True),
    "write_file": ("moderate", True),
    "edit_file": ("moderate", False),
    "apply_patch": ("moderate", False),
    "move_file": ("moderate", False),
    "delete_file": ("destructive", False),
}


@pytest.mark.parametrize("name", sorted(RISKS))
def test_risk_and_idempotence_are_as_documented(name: str) -> None:
    tool = make_tool(name)
    assert (tool.risk.value, tool.idempotent) == RISKS[name]
