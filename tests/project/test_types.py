"""The packages type-check clean under mypy with the project's [tool.mypy]
configuration (pyproject.toml): a real run, about 15 s.

mypy reads modules by the names they install under, and three folders of the
checkout install under other names (`recovery/` as `hstate_recovery`, ...):
the check runs in a directory of links that gives each folder its installed
name, so the checkout itself is what is checked, not an installed copy."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.layout import INSTALLED

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_reports_no_errors(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for folder, name in INSTALLED.items():
        (src / name).symlink_to(ROOT / folder, target_is_directory=True)
    packages = [arg for name in INSTALLED.values() for arg in ("-p", name)]
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "mypy-cache"), "--no-error-summary", *packages],
        cwd=src, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "MYPYPATH": str(src)})
    assert proc.returncode == 0, f"mypy found type errors:\n{proc.stdout}{proc.stderr}"
