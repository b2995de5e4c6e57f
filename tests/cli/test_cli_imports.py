"""Every CLI module imports first, in a fresh interpreter: commands are
registered explicitly by `hstate_cli.main.register_commands`, not by import-time
side effects that only work in one import order."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Every module of the CLI, dotted under its installed name `hstate_cli`.
MODULES = sorted(".".join(p.relative_to(ROOT / "cli").with_suffix("").parts)
                 for p in (ROOT / "cli").rglob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_first(module: str) -> None:
    run = subprocess.run([sys.executable, "-c", f"import hstate_cli.{module}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_every_command_module_is_registered() -> None:
    """A command defined in a module but left out of `register_commands`
    would silently vanish from `hermes`."""
    import click

    from hstate_cli import main

    def tree(group: click.Group) -> set[int]:
        found = set()
        for cmd in group.commands.values():
            found.add(id(cmd))
            if isinstance(cmd, click.Group):
                found |= tree(cmd)
        return found

    registered = tree(main.cli)
    for name in MODULES:
        mod = sys.modules.get(f"hstate_cli.{name}") or __import__(f"hstate_cli.{name}", fromlist=["_"])
        for attr, value in vars(mod).items():
            if isinstance(value, click.Command) and value is not main.cli:
                assert id(value) in registered, f"hstate_cli.{name}.{attr} is not registered"
