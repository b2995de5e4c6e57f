"""`hermes demo`: the offline tour (no API key, no network)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import click

from ..context import AppContext
from ..groups import HermesCommand


@click.command(cls=HermesCommand)
@click.option("--home", "demo_home", type=click.Path(file_okay=False, path_type=Path),
              help="Run in this (new or empty) directory instead of a fresh temp home.")
@click.pass_obj
def demo(app: AppContext, demo_home: Path | None) -> None:
    """Run a scripted tour: chat, search, damage a copy, recover it, doctor.

    Uses the local scripted model on 127.0.0.1 (not a language model) and a
    fresh temporary home unless --home is given. Every step prints the
    command a user would type.

    \b
    Example:
      hermes demo
      hermes demo --home ./demo-home
    """
    from sessiondb.base import ensure_private_dir

    from ..demo import run_tour
    root = click.get_current_context().find_root().command
    home = demo_home or Path(tempfile.mkdtemp(prefix="hermes-demo-"))
    if home.exists() and any(home.iterdir()):
        raise click.UsageError(f"{home} is not empty; the demo needs a new or empty directory")
    ensure_private_dir(home)  # parents too: 0700 whatever the umask
    click.echo(f"Demo home: {home}")

    def invoke(argv: list[str]) -> int:
        try:
            code = root.main(argv, prog_name="hermes", standalone_mode=False)
        except click.ClickException as e:
            e.show()
            return e.exit_code
        except SystemExit as e:
            return int(e.code or 0)
        return code if isinstance(code, int) else 0
    run_tour(home, invoke)
