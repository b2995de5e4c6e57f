"""`recover`: copy every readable row of a damaged store into a new, verified one.

Order of work: check the options (before any I/O), snapshot the bundle,
inspect the copy, run the lanes gentle to forceful with every batch of rows
going straight into the new file at a temporary name (`hstate_recovery.output.sink`:
memory holds a batch, never a table), complete that file (indexes and
search built once), verify it, then put it in place without
ever overwriting anything: ``NEW`` when verified and nothing was lost (or
loss was accepted), ``NEW.partial`` when verified with loss, and
``NEW.unverified`` when verification failed. The report says which.
"""
from __future__ import annotations

import copy
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import apsw

from sessiondb.recovery_api import SIDECARS, fsync_dir

from ..base import (Outcome, OutputUnreadable, RecoveryError, RecoveryIOError, RecoveryReport,
                    RecoveryUsageError, SourceChanging, SourceMissing, TableReport, Verdict,
                    write_json_exclusive)
from ..inspection import InspectReport, fallback_catalog, inspect_snapshot, open_copy
from ..lanes import (Budget, DEFAULT_BUDGET, DEFAULT_CHUNK, EVERYTHING, ImageRows, LANES, LOST,
                     LaneContext, LaneResult, Progress, TableState, subtract_rowids)
from ..output import LOST_SUFFIX, RowSink, StoreSink, WriteStats, fill_search, search_reuse
from ..schema import Catalog, PARTIAL_KEY, ROWID_KEY
from ..source import DEFAULT_HEADROOM, Snapshot, source_bytes, take_snapshot
from . import page_copy, recover_foreign
from .early_check import QuickCheck, Unsound, forget_lanes, settle
from .verify import Verification, verify_output

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"
UNVERIFIED_SUFFIX = ".unverified"


def output_names(output: Path) -> list[Path]:
    """Every path recover may create for ``output``; none may exist beforehand."""
    base = [output, Path(f"{output}{PARTIAL_SUFFIX}"), Path(f"{output}{UNVERIFIED_SUFFIX}")]
    base += [Path(f"{p}{LOST_SUFFIX}") for p in list(base)]
    return base + [Path(f"{output}{s}") for s in SIDECARS]


