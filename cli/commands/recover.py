"""`hermes sessions recover`: inspect a damaged store or recover it into a new file.

The command checks its options (usage errors exit 2 before anything is
copied), calls `hstate_recovery.inspect` or `hstate_recovery.recover`, and formats the
result. Exit codes are documented in docs/state-db-recovery.md.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from hstate_recovery import InspectReport, LANES, RecoveryReport, check_options, inspect, recover
from hstate_recovery.base import INSPECT_EXIT, Outcome, RecoveryError, RecoveryUsageError
from hstate_recovery.salvage import next_after_recover

from ..groups import HermesCommand
from ..output import emit_json, human_bytes, table
from ..phase_progress import PhaseBar


def _header_line(r: InspectReport) -> str:
    h = r.header.get("fields", {})
    if not h:
        return "header: unreadable"
    return (f"header: page size {r.header.get('page_size')}, {h.get('page_count')} pages, "
            f"{r.header.get('text_encoding_name')}, application_id {h.get('application_id')}, "
            f"schema cookie {h.get('schema_cookie')}")


def _wal_line(r: InspectReport) -> str:
    if r.wal is None:
        return "wal: none"
    w = r.wal
    return (f"wal: {w['frames']} frames, {w['valid_frames']} valid, last commit at frame "
            f"{w['last_commit_frame']}, salts {w['salt1']:#x}/{w['salt2']:#x}; "
            f"-shm {'present' if r.shm_present else 'missing'}")


def _estimate_line(est: dict[str, Any]) -> str:
    if "error" in est:
        return f"carving estimate: unavailable ({est['error']})"
    rows = ", ".join(f"{t} {n}" for t, n in sorted(est["rows"].items())) or "no rows"
    return (f"carving estimate: {rows}; {est['unattributed']} cells unattributed"
            + ("" if est["schema_readable"] else " (schema page unreadable: found by shape)"))


def _identity_line(ident: dict[str, Any]) -> str | None:
    if not ident:
        return None
    guessed = " (guessed from its pages; the schema page is lost)" if ident.get("guessed") else ""
    return f"file: {ident.get('label')}{guessed}"


def print_inspect(r: InspectReport) -> None:
    click.echo(f"source: {r.source}")
    if _identity_line(r.identification):
        click.echo(_identity_line(r.identification))
    check = r.identification.get("version_check")
    if check:
        click.echo(("warning: " if check["warns"] else "") + f"format version: {check['message']}")
    click.echo(f"verdict: {r.verdict}" + (f" (data: {r.data_verdict})"
                                          if r.data_verdict != r.verdict else ""))
    click.echo(_header_line(r))
    for problem in r.header.get("problems", []):
        click.echo(f"  header problem: {problem}")
    click.echo(_wal_line(r))
    if r.schema_error:
        click.echo(f"schema: unreadable ({r.schema_error})")
    if r.tables:
        table(((t.name, t.kind, "yes" if t.readable else "NO", t.rows) for t in r.tables),
              ("table", "kind", "readable", "rows read"))
    for f in r.fts:
        check = "integrity" if f.method == "integrity-check" else f"{f.probes} sampled probes"
        click.echo(f"fts {f.name}: {check} {'ok' if f.integrity_ok else 'FAILED'}, "
                   f"probe {'ok' if f.probe_ok else 'FAILED'}")
    if r.fts_stale:
        click.echo("fts: marked stale (fts_stale)")
    for h in r.holders:
        click.echo(f"held open by pid {h['pid']} ({h['command']}): {h['file']}")
    click.echo("free disk: " + ", ".join(f"{k} {human_bytes(v)}" for k, v in r.free_disk.items()))
    if r.carve_estimate is not None:
        click.echo(_estimate_line(r.carve_estimate))
    click.echo(r.explanation)
    click.echo(f"next: {r.next_command}" if r.next_command else "next: no command to run")


def print_recovery(r: RecoveryReport) -> None:
    click.echo(f"source: {r.source} (verdict before: {r.verdict_before or 'n/a'})")
    click.echo(f"outcome: {r.outcome}; output: {r.output or 'none written'}")
    if _identity_line(r.identification):
        click.echo(f"{_identity_line(r.identification)}; schema from: {r.schema_source}")
    for note in r.schema_notes[:10]:
        click.echo(f"schema: {note}")
    if r.lost_and_found_file:
        click.echo(f"lost and found (rows the schema rejected, finds no table claims): "
                   f"{r.lost_and_found_file}")
    rows = [(n, t.source_readable if t.source_readable is not None else "?", t.recovered,
             t.copied, t.quarantined, len(t.skipped_ranges),
             ", ".join(f"{k} {v}" for k, v in t.lanes.items()) or "-", t.from_wal)
            for n, t in r.tables.items()]
    if rows:
        table(rows, ("table", "source readable", "recovered", "copied", "quarantined",
                     "skipped ranges", "rows by lane", "carved from wal"))
    if r.lost_and_found and not r.lost_and_found_file:
        click.echo(f"lost and found (unattributed records, kept in NEW): {r.lost_and_found}")
    for h in r.inspect.get("holders", []):
        click.echo(f"warning: pid {h['pid']} ({h['command']}) holds {h['file']} open; "
                   "stop it before putting the new file in place")
    if r.placeholders:
        click.echo(f"placeholder sessions (session row lost): {len(r.placeholders)}")
    for reason in r.loss_reasons:
        click.echo(f"loss: {reason}")
    v = r.verification
    if v:
        click.echo("verification: " + ("ok" if v.get("ok") else
                                       "FAILED: " + "; ".join(v.get("findings", [])[:3])))
    if r.report_path:
        click.echo(f"report: {r.report_path}")
    step = next_after_recover(r.source, r.output, r.outcome,
                              [t["name"] for t in r.inspect.get("tables", [])])
    if step and r.outcome == Outcome.PARTIAL:
        click.echo("the output lost rows (see loss: above); if you accept that, install it")
    owner = r.identification.get("label") if r.identification.get("kind") not in (
        None, "hermes-state") else None
    if step and owner:
        click.echo(f"stop the program that owns the file ({owner}) before installing it")
    click.echo(f"next: {step}" if step else "next: no command to run")


def _inspect_phase(text: str) -> None:
    click.echo(f"inspect: {text}...", err=True)


def _run_inspect(source: Path, work_dir: Path | None, as_json: bool, full: bool) -> int:
    report = inspect(source, work_dir=work_dir, fts_full=True if full else None,
                     progress=_inspect_phase if sys.stderr.isatty() else None)
    emit_json(report.to_dict()) if as_json else print_inspect(report)
    return INSPECT_EXIT[report.verdict]


def _run_recover(source: Path, output: Path, opts: dict[str, Any], as_json: bool) -> int:
    progress = PhaseBar() if sys.stderr.isatty() else None
    try:
        report = recover(source, output, progress=progress, **opts)
    finally:
        if progress is not None:
            progress.done()
    emit_json(report.to_dict()) if as_json else print_recovery(report)
    return report.exit_code


@click.command("recover", cls=HermesCommand)
@click.option("--source", required=True, type=click.Path(path_type=Path),
              help="The damaged database file (never opened with SQLite, only copied).")
@click.option("--inspect-only", is_flag=True, help="Only describe the store and give a verdict.")
@click.option("--output", type=click.Path(path_type=Path), help="New file to recover into.")
@click.option("--report", "report_path", type=click.Path(path_type=Path),
              help="Write the JSON report here (must not exist; created 0600).")
@click.option("--work-dir", type=click.Path(path_type=Path),
              help="Directory for the private snapshot (default: the system temp dir).")
@click.option("--allow-partial", is_flag=True,
              help="Put a verified but lossy result at --output instead of NEW.partial.")
@click.option("--lane", "lanes", multiple=True, type=click.Choice(list(LANES)),
              help="Only run these copy lanes (repeatable; default: all, gentle first).")
@click.option("--include-freelist", is_flag=True,
              help="Let the carve lane bring back deleted rows from free pages (marked in "
                   "NEW's recovery_marked_rows table).")
@click.option("--template", type=click.Path(path_type=Path),
              help="When the source's schema page is lost: a healthy file (or a .sql "
                   "schema) from the same program, read only, whose schema to recover by.")
@click.option("--full", is_flag=True,
              help="With --inspect-only: FTS5's integrity-check at any size (past 128 MiB "
                   "the default samples the search index).")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
def recover_cmd(source: Path, inspect_only: bool, output: Path | None, report_path: Path | None,
                work_dir: Path | None, allow_partial: bool, lanes: tuple[str, ...],
                include_freelist: bool, template: Path | None, full: bool,
                as_json: bool) -> None:
    """Inspect a damaged store, or copy every readable row into a new verified one.

    Exit codes: 0 healthy / fully recovered, 1 runtime error, 2 usage error,
    3 damaged (inspect) or recovered with loss, 4 not recoverable,
    5 output failed verification (kept as NEW.unverified), 6 source in use
    or changing.

    \b
    Example:
      hermes sessions recover --source ~/.hermes/state.db --inspect-only
      hermes sessions recover --source ~/.hermes/state.db --output /tmp/new.db \\
          --report /tmp/recovery.json
      hermes sessions recover --source ~/.hermes/state.db --output /tmp/new.db --lane carve
      hermes sessions recover --source logs.db --output new.db --template healthy.db

    A file another program wrote (Hermes Agent, llm, the Agents SDK,
    LangGraph, any SQLite file) is recovered in its own schema.
    """
    try:
        check_options(source, output, report_path, work_dir, inspect_only, template)
        if inspect_only and (allow_partial or lanes or report_path or include_freelist
                             or template):
            raise RecoveryUsageError("--report, --allow-partial, --lane, --template and "
                                     "--include-freelist only apply with --output")
        if full and not inspect_only:
            raise RecoveryUsageError("--full only applies with --inspect-only")
        if inspect_only:
            code = _run_inspect(source, work_dir, as_json, full)
        else:
            assert output is not None
            code = _run_recover(source, output, {
                "report_path": report_path, "work_dir": work_dir,
                "allow_partial": allow_partial, "lanes": lanes or None,
                "include_freelist": include_freelist, "template": template}, as_json)
    except RecoveryUsageError as e:
        raise click.UsageError(str(e)) from e
    except RecoveryError as e:
        raise click.ClickException(str(e)) from e
    if code:
        raise SystemExit(code)
