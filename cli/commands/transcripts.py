"""`hermes sessions import --from claude-code|codex`: other tools' transcripts."""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from sessiondb.importers import LogImportReport, import_logs, log_files

from ..context import AppContext
from ..output import emit_json, plural, progress, table

#: skipped lines named on a terminal (--json lists every one)
SHOWN = 20


def import_logs_cmd(app: AppContext, fmt: str, paths: list[Path], dry_run: bool,
                    as_json: bool) -> None:
    """Import the transcripts; exit 1 when a line was skipped."""
    walked = any(p.is_dir() for p in paths)
    total = len(log_files(fmt, paths)) if walked else 0
    # As `sessions import`: no background indexer, the import drives the index.
    with app.open_store(create=not dry_run, background_index=False) as db, \
            ExitStack() as bars:
        def bar(n: int, label: str = "writing") -> Any:
            bars.close()  # one bar at a time: files read, rows written, index
            return bars.enter_context(progress(n, label))
        report = import_logs(db, fmt, paths, dry_run=dry_run, progress=bar(total, "reading"),
                             progress_for=bar)
    if as_json:
        emit_json(report.to_dict())
    else:
        _report(report)
    if report.skipped_lines:
        raise click.ClickException(
            f"{plural(report.skipped_lines, 'line')} could not be imported and "
            f"{'was' if report.skipped_lines == 1 else 'were'} skipped; the rest was imported")


def _report(report: LogImportReport) -> None:
    t = report.totals()
    verb = "would add" if report.dry_run else "added"
    click.echo(f"{plural(t['files'], 'file')}, {plural(t['lines'], 'line')} read.")
    table([("sessions", t["sessions_in_file"], t["sessions_created"], t["sessions_existing"]),
           ("messages", t["messages_in_file"], t["messages_added"], t["messages_skipped"])],
          ("", "in files", verb, "already present"))
    unknown: dict[str, int] = {}
    for f in report.files:
        for kind, n in f.lines.unknown_types.items():
            unknown[kind] = unknown.get(kind, 0) + n
    if unknown:
        click.echo("lines of unknown types (not imported): "
                   + ", ".join(f"{k} {n}" for k, n in sorted(unknown.items())))
    skipped = [s for f in report.files for s in f.lines.skipped]
    for s in skipped[:SHOWN]:
        click.echo(f"skipped {s['path']}:{s['line']}: {s['why']}")
    if len(skipped) > SHOWN:
        click.echo(f"... and {len(skipped) - SHOWN} more (--json lists every one)")
    if report.dry_run:
        click.echo("Dry run: nothing was written.")
