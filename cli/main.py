"""`hermes`: the top-level group, global options and error reporting."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

import sessiondb
from sessiondb import SessionDB, StorageError
from sessiondb.errors import InvalidInput


@dataclass
class AppContext:
    """What every command needs: where the store is. Resolved at call time."""

    home: Path
    profile: str | None

    def open_store(self) -> SessionDB:
        return SessionDB.open(self.home, self.profile)


class HermesGroup(click.Group):
    """Turns typed library errors into one-line errors with the right exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except InvalidInput as e:
            raise click.UsageError(str(e), ctx) from e
        except StorageError as e:
            raise click.ClickException(str(e)) from e


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from sessiondb.policy import sqlite_library_version
        click.echo(f"hermes {sessiondb.__version__} (SQLite {sqlite_library_version()})")
        ctx.exit()


@click.group(cls=HermesGroup)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), envvar="HERMES_HOME",
              help="Home directory (default: $HERMES_HOME or ~/.hermes).")
@click.option("--profile", help="Profile name; its store is <home>/profiles/NAME/state.db.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Print the hermes and SQLite versions and exit.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the libraries do.")
@click.pass_context
def cli(ctx: click.Context, home: Path | None, profile: str | None, verbose: bool) -> None:
    """hermes: session store for AI agents, and its recovery tools.

    \b
    Example:
      hermes --home ~/.hermes sessions list
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    from sessiondb.paths import resolve_home, validate_profile
    try:
        if profile is not None:
            validate_profile(profile)
    except InvalidInput as e:
        raise click.BadParameter(str(e), param_hint="--profile") from e
    ctx.obj = AppContext(home=resolve_home(home), profile=profile)


def main() -> None:
    cli(prog_name="hermes")


# Command modules register themselves on `cli`; import them last.
from . import doctor_cmd, search_cmd, sessions_cmd  # noqa: E402,F401
