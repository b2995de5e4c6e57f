"""Import the transcripts Claude Code and Codex CLI leave on disk.

``import_logs(db, "claude-code", paths)`` takes files and directories (a
directory is walked for the tool's files, symlinked directories not
followed) and imports every file through one `import_records` run: all of
it is checked before anything is written, the index is brought to date
once (built beside the store when the store is empty), and a re-import adds
nothing. A line the reader cannot use is named in its file's report and
skipped, and so is a line whose message the store refuses (the check pass
is then run again without it); the rest is imported. Unknown line types
are counted, never fatal. Files are only read. Per-file counts come from
the store's counts of each file's sessions before and after.

The phases: read and check (two passes over each file, see the readers),
write, then each session's context (working directory, branch, client
version) into ``state_meta``, then sidechain sessions imported before their
conversation are linked to it. A dry run checks file by file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, TYPE_CHECKING

from .claude_code_import import ClaudeCodeReader, FILES as CLAUDE_FILES
from .codex_import import CodexReader, FILES as CODEX_FILES
from ..base import SessionNotFound
from .importer import (ImportFileError, ImportResult, MessageIn, ProgressFor, Record, SessionIn,
                       import_records)
from .log_lines import LineReport, walk
from .log_prescan import Prescan

if TYPE_CHECKING:  # for type hints only
    from ..face import StoreFace

#: a file whose messages the store refuses more often than this is left out whole
MAX_REFUSED = 100


class _Reader(Protocol):
    report: LineReport
    refused: set[int]

    def records(self) -> Iterator[Record]: ...
    def prescan(self, directory: str) -> list[str]: ...
    def adopt(self, scanned: Any, names: list[str]) -> None: ...
    def meta(self) -> Iterator[tuple[str, dict[str, Any]]]: ...
    def lineage(self) -> list[tuple[str, str]]: ...
    def conversations(self) -> list[str]: ...


_READERS: dict[str, tuple[Callable[[Path], _Reader], Any]] = {
    "claude-code": (ClaudeCodeReader, CLAUDE_FILES), "codex": (CodexReader, CODEX_FILES)}
LOG_FORMATS = tuple(_READERS)


@dataclass
class LogFileResult:
    """One file: what the import added, and what the reader left out."""

    result: ImportResult
    lines: LineReport

    def to_dict(self) -> dict[str, Any]:
        doc = {k: v for k, v in self.result.to_dict().items()
               if k not in ("tables", "not_carried")}
        return {**doc, **self.lines.to_dict()}


_TOTALS = ("sessions_in_file", "sessions_created", "sessions_existing", "messages_in_file",
           "messages_added", "messages_skipped", "usage_rows_added")


@dataclass
class LogImportReport:
    """Every file's result; ``skipped_lines`` > 0 means the import was partial."""

    source_format: str
    dry_run: bool
    files: list[LogFileResult] = field(default_factory=list)
    #: the one import of every file (None for a dry run, checked file by file)
    run: ImportResult | None = None

    @property
    def skipped_lines(self) -> int:
        return sum(len(f.lines.skipped) for f in self.files)

    def totals(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: sum(getattr(f.result, k) for f in self.files)
                               for k in _TOTALS}
        if self.run is not None:  # the import's own counts (a session in two files: once)
            out.update({k: getattr(self.run, k) for k in _TOTALS})
            out["search_index"], out["index_build"] = self.run.search_index, self.run.index_build
        out["files"] = len(self.files)
        out["lines"] = sum(f.lines.lines for f in self.files)
        out["skipped_lines"] = self.skipped_lines
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"source_format": self.source_format, "dry_run": self.dry_run,
                "totals": self.totals(), "files": [f.to_dict() for f in self.files]}