def _same(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_options(source: Path, output: Path | None, report: Path | None = None,
                  work_dir: Path | None = None, inspect_only: bool = False,
                  template: Path | None = None) -> None:
    """Refuse impossible or unsafe options before anything is read or copied."""
    if template is not None and not template.is_file():
        raise RecoveryUsageError(f"template {template} does not exist or is not a file")
    if template is not None and _same(template, source):
        raise RecoveryUsageError("--template must be another file than the source")
    if inspect_only and output is not None:
        raise RecoveryUsageError("--inspect-only and --output exclude each other")
    if not inspect_only and output is None:
        raise RecoveryUsageError("give --output NEW to recover, or --inspect-only")
    if not source.is_file():
        raise RecoveryUsageError(f"source {source} does not exist or is not a file")
    if work_dir is not None and not work_dir.is_dir():
        raise RecoveryUsageError(f"work dir {work_dir} is not a directory")
    if output is not None:
        _check_output(source, output)
    if report is not None:
        if report.exists() or report.is_symlink():
            raise RecoveryUsageError(f"report {report} already exists; refusing to overwrite")
        if not report.parent.is_dir():
            raise RecoveryUsageError(f"the directory of --report ({report.parent}) does not "
                                     "exist")
        if output is not None and any(_same(report, p) for p in output_names(output)):
            raise RecoveryUsageError("--report must not be the output or one of its sidecars")
        if any(_same(report, Path(f"{source}{s}")) for s in ("",) + SIDECARS):
            raise RecoveryUsageError("--report must not be the source or one of its sidecars")


def _check_output(source: Path, output: Path) -> None:
    for suffix in ("",) + SIDECARS:
        if _same(output, Path(f"{source}{suffix}")):
            raise RecoveryUsageError(f"--output must not be the source or one of its "
                                     f"sidecars ({output})")
    for p in output_names(output):
        if p.exists() or p.is_symlink():
            raise RecoveryUsageError(f"{p} already exists; refusing to overwrite")
    if not output.parent.is_dir():
        raise RecoveryUsageError(f"the directory of --output ({output.parent}) does not exist")


# -- lanes ------------------------------------------------------------------

def run_lanes(ctx: LaneContext, sink: RowSink, names: Sequence[str],
              report: RecoveryReport) -> None:
    """Run the lanes gentle to forceful while any table is missing rows; every
    batch a lane yields goes into ``sink`` (the new file) before it reads on."""
    for name in names:
        if not ctx.pending():
            break
        started = time.monotonic()
        result = _drive(ctx, sink, name, LANES[name](ctx))
        report.lanes_run.append(name)
        for table, gaps in result.gaps.items():
            if table in ctx.states:
                ctx.states[table].gaps = gaps
        report.lost_and_found = sink.lost_items
        report.lane_stats[name] = result.stats
        report.timings[f"lane_{name}_s"] = round(time.monotonic() - started, 3)


def _drive(ctx: LaneContext, sink: RowSink, lane: str, run: Any) -> LaneResult:
    """Pull a lane's batches into the sink; its result once it is done. A
    lane that is a plain function hands its rows over in its result."""
    if isinstance(run, LaneResult):
        for table, rows in run.rows.items():
            _take(ctx, sink, lane, table, rows)
        result = run
    else:
        try:
            while True:
                try:
                    table, rows = next(run)
                except StopIteration as stop:
                    result = stop.value
                    break
                if table == LOST and not isinstance(rows, ImageRows):
                    sink.lost(lane, rows)
                else:
                    _take(ctx, sink, lane, table, rows)
        finally:
            run.close()
    sink.lost(lane, result.lost_and_found)
    ctx.report_progress(f"{lane} lane done", 1, 1)
    return result


def _take(ctx: LaneContext, sink: RowSink, lane: str, table: str,
          rows: list[dict] | ImageRows) -> None:
    """One batch into the output; rows read whole are no longer missing,
    whoever found them (a lane that names its own gaps overrides this). A
    batch left in the backup image is copied from there by a sink that can,
    or else comes again as rows (`ImageRows`)."""
    state = ctx.states.get(table)
    if state is None:
        return
    if isinstance(rows, ImageRows):
        if sink.copy_image(table, lane, rows):
            state.gaps = subtract_rowids(state.gaps, rows.rowids)
        return
    sink.add(table, lane, rows)
    whole = [r.get(ROWID_KEY) for r in rows if PARTIAL_KEY not in r]
    state.gaps = subtract_rowids(state.gaps, [w for w in whole if isinstance(w, int)])


# -- orchestration ----------------------------------------------------------

def _exact(report: RecoveryReport, name: str) -> tuple[bool, bool]:
    """(the skipped ranges hold only lost rows, the carver could not prove the
    table complete); the carve lane's word is the last when it ran."""
    carved = report.lane_stats.get("carve", {}).get("tables", {}).get(name)
    if carved is not None and "exact" in carved:
        return carved["exact"], not carved["exact"]
    return bool(report.lane_stats.get("bisect", {}).get(name, {}).get("rowids_from_index")), False


def _tables_report(states: dict[str, TableState], insp: InspectReport,
                   report: RecoveryReport) -> None:
    for name, state in states.items():
        health = insp.table(name)
        used = (max(state.by_lane, key=lambda lane: state.by_lane[lane]) if state.by_lane
                else None)
        exact, unproven = _exact(report, name)
        report.tables[name] = TableReport(
            source_readable=health.rows if health else None,
            source_scan_complete=bool(health and health.readable),
            recovered=state.recovered, skipped_ranges=[list(g) for g in state.gaps],
            lanes=dict(state.by_lane), lane_used=used, partial=state.partial,
            # An index listed every rowid, so the ranges hold only lost rows.
            rows_lost=sum(hi - lo + 1 for lo, hi in state.gaps) if exact else None,
            carved=dict(state.carved), from_wal=state.from_wal, unproven=unproven)


SHOWN_RANGES = 5


def ranges_text(ranges: list[list[int]]) -> str:
    """``4 rowid ranges could not be read: 3-9, 20, 31-40, 52-60`` with the
    first few ranges shown and the total always stated (the rest are in the
    JSON report's ``skipped_ranges``)."""
    shown = ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges[:SHOWN_RANGES])
    more = len(ranges) - SHOWN_RANGES
    noun = "rowid range" if len(ranges) == 1 else "rowid ranges"
    bounded = all(hi < EVERYTHING[1] for _lo, hi in ranges)  # an open end has no count
    span = sum(hi - lo + 1 for lo, hi in ranges)
    return (f"{len(ranges)} {noun}" + (f" ({span} rowids in all)" if bounded and more > 0
                                       else "")
            + f" could not be read: {shown}"
            + (f" and {more} more (all in the JSON report)" if more > 0 else ""))


