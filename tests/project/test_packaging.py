"""The wheel a user installs: its own import names (never one of Hermes
Agent's), `py.typed` markers, every package of the checkout, the `hermes`
and `hermes-state` scripts, and a CLI that runs from the wheel alone."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.helpers.layout import INSTALLED

ROOT = Path(__file__).resolve().parents[2]
#: The Hermes Agent release the coexistence test installs beside ours.
HERMES_AGENT = "hermes-agent==0.19.0"


def build_wheel(out: Path, src_parent: Path) -> Path:
    """One wheel built from a copy of the checkout, as `pip install .` builds
    it: setuptools leaves build/ and *.egg-info in the tree it builds, and a
    test never writes into the checkout."""
    src = src_parent / "hermes-state"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in INSTALLED:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "-w", str(out), str(src)], capture_output=True, text=True,
                         cwd=out, timeout=300)
    assert run.returncode == 0, run.stderr
    (whl,) = out.glob("hermes_state-*.whl")
    return whl


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("src"))


def top_names(whl: Path) -> set[str]:
    return {n.split("/")[0] for n in zipfile.ZipFile(whl).namelist()
            if not n.split("/")[0].endswith((".dist-info", ".data"))}


def test_wheel_installs_each_folder_under_its_own_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert top_names(wheel) == set(INSTALLED.values())
    for folder, top in INSTALLED.items():
        shipped = {n.split("/", 1)[1] for n in names if n.startswith(f"{top}/")}
        in_checkout = {p.relative_to(ROOT / folder).as_posix()
                       for p in (ROOT / folder).rglob("*.py")}
        assert in_checkout <= shipped, f"{folder}/ files missing from the wheel: " \
            f"{sorted(in_checkout - shipped)}"
        assert f"{top}/py.typed" in names


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join((INSTALLED[folder],) + init.parent.relative_to(ROOT / folder).parts)
             for folder in INSTALLED for init in (ROOT / folder).rglob("__init__.py")}
    assert listed == found


def test_both_scripts_point_at_the_same_entry(wheel: Path) -> None:
    z = zipfile.ZipFile(wheel)
    (ep,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
    lines = [ln.replace(" ", "") for ln in z.read(ep).decode().splitlines()]
    assert "hermes=hstate_cli.main:main" in lines
    assert "hermes-state=hstate_cli.main:main" in lines


def test_wheel_runs_hermes_from_its_own_files(wheel: Path, tmp_path: Path) -> None:
    """The script's target imported from the wheel (a pure wheel is importable
    as a zip), outside the checkout, so no folder of the checkout answers."""
    code = ("import sys, hstate_cli.main as m\n"
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


def test_hermes_state_is_the_same_command_as_hermes() -> None:
    scripts = Path(sys.executable).parent
    if not (scripts / "hermes-state").exists():
        pytest.skip("this interpreter has no installed hermes-state script "
                    "(the suite runs from an install: pip install '.[test]')")
    outs = [subprocess.run([str(scripts / name), "--version"], capture_output=True,
                           text=True, timeout=60) for name in ("hermes", "hermes-state")]
    assert [o.returncode for o in outs] == [0, 0], [o.stderr for o in outs]
    assert outs[0].stdout == outs[1].stdout and outs[0].stdout.startswith("hermes ")


def test_modules_import_their_own_folder_relatively() -> None:
    """A folder's modules never name their own installed package: a folder
    reached under another name (a checkout, a vendored copy) still works, and
    no module names a folder of the checkout (`recovery`, `agent`, `cli`),
    which is not what gets installed."""
    bad = []
    for folder, top in INSTALLED.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                         and node.module else [])
                for name in names:
                    first = name.split(".")[0]
                    if first == top and top != "sessiondb" or \
                            first in ("recovery", "agent", "cli", "hermes_cli") or \
                            first == "sessiondb" and folder == "sessiondb":
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert bad == []


@pytest.fixture(scope="module")
def hermes_agent_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Hermes Agent's own wheel from the package registry (no dependencies)."""
    out = tmp_path_factory.mktemp("hermes-agent")
    run = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                          "--only-binary", ":all:", "-d", str(out), HERMES_AGENT],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        pytest.skip(f"the package registry is not reachable from this machine: "
                    f"{run.stderr.strip().splitlines()[-1:]}")
    (whl,) = out.glob("hermes_agent-*.whl")
    return whl


def test_no_file_is_claimed_by_both_wheels(wheel: Path, hermes_agent_wheel: Path) -> None:
    """Installing both into one environment overwrites nothing of either."""
    def files(whl: Path) -> set[str]:
        return {n for n in zipfile.ZipFile(whl).namelist()
                if not n.split("/")[0].endswith((".dist-info", ".data"))}

    theirs = files(hermes_agent_wheel)
    assert {"agent/__init__.py", "hermes_cli/main.py"} <= theirs  # the real wheel
    assert files(wheel) & theirs == set()
    assert top_names(wheel) & top_names(hermes_agent_wheel) == set()


def test_both_install_into_one_target_and_each_imports_its_own(
        wheel: Path, hermes_agent_wheel: Path, tmp_path: Path) -> None:
    """Hermes Agent first, then ours, into one site directory: Hermes Agent's
    `agent` and `hermes_cli` are still its own, and ours import beside them."""
    target = tmp_path / "site"
    for whl in (hermes_agent_wheel, wheel):
        run = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                              "--no-compile", "--target", str(target), str(whl)],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
    code = ("import importlib.util as u, hstate_cli.main, sessiondb, hstate_recovery, "
            "hstate_agent\n"
            "for name in ('agent', 'hermes_cli'):\n"
            "    print(name, u.find_spec(name).origin)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)},
                         timeout=120)
    assert run.returncode == 0, run.stderr
    origins = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    for name in ("agent", "hermes_cli"):
        origin = Path(origins[name])
        assert origin.parent == target / name
        # the file is Hermes Agent's own, byte for byte
        assert origin.read_bytes() == zipfile.ZipFile(hermes_agent_wheel).read(
            f"{name}/__init__.py")
