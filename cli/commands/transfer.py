"""`hermes sessions export` and `hermes sessions import`."""
from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from sessiondb import StoreFace
from sessiondb.importers import (ImportResult, LOG_FORMATS, import_export_file,
                                 import_hermes_agent, import_llm_logs)
from sessiondb.maintenance import FORMATS

from ..context import AppContext
from ..groups import HermesCommand
from ..output import emit_json, plural, progress, stderr_is_tty, table
from ..params import SessionId
from .transcripts import import_logs_cmd


def _check_export_args(ids: tuple[str, ...], all_: bool, output: Path | None, force: bool,
                       as_json: bool) -> None:
    """Usage errors (exit 2), raised before anything is opened."""
    if bool(ids) == all_:
        raise click.UsageError("name one or more session IDs, or pass --all (not both)")
    if output is None and (force or as_json):
        raise click.UsageError(f"{'--force' if force else '--json'} needs --output "
                               "(without it the export itself goes to stdout)")
    if output == STDOUT and as_json:
        raise click.UsageError("--json cannot share stdout with the export (-o -)")


STDOUT = Path("-")


@click.command("export", cls=HermesCommand)
@click.argument("session_ids", nargs=-1, metavar="[ID]...", type=SessionId())
@click.option("--all", "all_", is_flag=True, help="Export every session, oldest first.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl",
              show_default=True, help="jsonl can be imported again; markdown is for reading.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              help="Write to this new file (0600) instead of stdout; '-' is stdout.")
@click.option("--force", is_flag=True, help="Replace --output if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (with --output).")
@click.pass_obj
def export_cmd(app: AppContext, session_ids: tuple[str, ...], all_: bool, fmt: str,
               output: Path | None, force: bool, as_json: bool) -> None:
    """Export sessions and all their messages, streaming.

    Archived and rewound messages are included, so an import reproduces
    the sessions exactly.

    Without --output (or with -o -) the export goes to stdout. An existing
    --output is never replaced unless --force is given, and --force
    replaces only a regular file (never a device, FIFO, socket, directory
    or symlink); the file appears only once it is complete. A session named
    twice is exported once. JSON summary: {"format", "sessions",
    "messages", "output"}.

    \b
    Example:
      hermes sessions export --all --format jsonl -o backup.jsonl
      hermes sessions export 20260101_120000_ab12cd34 --format markdown
    """
    _check_export_args(session_ids, all_, output, force, as_json)
    ids = list(dict.fromkeys(session_ids)) if session_ids else None  # each session once
    with app.open_store(create=False) as db, ExitStack() as stack:
        total = db.count_messages(ids) if stderr_is_tty() else None
        tick = stack.enter_context(progress(total, "exporting"))
        if output is None or output == STDOUT:
            _export_to_stdout(db, ids, fmt, tick)
            return
        summary = db.export_to_path(ids, fmt, output, force=force, progress=tick)
    if as_json:
        emit_json(summary.to_dict())
    else:
        click.echo(f"Exported {plural(summary.sessions, 'session')} "
                   f"({plural(summary.messages, 'message')}) to {summary.output}.")


def _export_to_stdout(db: StoreFace, ids: list[str] | None, fmt: str, tick: Any) -> None:
    try:
        db.export_sessions(ids, fmt, sys.stdout, progress=tick)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`). Point stdout at /dev/null so the
        # interpreter's final flush does not fail a second time, then say so.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise click.ClickException("stdout was closed before the export finished") from None


def _report(result: ImportResult) -> None:
    verb = "would add" if result.dry_run else "added"
    rows = [("sessions", result.sessions_in_file, result.sessions_created,
             result.sessions_existing),
            ("messages", result.messages_in_file, result.messages_added,
             result.messages_skipped)]
    if result.usage_rows_in_file:
        rows.append(("usage rows", result.usage_rows_in_file, result.usage_rows_added,
                     result.usage_rows_in_file - result.usage_rows_added))
    for table_name, n in result.graph_rows_in_file.items():  # LangGraph's rows
        added = result.graph_rows_added.get(table_name, 0)
        rows.append((table_name.replace("_", " "), n, added, n - added))
    table(rows, ("", "in file", verb, "already present"))
    if result.tables:
        click.echo("rows in the source: " + ", ".join(f"{t} {n}" for t, n in
                                                     result.tables.items()))
    for left in result.not_carried:
        rows_text = "" if left["rows"] is None else f" ({left['rows']} rows)"
        click.echo(f"not carried over: {left['table']}{rows_text}: {left['why']}")
    if result.dry_run:
        click.echo("Dry run: nothing was written.")


_IMPORTERS = {"hermes": import_export_file, "hermes-agent": import_hermes_agent,
              "llm": import_llm_logs}


@click.command("import", cls=HermesCommand)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...",
                type=click.Path(path_type=Path))
@click.option("--from", "source", type=click.Choice(sorted([*_IMPORTERS, *LOG_FORMATS])),
              default="hermes", show_default=True,
              help="hermes: a JSONL file from `sessions export`; hermes-agent: Hermes "
                   "Agent's state.db; llm: llm's logs.db; claude-code, codex: those tools' "
                   "transcripts (files, or directories to walk).")
@click.option("--dry-run", is_flag=True, help="Check the file and count; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def import_cmd(app: AppContext, paths: tuple[Path, ...], source: str, dry_run: bool,
               as_json: bool) -> None:
    """Import sessions; messages already present (same uid) are skipped.

    The whole file is checked before anything is written, so a malformed or
    truncated file changes nothing. Re-importing the same file adds nothing.
    SQLite sources (hermes-agent, llm) are read through a private copy,
    never opened in place. JSON keys: source_format, path, dry_run,
    sessions_in_file, sessions_created, sessions_existing, messages_in_file,
    messages_added, messages_skipped, search_index, index_backlog,
    usage_rows_in_file, usage_rows_added, graph_rows_in_file, graph_rows_added
    (LangGraph rows per table), tables, not_carried.

    Claude Code and Codex transcripts (--from claude-code, --from codex)
    take several files and directories (~/.claude/projects,
    ~/.codex/sessions). A line that is not JSON or not a known shape is
    named (file and line) and skipped, the rest of its file imported, and
    the command exits 1; JSON: {"source_format", "dry_run", "totals",
    "files": [per-file counts, "skipped", "not_messages", "unknown_types"]}.

    \b
    Example:
      hermes --home ~/new-home sessions import backup.jsonl --dry-run
      hermes sessions import --from llm ~/.config/io.datasette.llm/logs.db
      hermes --home ~/.hermes-state sessions import --from hermes-agent ~/.hermes/state.db
      hermes sessions import --from claude-code ~/.claude/projects
      hermes sessions import --from codex ~/.codex/sessions --json
    """
    if source in LOG_FORMATS:
        return import_logs_cmd(app, source, list(paths), dry_run, as_json)
    if len(paths) != 1 or paths[0].is_dir():
        raise click.UsageError(f"--from {source} imports one file")
    run = _IMPORTERS[source]
    # No background indexer: the import drives the index itself once its rows
    # are in (sessiondb/importers/import_index.py), instead of a thread interleaving batches.
    with app.open_store(create=not dry_run, background_index=False) as db, \
            ExitStack() as bars:
        def bar(total: int, label: str = "importing") -> Any:
            bars.close()  # one bar at a time: the rows', then the index's
            return bars.enter_context(progress(total, label))
        result = run(db, paths[0], dry_run=dry_run, progress_for=bar)
    if as_json:
        emit_json(result.to_dict())
    else:
        _report(result)