def _loss(report: RecoveryReport) -> list[str]:
    reasons = [f"table {n}: no row could be read" if t.skipped_ranges == [list(EVERYTHING)]
               else f"table {n}: {ranges_text(t.skipped_ranges)}"
               + (f" ({t.rows_lost} rows in all, counted from an index)" if t.rows_lost
                  else "")
               for n, t in report.tables.items() if t.skipped_ranges]
    reasons += [f"table {n}: {t.quarantined} rows quarantined" for n, t in
                report.tables.items() if t.quarantined]
    unproven = [n for n, t in report.tables.items() if t.unproven and not t.skipped_ranges]
    if unproven:
        reasons.append(f"tables {', '.join(unproven)}: rows found by scanning pages (b-tree "
                       "and indexes unreadable); rows on destroyed pages cannot be counted")
    reasons += [f"table {n}: {t.partial} rows rebuilt from indexes, some columns lost"
                for n, t in report.tables.items() if t.partial]
    if report.placeholders:
        reasons.append(f"{len(report.placeholders)} session rows lost (placeholders created)")
    if report.parent_links_dropped:
        reasons.append(f"{report.parent_links_dropped} parent-session links lost")
    if report.quarantined_values:
        reasons.append(f"{report.quarantined_values} values quarantined (malformed JSON "
                       "or text that is not UTF-8)")
    return reasons


def _place(tmp: Path, output: Path, suffix: str) -> Path:
    """Move the finished file to its name without ever replacing a file."""
    final = Path(f"{output}{suffix}")
    try:
        os.link(tmp, final)  # fails if ``final`` exists: no clobbering
        os.unlink(tmp)
    except FileExistsError:
        raise RecoveryError(f"{final} appeared while recovering; the result is kept at "
                            f"{tmp}", path=str(final)) from None
    except OSError:  # no hard links on this filesystem: check, then rename
        if final.exists():
            raise RecoveryError(f"{final} appeared while recovering; the result is kept "
                                f"at {tmp}", path=str(final)) from None
        os.rename(tmp, final)
    fsync_dir(final.parent)
    return final


def _temp_name(output: Path) -> Path:
    return output.with_name(f".{output.name}.recovering-{secrets.token_hex(4)}")


def _remove(tmp: Path) -> None:
    for p in [tmp, Path(f"{tmp}{LOST_SUFFIX}")] + [Path(f"{tmp}{s}") for s in SIDECARS]:
        p.unlink(missing_ok=True)


def _open_sink(ctx: LaneContext, tmp: Path, opts: RecoverOptions) -> RowSink:
    if ctx.catalog is not None and ctx.catalog.foreign:
        return recover_foreign.open_sink(tmp, ctx.catalog, ctx.copy_path, ctx.states,
                                         opts.progress)
    return StoreSink(tmp, ctx.catalog.tables if ctx.catalog else {}, ctx.states, vfs=opts.vfs,
                     progress=opts.progress)


def _finish(ctx: LaneContext, sink: RowSink, report: RecoveryReport) -> Any:
    """Complete the output (while the copy is still open: a foreign file's
    FTS5 content is read from it); the write stats."""
    started = time.monotonic()
    if isinstance(sink, StoreSink):
        why_not = (search_reuse.source_reason(report.verdict_before, report.inspect, False)
                   or search_reuse.rows_reason(ctx.states.get("messages")))
        stats = sink.finish(None if why_not else ctx.copy_path, why_not)
        report.search_index = dict(stats.search_index)
        _fill_write_stats(report, stats)
        report.timings.update({f"finish_{k}": v for k, v in stats.timings.items()})
    else:
        own, seq = recover_foreign.read_extras(ctx.conn, ctx.live_catalog)
        stats = sink.finish(ctx.conn, own, seq)  # type: ignore[attr-defined]
        _fill_foreign_stats(report, stats)
    report.timings["finish_s"] = round(time.monotonic() - started, 3)
    return stats


