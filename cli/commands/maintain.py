"""`hermes sessions prune|prune-checkpoints|archive|unarchive|pin|unpin|optimize`:
keep a store small."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import click

from hstate_recovery.base import RecoveryError
from hstate_recovery.repairs import optimize
from sessiondb import StoreFace
from sessiondb.base import InvalidInput
from sessiondb.maintenance import PruneFilter, PrunePlan, parse_age, parse_size

from ..context import AppContext
from ..groups import HermesCommand
from ..output import emit_json, human_bytes, table
from ..params import SessionId

SHOWN = 20  # sessions listed by a human prune report


def _flag_command(name: str, flag: Callable[[StoreFace, list[str]], list[str]], done: str,
                  doc: str) -> click.Command:
    @click.command(name, cls=HermesCommand, help=doc)
    @click.argument("session_ids", nargs=-1, required=True, metavar="ID...", type=SessionId())
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
    @click.pass_obj
    def command(app: AppContext, session_ids: tuple[str, ...], as_json: bool) -> None:
        with app.open_store(create=False) as db:
            ids = flag(db, list(dict.fromkeys(session_ids)))
        if as_json:
            emit_json({name: ids})
        else:
            click.echo(f"{done} {len(ids)} session(s): {', '.join(ids)}.")
    return command


pin_cmd = _flag_command(
    "pin", lambda db, ids: db.pin_sessions(ids), "Pinned",
    """Pin sessions: prune never removes them.

    Safe while other processes use the store. JSON: {"pin": [ID, ...]}.

    \b
    Example:
      hermes sessions pin 20260101_120000_ab12cd34""")
unpin_cmd = _flag_command(
    "unpin", lambda db, ids: db.unpin_sessions(ids), "Unpinned",
    """Unpin sessions.

    JSON: {"unpin": [ID, ...]}.

    \b
    Example:
      hermes sessions unpin 20260101_120000_ab12cd34""")
archive_cmd = _flag_command(
    "archive", lambda db, ids: db.archive_sessions(ids), "Archived",
    """Archive sessions: hidden from `list` and `search` (see their
    --archived-sessions/--all flags), every message kept. Safe while other
    processes use the store.

    JSON: {"archive": [ID, ...]}.

    \b
    Example:
      hermes sessions archive 20260101_120000_ab12cd34""")
unarchive_cmd = _flag_command(
    "unarchive", lambda db, ids: db.unarchive_sessions(ids), "Unarchived",
    """Unarchive sessions.

    JSON: {"unarchive": [ID, ...]}.

    \b
    Example:
      hermes sessions unarchive 20260101_120000_ab12cd34""")


def _age(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    try:
        return None if value is None else parse_age(value)
    except InvalidInput as e:
        raise click.BadParameter(str(e)) from e


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    try:
        return None if value is None else parse_size(value)
    except InvalidInput as e:
        raise click.BadParameter(str(e)) from e


def _print_plan(app: AppContext, plan: PrunePlan) -> None:
    verb = "Would prune" if plan.dry_run else "Pruned"
    count = len(plan.sessions) if plan.dry_run else plan.deleted_sessions
    messages = plan.messages if plan.dry_run else plan.deleted_messages
    click.echo(f"{verb} {count} session(s), {messages} message(s), about "
               f"{human_bytes(plan.bytes_estimate)} once optimized.")
    if plan.sessions:
        table(((s.id, s.messages, human_bytes(s.bytes)) for s in plan.sessions[:SHOWN]),
              ("session", "messages", "bytes"))
        if len(plan.sessions) > SHOWN:
            click.echo(f"... and {len(plan.sessions) - SHOWN} more (--json lists all)")
    for sid, why in list(plan.kept.items())[:SHOWN]:
        click.echo(f"kept {sid}: {why}")
    if plan.exported_to:
        click.echo(f"Exported them first to {plan.exported_to}.")
    if plan.dry_run:
        click.echo("Dry run: nothing was changed.")
    elif plan.sessions:
        click.echo("The space is free inside the file; this gives it back to the "
                   "filesystem: " + app.command("sessions", "optimize"))


@click.command("prune", cls=HermesCommand)
@click.option("--older-than", callback=_age, metavar="AGE",
              help="Last activity longer ago than AGE (90d, 12h, 2w).")
@click.option("--source", help="Only sessions from this source.")
@click.option("--ended", is_flag=True, help="Only ended sessions.")
@click.option("--never-active", is_flag=True, help="Only sessions without any message.")
@click.option("--larger-than", callback=_size, metavar="SIZE",
              help="Only sessions taking more than SIZE on disk (500K, 10M, 1G).")
@click.option("--with-children", is_flag=True,
              help="Also prune the child sessions of every selected session.")
@click.option("--export-to", type=click.Path(dir_okay=False, path_type=Path),
              help="First export the pruned sessions (JSONL) to this new file.")
@click.option("--dry-run", is_flag=True, help="Show what would go and the space it frees.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def prune_cmd(app: AppContext, older_than: float | None, source: str | None, ended: bool,
              never_active: bool, larger_than: int | None, with_children: bool,
              export_to: Path | None, dry_run: bool, as_json: bool) -> None:
    """Delete whole sessions that match every given filter.

    Pinned sessions and sessions under a live turn lease are kept; a parent
    is kept while a child of it stays (unless --with-children). Refused
    while another process holds the store. Keys: dry_run, sessions
    [{id, messages, bytes}], kept {id: reason}, messages, bytes_estimate,
    bytes_method, exported_to, deleted_sessions, deleted_messages,
    freelist_bytes_after.

    \b
    Example:
      hermes sessions prune --older-than 180d --ended --dry-run
      hermes sessions prune --older-than 180d --ended --export-to old.jsonl
    """
    if app.store_url:  # it sizes and frees the pages of a SQLite file
        raise click.ClickException("prune does not run on a PostgreSQL store (it sizes and "
                                   "frees the pages of a SQLite file); delete sessions there "
                                   "one at a time with sessions delete")
    f = PruneFilter(older_than, source, ended, never_active, larger_than, with_children)
    with app.open_store(create=False) as db:
        plan = db.prune_sessions(f, dry_run=dry_run, export_to=export_to)
    if as_json:
        emit_json(plan.to_dict())
    else:
        _print_plan(app, plan)


@click.command("prune-checkpoints", cls=HermesCommand)
@click.option("--keep", type=click.IntRange(min=1), default=1, show_default=True,
              help="Checkpoints kept per thread (and per namespace of it), newest first.")
@click.option("--session", "session_ids", multiple=True, type=SessionId(), metavar="ID",
              help="Only this thread's session (repeatable; default: every thread).")
@click.option("--dry-run", is_flag=True, help="Count what would go; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def prune_checkpoints_cmd(app: AppContext, keep: int, session_ids: tuple[str, ...],
                          dry_run: bool, as_json: bool) -> None:
    """Delete old LangGraph checkpoints, keeping the newest of each thread.

    Each thread keeps its newest --keep checkpoints (per namespace), their
    pending writes and the channel values they point at; the rest goes.
    Sessions and their transcripts stay (docs/integrations.md). Keys: keep,
    dry_run, threads, checkpoints_deleted, values_deleted, per_thread.

    \b
    Example:
      hermes sessions prune-checkpoints --dry-run
      hermes sessions prune-checkpoints --keep 5 && hermes sessions optimize
    """
    with app.open_store(create=False) as db:
        report = db.prune_checkpoints(keep=keep, session_ids=list(session_ids) or None,
                                      dry_run=dry_run)
    if as_json:
        emit_json(report.to_dict())
        return
    verb = "Would delete" if dry_run else "Deleted"
    click.echo(f"{verb} {report.checkpoints_deleted} checkpoint(s) of {report.threads} "
               f"thread(s), keeping the newest {keep} of each"
               + ("." if dry_run else f"; {report.values_deleted} unused value(s) went too."))


@click.command("optimize", cls=HermesCommand)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def optimize_cmd(app: AppContext, as_json: bool) -> None:
    """Merge the search index and give free space back (VACUUM into a verified copy).

    The copy is written and checked in a scratch directory and promoted
    over the store under its exclusive lock; never an in-place VACUUM.
    Refused while another process holds the store. Keys: db_path,
    bytes_before, bytes_after, bytes_freed, freelist_bytes_before,
    search_bytes_before, search_bytes_after, seconds, steps.

    \b
    Example:
      hermes sessions prune --older-than 180d --ended && hermes sessions optimize
    """
    if app.store_url:  # not the home's SQLite file, which optimize would look for
        raise click.ClickException("optimize rewrites a SQLite store file; the store is the "
                                   "PostgreSQL database at --store-url, whose space "
                                   "autovacuum reclaims")
    try:
        report = optimize(app.home, app.profile)
    except RecoveryError as e:
        raise click.ClickException(" ".join(str(e).split())) from e
    if as_json:
        emit_json(report.to_dict())
        return
    click.echo(f"{report.db_path}: {human_bytes(report.bytes_before)} -> "
               f"{human_bytes(report.bytes_after)} ({human_bytes(report.bytes_freed)} given back)"
               f" in {report.seconds:.1f} s.")
