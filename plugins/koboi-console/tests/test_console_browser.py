"""The console in a real headless browser: Debian's Chromium, driven by Playwright through
its executable (no browser download), against a real ``koboi serve`` process on 127.0.0.1
with the scripted model. Log in, queue a job, watch its run stream, approve the pending
call from the live view, see the job finish; no content-security-policy violation on the
way. A screenshot of each page goes to the test's temp dir (and to
``$KOBOI_CONSOLE_SHOTS`` when it is set)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from console_support import make_key, write_config

# A koboi serve process and a browser: slow to start on a loaded 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(300)]

#: The machine's Chromium (apt-get install chromium): the wrapper script, or the binary.
CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser")


def _chromium() -> str:
    found = os.environ.get("KOBOI_CHROMIUM") or next(
        (c for c in CANDIDATES if os.access(c, os.X_OK)), None
    )
    if found is None:
        message = "no Chromium on this machine: apt-get install -y chromium chromium-driver"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


SERVER = """
    server:
      keepalive_seconds: 1
      poll_seconds: 0.1
      job_poll_seconds: 0.1
"""


@pytest.fixture
def koboi_serve(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``koboi serve`` in a process of its own; its base URL and alice's key."""
    config = write_config(tmp_path, extra=SERVER)
    key = make_key(config, "alice")
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "KOBOI_DEMO_STEP_SECONDS": "0"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "koboi_cli", "serve", str(config), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp_path,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90  # a loaded 2-core machine starts it slowly
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield base, key
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hang is a failure
            proc.kill()
            proc.wait(10)
            raise


def test_log_in_watch_a_run_approve_and_see_the_job_finish(
    koboi_serve: tuple[str, str], tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    base, key = koboi_serve
    executable = _chromium()
    shots = tmp_path / "shots"
    shots.mkdir()
    violations: list[str] = []
    errors: list[str] = []

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on(
                "console",
                lambda m: (
                    violations.append(m.text)
                    if "Content Security Policy" in m.text or "Refused to" in m.text
                    else None
                ),
            )
            page.on("pageerror", lambda e: errors.append(str(e)))

            # Log in: the console sends an anonymous visitor to its login page.
            page.goto(f"{base}/console/sessions")
            expect(page).to_have_url(f"{base}/console/login?next=/console/sessions&why=login")
            page.screenshot(path=str(shots / "01-login.png"), full_page=True)
            page.fill("#key", key)
            page.click("#login-form button[type=submit]")
            expect(page).to_have_url(f"{base}/console/sessions")
            expect(page.locator(".who")).to_have_text("alice")

            # Queue a job whose tool call needs approval, and watch its run live.
            page.click("header nav >> text=Jobs")
            page.fill("#job-input", "log from-the-browser")
            page.click("#new-job button[type=submit]")
            expect(page).to_have_url(re.compile(r".*/console/jobs/job_[0-9a-f]+$"))
            job_url = page.url
            pending = page.locator("#events .event-pending_approval")
            expect(pending).to_have_count(1, timeout=20_000)
            expect(pending).to_contain_text("append_log")
            expect(pending).to_contain_text('"line": "from-the-browser"')
            expect(page.locator("#events .event-run_started")).to_contain_text(
                "log from-the-browser"
            )
            expect(page.locator("#live-state")).to_have_text("live")
            expect(page.locator("#job-status")).to_have_text("awaiting_approval", timeout=10_000)
            page.screenshot(path=str(shots / "02-job-awaiting-approval.png"), full_page=True)

            # Approve it from the live view: the form posts (with the CSRF token) and the
            # page comes back to follow the run to its end.
            pending.locator("button.approve").click()
            page.wait_for_url(job_url)
            expect(page.locator("#events .event-final")).to_contain_text(
                "logged: appended from-the-browser", timeout=20_000
            )
            expect(page.locator("#events .event-approval_decided")).to_contain_text("approved")
            expect(page.locator("#job-status")).to_have_text("completed", timeout=20_000)
            expect(page.locator("#live-state")).to_have_text("finished: completed")
            page.screenshot(path=str(shots / "03-job-completed.png"), full_page=True)

            # The job's session: its approvals (decided) and the replayed stream.
            page.click("dl.summary >> a.mono")
            expect(page.locator("#approvals .approval-approved")).to_have_count(1)
            expect(page.locator("#events .event-final")).to_have_count(1, timeout=10_000)
            page.screenshot(path=str(shots / "04-session.png"), full_page=True)

            page.click("#audit-link")
            expect(page.locator("#audit")).to_contain_text("append_log")
            page.screenshot(path=str(shots / "05-audit.png"), full_page=True)

            page.click("header nav >> text=Sessions")
            expect(page.locator("#sessions tbody tr")).to_have_count(1)
            page.screenshot(path=str(shots / "06-sessions.png"), full_page=True)
            page.click("header nav >> text=Jobs")
            expect(page.locator("#jobs tbody tr")).to_have_count(1)
            expect(page.locator("#jobs .status-completed")).to_have_count(1)
            page.screenshot(path=str(shots / "07-jobs.png"), full_page=True)

            # Log out: the console asks for a key again.
            page.click("form.logout button")
            expect(page).to_have_url(f"{base}/console/login")
            page.goto(f"{base}/console/jobs")
            expect(page).to_have_url(f"{base}/console/login?next=/console/jobs&why=login")
        finally:
            browser.close()

    assert violations == []
    assert errors == []
    taken = sorted(p.name for p in shots.iterdir())
    assert len(taken) == 7 and all((shots / n).stat().st_size > 5_000 for n in taken)
    keep = os.environ.get("KOBOI_CONSOLE_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for name in taken:
            shutil.copy(shots / name, Path(keep) / name)
    print(f"screenshots: {shots}")