def _keep_unreadable(tmp: Path, output: Path, report: RecoveryReport,
                     err: OutputUnreadable) -> None:
    """The new file lost what was written to it: kept as NEW.unverified for a
    look, with the reason as the verification's finding."""
    report.verification = Verification(findings=[str(err)]).to_dict()
    report.loss_reasons = _loss(report) or ["the new file could not be completed"]
    report.loss, report.outcome = True, Outcome.UNVERIFIED
    report.output = str(_place(tmp, output, UNVERIFIED_SUFFIX))
    for p in [Path(f"{tmp}{LOST_SUFFIX}")] + [Path(f"{tmp}{s}") for s in SIDECARS]:
        p.unlink(missing_ok=True)


def _verify_and_place(ctx: LaneContext, tmp: Path, output: Path, report: RecoveryReport,
                      allow_partial: bool, stats: Any) -> None:
    started = time.monotonic()
    foreign = not isinstance(stats, WriteStats)
    if foreign:
        verification = recover_foreign.verify(tmp, ctx.live_catalog, stats, _readable(report))
    else:
        verification = _verify_ours(ctx, tmp, report, stats)
    report.timings["verify_s"] = round(time.monotonic() - started, 3)
    report.timings.update({f"verify_{k}_s": t for k, t in verification.seconds.items()})
    report.verification = verification.to_dict()
    report.loss_reasons = _loss(report) + (recover_foreign.loss_reasons(stats)
                                           if foreign else [])
    report.loss = bool(report.loss_reasons)
    if not verification.ok:
        report.outcome, suffix = Outcome.UNVERIFIED, UNVERIFIED_SUFFIX
    elif report.loss:
        report.outcome, suffix = Outcome.PARTIAL, "" if allow_partial else PARTIAL_SUFFIX
    else:
        report.outcome, suffix = Outcome.RECOVERED, ""
    report.output = str(_place(tmp, output, suffix))
    if foreign and stats.lost_file:
        report.lost_and_found_file = str(_place(Path(stats.lost_file),
                                                Path(f"{report.output}{LOST_SUFFIX}"), ""))


def _verify_ours(ctx: LaneContext, tmp: Path, report: RecoveryReport,
                 stats: WriteStats) -> Verification:
    """Verify our store; a search index taken over from the source that
    verification refuses is rebuilt from the messages, and verified again."""
    expected = {n: t.inserted for n, t in stats.tables.items() if n not in ("state_meta",)}
    verification = verify_output(tmp, expected, _readable(report), progress=ctx.progress)
    if verification.ok or report.search_index.get("method") != "copied":
        return verification
    try:
        search_reuse.rebuild(tmp, lambda conn: fill_search(conn, _silent))
    except apsw.Error as e:
        verification.findings.append(f"rebuilding the copied search index failed: "
                                     f"{type(e).__name__}")
        return verification
    report.search_index = {"method": "rebuilt", "reason": "verification refused the copied "
                           f"index: {'; '.join(verification.findings)[:200]}"}
    return verify_output(tmp, expected, _readable(report), progress=ctx.progress)


def _silent(_what: str, _done: int, _total: int) -> None:
    pass


def _fill_foreign_stats(report: RecoveryReport, written: Any) -> None:
    for name, n in written.inserted.items():
        t = report.tables.setdefault(name, TableReport(None, False))
        t.copied, t.quarantined = n, written.rejected.get(name, 0)
    report.schema_notes += written.notes
    report.virtual_tables = dict(written.virtual)


