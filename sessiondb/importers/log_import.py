"""Import the transcripts Claude Code and Codex CLI leave on disk.

``import_logs(db, "claude-code", paths)`` takes files and directories (a
directory is walked for the tool's files, symlinked directories not
followed) and imports each file through `import_records`, so each file is
checked whole before it is written and a re-import adds nothing. A line
the reader cannot use is named in the file's report and skipped, and so is
a line whose message the store refuses (the file is then read again
without it); the rest of the file is imported. Unknown line types are
counted, never fatal. Files are only read.

The phases, per file: read (two passes, see the readers), import, then the
session's context (working directory, branch, client version) into
``state_meta``. After the last file, sidechain sessions imported before
their conversation are linked to it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, TYPE_CHECKING

from .claude_code_import import ClaudeCodeReader, FILES as CLAUDE_FILES
from .codex_import import CodexReader, FILES as CODEX_FILES
from .importer import ImportFileError, ImportResult, Record, import_records
from .log_lines import LineReport, walk

if TYPE_CHECKING:  # for type hints only
    from ..face import StoreFace

#: a file whose messages the store refuses more often than this is left out whole
MAX_REFUSED = 100


class _Reader(Protocol):
    report: LineReport
    refused: set[int]

    def records(self) -> Iterator[Record]: ...
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

    @property
    def skipped_lines(self) -> int:
        return sum(len(f.lines.skipped) for f in self.files)

    def totals(self) -> dict[str, int]:
        out = {k: sum(getattr(f.result, k) for f in self.files) for k in _TOTALS}
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
                progress: Callable[[int], None] | None = None) -> LogImportReport:
    """Import Claude Code (``fmt="claude-code"``) or Codex (``"codex"``)
    transcripts; ``progress`` is told of each file done."""
    if fmt not in _READERS:
        raise ImportFileError(f"unknown transcript format {fmt!r}")
    files = log_files(fmt, paths)
    if not files:
        raise ImportFileError(f"no {fmt} transcripts under {', '.join(map(str, paths))}")
    report = LogImportReport(fmt, dry_run)
    children: list[tuple[str, str]] = []
    conversations: list[str] = []
    for path in files:
        reader = _READERS[fmt][0](path)
        report.files.append(_import_file(db, fmt, path, reader, dry_run))
        if not dry_run:
            children += _write_meta(db, fmt, reader)
            conversations += reader.conversations()
        if progress is not None:
            progress(1)
    if not dry_run and fmt == "claude-code":
        _link(db, children, conversations)
    return report


def _import_file(db: StoreFace, fmt: str, path: Path, reader: _Reader,
                 dry_run: bool) -> LogFileResult:
    """One file, read again without each line whose message the store refused."""
    refused: dict[int, str] = {}
    while True:
        try:
            result = import_records(db, reader.records, source_format=fmt, path=str(path),
                                    dry_run=dry_run, require_end=False)
            break
        except ImportFileError as e:
            if e.line is None or e.line in refused or len(refused) >= MAX_REFUSED:
                raise
            refused[e.line] = str(e).split(": ", 1)[-1]
            reader.refused.add(e.line)
        except (OSError, UnicodeDecodeError) as e:
            reader.report.skip(0, f"cannot read the file: {getattr(e, 'strerror', None) or e}")
            return LogFileResult(ImportResult(fmt, str(path), dry_run), reader.report)
    for line, why in sorted(refused.items()):
        reader.report.skip(line, f"the store refused its message: {why}")
    return LogFileResult(result, reader.report)


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
