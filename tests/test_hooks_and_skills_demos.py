"""The offline demo configs of koboi-hooks and koboi-skills run through the real command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """A copy of the demos, so their working directories land in the test's folder."""
    for name in ("hooks_demo.yaml", "skills_demo.yaml"):
        shutil.copy(ROOT / "configs" / name, tmp_path / name)
    return tmp_path


def test_the_hooks_demo_blocks_rm_rf_and_logs_the_run(koboi_command, configs: Path) -> None:
    done = koboi_command(
        "run", str(configs / "hooks_demo.yaml"), "-m", "Please clean up the build folder", "--yes"
    )
    assert done.returncode == 0, done.stderr
    assert "refused by hooks: Blocked by policy: 'rm -rf' is not allowed" in done.stdout
    assert "Checked once more: my answer stands." in done.stdout  # the Stop hook continued once
    log = configs / ".koboi" / "hooks-demo" / "hooks-demo.log"  # the run_end hook's
    assert '"hook_event_name": "SessionEnd"' in log.read_text()


def test_the_skills_demo_lists_and_activates_a_shipped_skill(koboi_command, configs: Path) -> None:
    listed = koboi_command("skills", "list", str(configs / "skills_demo.yaml"), "--json")
    assert listed.returncode == 0, listed.stderr
    assert '"hotel-receptionist"' in listed.stdout
    done = koboi_command(
        "run", str(configs / "skills_demo.yaml"), "-m", "Can I check in early at the hotel?"
    )
    assert done.returncode == 0, done.stderr
    assert "Following the hotel-receptionist skill." in done.stdout
    assert "Files of this skill (skills__read_file): references/policies.md" in done.stdout