def _nothing_read(ctx: LaneContext, sink: RowSink) -> bool:
    """No row came back and something was unreadable (a store that is simply
    empty but sound is recovered as an empty store; a file whose schema is
    lost is never taken for an empty store)."""
    if any(s.recovered for s in ctx.states.values()) or sink.lost_items:
        return False
    return (ctx.catalog is None or ctx.catalog.reference
            or any(not s.complete for s in ctx.states.values()))


def _readable(report: RecoveryReport) -> dict[str, int]:
    """Rows each copied table had readable in the source, minus quarantined ones
    (kept in the quarantine table, not in their own)."""
    return {n: t.source_readable - t.quarantined for n, t in report.tables.items()
            if t.source_readable is not None and t.note is None and n != "state_meta"}


def _fill_write_stats(report: RecoveryReport, stats: Any) -> None:
    for name, tw in stats.tables.items():
        t = report.tables.setdefault(name, TableReport(None, False))
        t.copied, t.quarantined, t.note = tw.inserted, tw.quarantined, tw.note
    report.placeholders = list(stats.placeholders)
    report.parent_links_dropped = stats.parent_links_dropped
    report.quarantined_values = stats.quarantined_values
    report.sessions = {sid: {"messages_recovered": n, "placeholder": sid in stats.placeholders}
                       for sid, n in stats.per_session.items()}


@dataclass
class RecoverOptions:
    """How to run a recovery; every field has a safe default."""

    work_dir: Path | None = None
    allow_partial: bool = False
    lanes: list[str] = field(default_factory=lambda: list(LANES))
    budget: int = DEFAULT_BUDGET
    chunk: int = DEFAULT_CHUNK
    headroom: int = DEFAULT_HEADROOM
    keep_work: bool = False
    vfs: str | None = None
    progress: Progress | None = None
    include_freelist: bool = False
    snapshot_kw: dict[str, Any] = field(default_factory=dict)
    template: Path | None = None
    fast_paths: bool = True  # quick_check beside the backup lane, batches in one statement
    page_copy: bool = True  # a sound store of ours copied page for page (with fast_paths)


def _context(snap: Any, cat: Catalog | None, insp: InspectReport,
             opts: RecoverOptions) -> LaneContext:
    conn = None
    if cat is None and "carve" in opts.lanes:
        # the file's schema is lost: a template, the schema rows left on other
        # pages and the registry of formats say what to look for, by shape
        cat = fallback_catalog(snap.db_copy, opts.template)
    elif cat is not None:
        try:
            conn = open_copy(snap.db_copy)
            if cat.tolerant:
                conn.execute("PRAGMA writable_schema=ON")
        except (apsw.Error, UnicodeDecodeError):
            conn = None
    states = {t.name: TableState(t) for t in cat.data_tables()} if cat else {}
    sound = insp.data_verdict in (Verdict.HEALTHY, Verdict.FTS_ONLY)
    readable = {n: h.rows for n in states if (h := insp.table(n)) is not None and h.rows}
    return LaneContext(snap.db_copy, snap.directory, conn, cat, states, Budget(opts.budget),
                       structurally_sound=sound, chunk=opts.chunk, progress=opts.progress,
                       include_freelist=opts.include_freelist, readable=readable,
                       offer_image=opts.fast_paths)


def _describe_schema(report: RecoveryReport, cat: Catalog | None,
                     template: Path | None) -> None:
    if cat is None:
        return
    if cat.identification is not None:
        report.identification = cat.identification.to_dict()
    report.schema_source = "reference" if cat.reference and cat.source == "file" else cat.source
    report.schema_notes += [f"schema entry not readable (not valid UTF-8): {u}"
                            for u in cat.unreadable]
    if template is not None and not cat.reference:
        report.schema_notes.append("--template not used: the source's own schema is readable")


