"""The crash → resume benchmark under the name koboi-agent's README gives it:
``python benchmarks/crash_recovery/run.py`` runs ``bench_crash.py`` (same options,
``--help`` lists them)."""

from __future__ import annotations

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).with_name("bench_crash.py")), run_name="__main__")
