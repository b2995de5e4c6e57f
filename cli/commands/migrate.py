"""`hermes sessions migrate`: copy the home's store to or from PostgreSQL."""
from __future__ import annotations

import click

from sessiondb import SessionDB
from sessiondb.base import ensure_private_dir, store_path
from sessiondb.pg import TransferResult, count, ends, transfer_store

from ..context import AppContext
from ..groups import HermesCommand
from ..output import emit_json, progress, stderr_is_tty, table


def _report(result: TransferResult) -> None:
    rows = [(t, result.source_counts[t], result.target_counts[t]) for t in result.source_counts]
    table(rows, ("", "in source", "in target"))
    if result.resumed_after:
        click.echo(f"Resumed after source message {result.resumed_after}.")
    click.echo("Verified: every count matches." if result.verified else
               "Counts differ: run the same command again to finish the copy.")


@click.command("migrate", cls=HermesCommand)
@click.option("--to", "to_url", metavar="URL", help="Copy the home's store into this "
              "PostgreSQL database (postgresql://...).")
@click.option("--from", "from_url", metavar="URL", help="Copy this PostgreSQL database "
              "into the home's SQLite store.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@click.pass_obj
def migrate_cmd(app: AppContext, to_url: str | None, from_url: str | None,
                as_json: bool) -> None:
    """Copy every session between the home's SQLite store and PostgreSQL.

    Streams in chunks (bounded memory), keeps each message once by its uid
    (a rerun after an interruption finishes the copy without duplicates,
    resuming after the last committed chunk), never changes the source,
    and ends by counting sessions, messages, compactions and usage rows on
    both sides. The PostgreSQL schema is created or upgraded first. A
    progress bar is drawn on a terminal only. Exit 1 when counts differ.
    The SQLite side is always the home's file, whatever --store-url or
    HERMES_STORE_URL say.
    JSON summary: {"source", "target", "copied", "source_counts",
    "target_counts", "resumed_after", "verified"}.

    \b
    Example:
      hermes sessions migrate --to postgresql://hermes@db.internal/hermes
      hermes sessions migrate --from postgresql://hermes@db.internal/hermes
    """
    if bool(to_url) == bool(from_url):
        raise click.UsageError("give exactly one of --to URL or --from URL")
    url = to_url or from_url
    assert url is not None
    path = store_path(app.home, app.profile)
    if from_url and not path.exists():  # the target: the home's SQLite store, made private
        ensure_private_dir(path.parent)
        SessionDB(path).close()
    with ends(str(path), url, to_pg=bool(to_url)) as (src, dst):
        total = count(src, "messages") if stderr_is_tty() else None
        with progress(total, "migrating") as tick:
            result = transfer_store(src, dst, progress=tick)
    if as_json:
        emit_json(result.to_dict())
    else:
        _report(result)
    if not result.verified:
        raise click.ClickException("the copy is incomplete: counts differ (rerun to finish)")
