"""`hermes`: the top-level group, global options and error reporting."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

import sessiondb
from sessiondb import StorageError
from sessiondb.base import Cause, InvalidInput, describe_error

from .context import AppContext
from .groups import LEAF_KEY, SectionedGroup
from .terminal import escape_controls, safe_streams


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


class HermesGroup(SectionedGroup):
    """Turns typed library errors into one-line errors with the right exit code."""

    sections = {"Sessions": ("sessions", "mcp"),
                "Recovery": ("doctor", "inspect", "recover", "repair", "backup"),
                "Agent": ("chat", "demo", "memory", "skills")}

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as e:
            raise _escaped(e)

    def invoke(self, ctx: click.Context) -> Any:
        """Every command runs with filtered stdout/stderr (see `cli.terminal`);
        its error line is escaped too, since it may quote stored text or argv."""
        try:
            with safe_streams():
                return self._invoke_typed(ctx)
        except click.ClickException as e:
            raise _escaped(e)

    def _invoke_typed(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except InvalidInput as e:
            raise click.UsageError(_one_line(e), ctx.meta.get(LEAF_KEY, ctx)) from e
        except StorageError as e:
            raise click.ClickException(explain_for_cli(e, ctx.obj)) from e


def _escaped(e: click.ClickException) -> click.ClickException:
    """The same exception with control characters in its message made visible."""
    e.message = escape_controls(e.message)  # type: ignore[misc]  # click: Final, set in place
    return e


# Bad input keeps its one line; a storage failure also says what it means
# and the first command to run (from the one copy table).
_ONE_LINE_CAUSES = (Cause.NOT_FOUND, Cause.INVALID_INPUT, Cause.FOREIGN)


def explain_for_cli(err: StorageError, app: Any) -> str:
    """``err`` as the CLI prints it: its own line, then summary and next step."""
    if err.cause in _ONE_LINE_CAUSES or not err.concerns_store:
        return _one_line(err)
    home = app.home if isinstance(app, AppContext) else None
    profile = app.profile if isinstance(app, AppContext) else None
    failure = describe_error(err, home=home, profile=profile)
    lines = [_one_line(err), failure.summary]
    if failure.actions:
        lines.append(f"Next: {failure.actions[0]}")
    return "\n".join(lines)


class _CliLogHandler(logging.Handler):
    """Library warnings as the CLI prints them: ``Warning: <message>`` on the
    stderr of the moment, no logger name, and a traceback only with -v."""

    verbose = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = " ".join(record.getMessage().split())
            if self.verbose and record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            click.echo(f"{record.levelname.capitalize()}: {text}", err=True)
        except Exception:  # logging must never break a command
            self.handleError(record)


def configure_logging(verbose: bool) -> None:
    """One handler on the root logger (again and again under CliRunner)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, _CliLogHandler)), None)
    if handler is None:
        handler = _CliLogHandler()
        root.addHandler(handler)
    handler.verbose = verbose
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    # psycopg's pool warns at each failed connection attempt (four lines of
    # the server's text before the command's own error); the command reports
    # the failure once, typed, with what to do. --verbose shows them.
    logging.getLogger("psycopg.pool").setLevel(logging.INFO if verbose else logging.ERROR)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from sessiondb.base import sqlite_library_version
        click.echo(f"hermes {sessiondb.__version__} (SQLite {sqlite_library_version()})")
        ctx.exit()


@click.group(cls=HermesGroup)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), envvar="HERMES_HOME",
              help="Home directory (default: $HERMES_HOME or ~/.hermes).")
@click.option("--profile", help="Profile name; its store is <home>/profiles/NAME/state.db.")
@click.option("--store-url", envvar="HERMES_STORE_URL", metavar="URL",
              help="A PostgreSQL store (postgresql://...) instead of the home's SQLite "
                   "file; needs the postgres extra. Default: $HERMES_STORE_URL.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Print the hermes and SQLite versions and exit.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the libraries do.")
@click.pass_context
def cli(ctx: click.Context, home: Path | None, profile: str | None, store_url: str | None,
        verbose: bool) -> None:
    """hermes: session store for AI agents, and its recovery tools.

    Session commands (list, show, search, stats, export, import, rename,
    delete) live under `hermes sessions`. Errors print one "Error:" line;
    exit status 1 means the command failed, 2 that it was called wrongly.
    Full reference: docs/cli.md.

    \b
    Example:
      hermes --home ~/.hermes sessions list
    """
    configure_logging(verbose)
    from sessiondb.base import resolve_home, validate_profile
    try:
        if profile is not None:
            validate_profile(profile)
    except InvalidInput as e:
        raise click.BadParameter(str(e), param_hint="--profile") from e
    if store_url is not None and not store_url.startswith(("postgresql://", "postgres://")):
        raise click.BadParameter("must start with postgresql://", param_hint="--store-url")
    ctx.obj = AppContext(home=resolve_home(home), profile=profile, store_url=store_url or None)


def main() -> None:
    cli(prog_name="hermes")


def register_commands(root: click.Group) -> None:
    """Every command, added by name. Command modules never import this one
    (they take `AppContext` from `context`), so any of them imports first."""
    from .commands import (backup as backup_cmd, chat as chat_cmd, demo as demo_cmd,
                           doctor as doctor_cmd, install as install_cmd, maintain as maintain_cmd,
                           mcp as mcp_cmd, memory as memory_cmd, migrate as migrate_cmd,
                           recover as recover_cmd, repair as repair_cmd, search as search_cmd,
                           sessions as sessions_cmd, spool as spool_cmd,
                           transfer as transfer_cmd)
    command: click.Command
    for command in (sessions_cmd.sessions, doctor_cmd.doctor, chat_cmd.chat, demo_cmd.demo,
                    memory_cmd.memory, memory_cmd.skills, mcp_cmd.mcp, backup_cmd.backup):
        root.add_command(command)
    for command in (search_cmd.search_cmd, search_cmd.reindex_cmd, transfer_cmd.export_cmd,
                    transfer_cmd.import_cmd, maintain_cmd.prune_cmd,
                    maintain_cmd.prune_checkpoints_cmd, maintain_cmd.optimize_cmd,
                    maintain_cmd.pin_cmd, maintain_cmd.unpin_cmd, maintain_cmd.archive_cmd,
                    maintain_cmd.unarchive_cmd, repair_cmd.repair_cmd, spool_cmd.import_spool_cmd,
                    recover_cmd.recover_cmd, install_cmd.install_recovered_cmd,
                    migrate_cmd.migrate_cmd):
        sessions_cmd.sessions.add_command(command)


register_commands(cli)
