"""The packages type-check clean under mypy with the project's [tool.mypy]
configuration (pyproject.toml): a real run, about 15 s."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_reports_no_errors(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "mypy-cache"), "--no-error-summary"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy found type errors:\n{proc.stdout}{proc.stderr}"