def recover(source: str | Path, output: str | Path, *, report_path: str | Path | None = None,
            work_dir: str | Path | None = None, allow_partial: bool = False,
            lanes: Sequence[str] | None = None, budget: int = DEFAULT_BUDGET,
            chunk: int = DEFAULT_CHUNK, headroom: int = DEFAULT_HEADROOM,
            keep_work: bool = False, vfs: str | None = None,
            progress: Progress | None = None, include_freelist: bool = False,
            template: str | Path | None = None, fast_paths: bool = True,
            page_copy: bool = True, **snapshot_kw: Any) -> RecoveryReport:
    """Recover ``source`` into ``output``; see the module docstring for names.

    ``lanes`` restricts the copy lanes (default: all of ``LANES`` in order);
    ``budget`` bounds the bisection's queries per table; ``vfs`` names an
    apsw VFS for writing the output (fault-injection tests);
    ``include_freelist`` lets the carve lane bring back deleted rows from
    free pages (marked in the output's ``recovery_marked_rows`` table);
    ``template`` (a healthy file or a .sql schema from the same program)
    gives the schema when the source's own cannot be read. ``fast_paths``
    False runs quick_check before the lanes and writes every row on its own
    (the same output and report, slower: for comparisons); ``page_copy``
    False leaves a sound store to the lanes too (`hstate_recovery.salvage.page_copy`:
    the same rows and counts). Raises
    RecoveryUsageError for bad options (before any I/O) and other
    RecoveryError subclasses for runtime failures.
    """
    source, output = Path(source), Path(output)
    report_file = Path(report_path) if report_path else None
    opts = RecoverOptions(Path(work_dir) if work_dir else None, allow_partial,
                          list(lanes) if lanes else list(LANES), budget, chunk, headroom,
                          keep_work, vfs, progress, include_freelist, snapshot_kw,
                          Path(template) if template else None, fast_paths, page_copy)
    check_options(source, output, report_file, opts.work_dir, template=opts.template)
    unknown = [n for n in opts.lanes if n not in LANES]
    if unknown:
        raise RecoveryUsageError(f"unknown lane(s) {unknown}; known: {list(LANES)}")
    report = RecoveryReport(str(source), str(output),
                            report_path=str(report_file) if report_file else None)
    started = time.monotonic()
    try:
        _recover(source, output, report, opts)
    except SourceChanging as e:
        report.outcome = Outcome.SOURCE_CHANGING
        report.loss_reasons = [str(e)]
    except OSError as e:
        raise RecoveryIOError(f"hstate_recovery stopped by an I/O error: {e}",
                              path=getattr(e, "filename", None)) from e
    report.timings["total_s"] = round(time.monotonic() - started, 3)
    if report_file is not None:
        try:
            write_json_exclusive(report_file, report.to_dict())
        except OSError as e:
            raise RecoveryIOError(f"cannot write the report {report_file}: {e}; the output "
                                  f"is at {report.output}", path=str(report_file)) from e
    return report