def log_files(fmt: str, paths: list[Path]) -> list[Path]:
    """The files to read, each once: a file as named, a directory's matching
    files. Claude Code's subagent files (``agent-*``) come after the rest, so
    a conversation is in the store before its sidechains."""
    pattern = _READERS[fmt][1]
    found: dict[Path, None] = {}
    for p in paths:
        if p.is_dir():
            found.update(dict.fromkeys(walk(p, pattern)))
        elif p.exists():
            found[p] = None
        else:
            raise ImportFileError(f"{p} does not exist", path=str(p))
    return sorted(found, key=lambda p: (p.name.startswith("agent-"), str(p)))


def import_logs(db: StoreFace, fmt: str, paths: list[Path], *, dry_run: bool = False,
                progress: Callable[[int], None] | None = None,
                progress_for: ProgressFor | None = None) -> LogImportReport:
    """Import Claude Code (``fmt="claude-code"``) or Codex (``"codex"``)
    transcripts. ``progress`` is told of each file read; ``progress_for`` is
    `import_records`'s (the rows written, then the index)."""
    if fmt not in _READERS:
        raise ImportFileError(f"unknown transcript format {fmt!r}")
    files = log_files(fmt, paths)
    if not files:
        raise ImportFileError(f"no {fmt} transcripts under {', '.join(map(str, paths))}")
    readers = [_READERS[fmt][0](path) for path in files]
    report = LogImportReport(fmt, dry_run)
    if dry_run:  # nothing is written: each file on its own gives exact counts
        for reader in readers:
            report.files.append(_dry_file(db, fmt, reader))
            if progress is not None:
                progress(1)
        return report
    prescan = Prescan.start(_READERS[fmt][0], readers)  # files read ahead in a worker
    try:
        stream = _Stream(db, readers, progress, prescan)
        report.run = _import_all(db, fmt, stream, progress_for)
    finally:
        if prescan is not None:
            prescan.close()
    report.files = stream.results(db, report.run)
    children = [pair for r in readers for pair in _write_meta(db, fmt, r)]
    if fmt == "claude-code":
        _link(db, children, [sid for r in readers for sid in r.conversations()])
    return report


def _dry_file(db: StoreFace, fmt: str, reader: _Reader) -> LogFileResult:
    stream = _Stream(db, [reader], None)
    result = _retrying(stream, lambda: import_records(
        db, stream, source_format=fmt, path=str(reader.report.path), dry_run=True,
        require_end=False))
    return LogFileResult(result, reader.report)


def _import_all(db: StoreFace, fmt: str, stream: "_Stream",
                progress_for: ProgressFor | None) -> ImportResult:
    """Every file in one import (one check pass, one write pass, the index
    brought to date once, built beside an empty store)."""
    return _retrying(stream, lambda: import_records(
        db, stream, source_format=fmt, path=", ".join(r.report.path for r in stream.readers),
        require_end=False, progress_for=progress_for))


def _retrying(stream: "_Stream", run: Callable[[], ImportResult]) -> ImportResult:
    """``run()``, again without each line whose message the store refused (the
    check pass refuses it before anything is written); the lines are named."""
    refused = 0
    while True:
        try:
            result = run()
            break
        except ImportFileError as e:
            at = stream.current
            if e.line is None or at is None or e.line in stream.readers[at].refused \
                    or refused >= MAX_REFUSED:
                raise
            refused += 1
            stream.readers[at].refused.add(e.line)
            stream.why[(at, e.line)] = str(e).split(": ", 1)[-1]
    for (i, line), why in sorted(stream.why.items()):
        stream.readers[i].report.skip(line, f"the store refused its message: {why}")
    return result


@dataclass
class _FileCount:
    """One file's records, and its sessions' counts before anything was written."""

    sessions: list[str] = field(default_factory=list)
    messages: int = 0
    usage_rows: int = 0
    before: dict[str, tuple[int, int] | None] = field(default_factory=dict)


