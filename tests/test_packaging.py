"""The wheel a user installs: the CLI under `hermes_cli`, no top-level `cli`,
`py.typed` markers, and a `hermes` script that runs from the wheel alone."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"sessiondb", "recovery", "agent", "hermes_cli"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel built from the checkout, as `pip install .` builds it (~4 s)."""
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools leaves build/ and *.egg-info in the tree
    # it builds, and a test never writes into the checkout.
    src = tmp_path_factory.mktemp("src") / "hermes-state"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("sessiondb", "recovery", "agent", "cli"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "-w", str(out), str(src)], capture_output=True, text=True,
                         cwd=out, timeout=300)
    assert run.returncode == 0, run.stderr
    (whl,) = out.glob("hermes_state-*.whl")
    return whl


def test_wheel_installs_cli_as_hermes_cli_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == PACKAGES
    shipped = {n.split("/", 1)[1] for n in names if n.startswith("hermes_cli/")}
    assert {p.name for p in (ROOT / "cli").glob("*.py")} <= shipped
    for pkg in PACKAGES:
        assert f"{pkg}/py.typed" in names


def test_wheel_script_points_at_hermes_cli(wheel: Path) -> None:
    z = zipfile.ZipFile(wheel)
    (ep,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
    lines = [ln.replace(" ", "") for ln in z.read(ep).decode().splitlines()]
    assert "hermes=hermes_cli.main:main" in lines


def test_wheel_runs_hermes_from_its_own_files(wheel: Path, tmp_path: Path) -> None:
    """The script's target imported from the wheel (a pure wheel is importable
    as a zip), outside the checkout: relative imports work under the new name."""
    code = ("import sys, hermes_cli.main as m\n"
            "print(m.__file__)\n"
            "sys.argv = ['hermes', 'demo', '--help']\n"
            "m.main()\n")
    env = {**os.environ, "PYTHONPATH": str(wheel)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    first, rest = run.stdout.split("\n", 1)
    assert first.startswith(str(wheel))
    assert "Usage: hermes demo" in rest


def test_cli_modules_import_each_other_relatively() -> None:
    """An absolute `cli.x` import would break the installed `hermes_cli`."""
    bad = []
    for path in sorted((ROOT / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                bad += [f"{path.name}: import {a.name}" for a in node.names
                        if a.name.split(".")[0] in ("cli", "hermes_cli")]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] in ("cli", "hermes_cli"):
                    bad.append(f"{path.name}: from {node.module}")
    assert bad == []