def _recover(source: Path, output: Path, report: RecoveryReport, opts: RecoverOptions) -> None:
    t0 = time.monotonic()
    if not source.is_file():
        raise SourceMissing(f"{source} does not exist", path=str(source))
    needs = {output.parent: 2 * source_bytes(source)}  # output + its WAL while writing
    snap = take_snapshot(source, opts.work_dir, extra_needs=needs, headroom=opts.headroom,
                         progress=opts.progress, confirm_later=True, **opts.snapshot_kw)
    try:
        report.timings["snapshot_s"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        if opts.progress is not None:
            opts.progress("inspecting the copy", 0, 0)
        # a copy that looks sound has its quick_check run beside the backup lane
        defer = opts.fast_paths and "backup" in opts.lanes
        insp, cat = inspect_snapshot(snap, estimate=None, defer_quick_check=defer)
        report.timings["inspect_s"] = round(time.monotonic() - t0, 3)
        pages = defer and opts.page_copy and page_copy.reason_not(
            cat, insp, default_lanes=opts.lanes == list(LANES),
            include_freelist=opts.include_freelist) is None
        folded = pages and page_copy.checkpoint_copy(snap.db_copy)  # before the check opens it
        check = QuickCheck(snap.db_copy, cat) if cat is not None and not insp.quick_check \
            else None
        try:
            if pages and cat is not None:
                try:
                    if _copy_pages(snap, cat, insp, output, report, opts, check, folded):
                        return
                except Unsound:
                    check = None  # inspect's verdict is final: the lanes run on it
            # (the second look at the source goes on beside the lanes: the
            # new file is confirmed before it is kept, `_confirmed`)
            _recover_copy(snap, cat, insp, output, report, opts, check)
        finally:
            if check is not None:
                check.cancel()
    finally:
        if not opts.keep_work:
            snap.cleanup()


def _copy_pages(snap: Snapshot, cat: Catalog, insp: InspectReport, output: Path,
                report: RecoveryReport, opts: RecoverOptions, check: QuickCheck | None,
                folded: bool) -> bool:
    """A sound copy into the new file page for page (`page_copy`), verified
    and placed. False, with nothing written, when an index of the copy is
    not whole or the row-by-row path would change a row; `Unsound` when the quick_check beside the copy found damage:
    the lanes run then, as for any file not sound."""
    report.inspect, report.verdict_before = insp.to_dict(), insp.data_verdict
    _describe_schema(report, cat, opts.template)
    rows = {t.name: t.rows for t in insp.tables}
    started = time.monotonic()
    conn = open_copy(snap.db_copy)
    try:
        bad = page_copy.unsound_indexes(conn, cat, rows)
        if not bad and not cat.foreign:
            bad = page_copy.needs_rewrite(conn, cat)
    except (apsw.Error, UnicodeDecodeError) as e:
        bad = [f"{type(e).__name__}: {e}"]
    finally:
        conn.close()
    report.timings["pages_checks_s"] = round(time.monotonic() - started, 3)
    if bad:
        log.info("no page copy: %s", "; ".join(bad[:3]))
        return False
    snap.confirm()  # the source did not change while it was copied: the copy is its image
    report.fingerprints = snap.to_dict()
    tmp = _temp_name(output)
    try:
        started = time.monotonic()
        # (a vfs is for writing the new file through: it is never linked)
        linked = None if folded or opts.vfs else page_copy.link_copy(snap.db_copy, tmp)
        copied = linked if linked is not None else page_copy.copy_pages(
            snap.db_copy, tmp, opts.vfs, opts.progress)
        report.timings["pages_copy_s"] = round(time.monotonic() - started, 3)
        if opts.progress is not None:
            opts.progress("page copy done", 1, 1)
        started = time.monotonic()
        verification = page_copy.verify_copy(
            snap.db_copy, tmp, cat, rows,
            snap.before[snap.source.name].sha256 if linked is not None else None,
            opts.progress)
        report.timings["verify_s"] = round(time.monotonic() - started, 3)
        report.timings.update({f"verify_{k}_s": t for k, t in verification.seconds.items()})
        if check is not None:
            check.stop()
            settle(check, snap, insp, report)
    except BaseException:
        _remove(tmp)
        raise
    _page_copy_report(report, cat, rows, copied, tmp if verification.ok else None)
    report.lane_stats["backup"]["linked"] = linked is not None
    page_copy.drop_sidecars(tmp)
    report.verification = verification.to_dict()
    report.outcome = Outcome.RECOVERED if verification.ok else Outcome.UNVERIFIED
    report.loss_reasons = [] if verification.ok else ["the new file could not be verified"]
    report.loss = not verification.ok
    report.output = str(_place(tmp, output, "" if verification.ok else UNVERIFIED_SUFFIX))
    return True


def _page_copy_report(report: RecoveryReport, cat: Catalog, rows: dict[str, int],
                      pages: int, tmp: Path | None) -> None:
    """The report of a page copy, as the backup lane would have written it
    (the sessions read from the new file ``tmp`` once it is verified)."""
    for spec in cat.data_tables():
        n = rows.get(spec.name, 0)
        report.tables[spec.name] = TableReport(
            n, True, recovered=n, copied=n, lanes={"backup": n} if n else {},
            lane_used="backup" if n else None)
    report.lanes_run = ["backup"]
    report.lane_stats["backup"] = {"applicable": True, "page_copy": True, "pages": pages}
    if cat.foreign:
        report.virtual_tables = {name: "copied with its pages" for name in cat.fts5}
        return
    report.search_index = {"method": "copied", "reason": None}
    if tmp is None:
        return
    conn = apsw.Connection(str(tmp), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        report.sessions = {sid: {"messages_recovered": n, "placeholder": False}
                           for sid, n in conn.execute("SELECT session_id, count(*) FROM "
                                                      "messages GROUP BY session_id")}
    finally:
        conn.close()


def _recover_copy(snap: Snapshot, cat: Catalog | None, insp: InspectReport, output: Path,
                  report: RecoveryReport, opts: RecoverOptions,
                  check: QuickCheck | None) -> None:
    """The lanes into a new file, then verification and placing. With
    ``check`` pending the lanes run on inspect's verdict so far; if the
    check then changes it, that file is thrown away and the lanes run
    again on the final verdict, as if the check had come first."""
    report.inspect, report.verdict_before = insp.to_dict(), insp.data_verdict
    ctx = _context(snap, cat, insp, opts)
    _describe_schema(report, ctx.catalog, opts.template)
    pending = partial(settle, check, snap, insp, report) if check is not None else None
    before = copy.deepcopy(report)  # what a run thrown away leaves to start again from
    while True:
        tmp = _temp_name(output)
        try:
            stats = _lanes_into(ctx, tmp, insp, report, opts, pending)
            _confirmed(snap, report)
        except Unsound:
            _remove(tmp)
            forget_lanes(before, report, ctx.work_dir)
            pending, ctx = None, _context(snap, cat, insp, opts)
            continue
        except OutputUnreadable as e:
            try:
                _confirmed(snap, report)
            except BaseException:
                _remove(tmp)
                raise
            _keep_unreadable(tmp, output, report, e)
            return
        except Exception:
            _remove(tmp)
            _confirmed(snap, report)  # a source that changed explains a failure best
            raise
        except BaseException:
            _remove(tmp)
            raise
        break
    if stats is None:
        _remove(tmp)
        report.outcome = Outcome.NOT_RECOVERABLE
        report.loss, report.loss_reasons = True, ["no row could be read from the source"]
        if insp.verdict == Verdict.NOT_A_DATABASE:  # the guessed schema named nothing real
            report.identification = {"label": "not an SQLite database", "kind": None}
            report.schema_source = "none"
            report.tables = {}
        return
    _verify_and_place(ctx, tmp, output, report, opts.allow_partial, stats)


def _confirmed(snap: Snapshot, report: RecoveryReport) -> None:
    """The source did not change while it was copied (`Snapshot.confirm`:
    its second look ran beside the lanes), so what was made of the copy may
    be kept; the fingerprints then go into the report. `SourceChanging`
    otherwise."""
    started = time.monotonic()
    snap.confirm()
    report.timings["snapshot_confirm_wait_s"] = round(time.monotonic() - started, 3)
    report.fingerprints = snap.to_dict()


def _run_and_finish(ctx: LaneContext, sink: RowSink, insp: InspectReport,
                    report: RecoveryReport, opts: RecoverOptions) -> Any:
    started = time.monotonic()
    run_lanes(ctx, sink, opts.lanes, report)
    report.timings["lanes_s"] = round(time.monotonic() - started, 3)
    _tables_report(ctx.states, insp, report)
    return None if _nothing_read(ctx, sink) else _finish(ctx, sink, report)


def _lanes_into(ctx: LaneContext, tmp: Path, insp: InspectReport, report: RecoveryReport,
                opts: RecoverOptions, settle: Callable[[], None] | None = None) -> Any:
    """Run the lanes straight into the output at ``tmp`` and complete it; the
    write stats, or None when nothing at all could be read. ``settle``
    completes inspect once the file is complete (it raises `Unsound` when
    that work does not count: everything it did followed from inspect's
    verdict, which a quick_check that agrees leaves as it was)."""
    try:
        sink = _open_sink(ctx, tmp, opts)
        ctx.kept = sink
        try:
            if isinstance(sink, StoreSink) and search_reuse.source_reason(
                    report.verdict_before, report.inspect, False):
                sink.follow_search()  # its index is rebuilt: start on the second core now
            try:
                stats = _run_and_finish(ctx, sink, insp, report, opts)
            except Exception:
                if settle is not None:
                    settle()  # a copy found unsound after all: the error is the damage's
                raise
            if settle is not None:
                settle()  # after the finish too: it does not depend on quick_check's word
            return stats
        finally:
            sink.close()
    finally:
        if ctx.conn is not None:
            ctx.conn.close()