class _Stream:
    """The records of every file, one file after another, counted per file.
    Called once per pass of `import_records`; the check pass reads it before
    the write pass writes anything, so the counts it takes of each file's
    sessions at the end of the file are the store's before the import."""

    def __init__(self, db: StoreFace, readers: list[_Reader],
                 progress: Callable[[int], None] | None, prescan: Prescan | None = None) -> None:
        self.db, self.readers, self.progress = db, readers, progress
        self.prescan = prescan
        self.current: int | None = None  # the file of the record yielded last
        self.counts: list[_FileCount] = []
        self.why: dict[tuple[int, int], str] = {}

    def __call__(self) -> Iterator[Record]:
        self.counts = []
        for i, reader in enumerate(self.readers):
            self.current, count = i, _FileCount()
            self.counts.append(count)
            try:
                if self.prescan is not None:
                    self.prescan.take(i)  # its first pass, made in the worker
                for rec in reader.records():
                    if isinstance(rec, SessionIn):
                        count.sessions.append(rec.id)
                        count.usage_rows += len(rec.usage)
                    elif isinstance(rec, MessageIn):
                        count.messages += 1
                    yield rec
            except (OSError, UnicodeDecodeError) as e:
                reader.report.skip(0, "cannot read the file: "
                                      f"{getattr(e, 'strerror', None) or e}")
            count.before = {sid: _counts(self.db, sid) for sid in count.sessions}
            if self.progress is not None:
                self.progress(1)

    def results(self, db: StoreFace, run: ImportResult) -> list[LogFileResult]:
        """Per file: what its sessions gained, from the store's counts before and after."""
        out = []
        for reader, count in zip(self.readers, self.counts):
            r = ImportResult(run.source_format, reader.report.path, False,
                             sessions_in_file=len(count.sessions),
                             messages_in_file=count.messages,
                             usage_rows_in_file=count.usage_rows,
                             search_index=run.search_index, index_backlog=run.index_backlog,
                             index_build=run.index_build)
            for sid, before in count.before.items():
                after = _counts(db, sid) or (0, 0)
                r.sessions_created += before is None
                r.sessions_existing += before is not None
                r.messages_added += after[0] - (before or (0, 0))[0]
                r.usage_rows_added += after[1] - (before or (0, 0))[1]
            r.messages_skipped = r.messages_in_file - r.messages_added
            out.append(LogFileResult(r, reader.report))
        return out


def _counts(db: StoreFace, sid: str) -> tuple[int, int] | None:
    """A session's message count and usage ledger rows (None: not in the store)."""
    try:
        return db.get_session(sid).message_count, len(db.session_usage(sid))
    except SessionNotFound:
        return None


def _write_meta(db: StoreFace, fmt: str, reader: _Reader) -> list[tuple[str, str]]:
    """Each session's context under ``<fmt>:session:<id>``; returns the
    (child, parent) pairs of the sessions that have a parent."""
    pairs = list(reader.meta())
    if not pairs:
        return []
    with db.atomic() as conn:
        for sid, doc in pairs:
            conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key)"
                         " DO UPDATE SET value = excluded.value",
                         (f"{fmt}:session:{sid}", json.dumps(doc, sort_keys=True)))
    return reader.lineage()


def _link(db: StoreFace, children: list[tuple[str, str]], sessions: list[str]) -> None:
    """Sidechains imported before (or without) their conversation get it as parent once
    it is in the store (a session never names a parent the store lacks): those of
    this run, and those of earlier runs named ``<conversation>-agent-...``."""
    with db.atomic() as conn:
        for child, parent in children:
            conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ? AND"
                         " parent_session_id IS NULL AND EXISTS (SELECT 1 FROM sessions"
                         " WHERE id = ?)", (parent, child, parent))
        for parent in sessions:
            for infix in ("-agent-", "-sidechain-"):
                prefix = parent + infix
                conn.execute("UPDATE sessions SET parent_session_id = ? WHERE"
                             " parent_session_id IS NULL AND substr(id, 1, ?) = ? AND"
                             " EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                             (parent, len(prefix), prefix, parent))
