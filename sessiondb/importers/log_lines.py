"""Reading the JSONL logs other agent tools leave on disk, one line at a time.

Claude Code and Codex CLI append one JSON object a line to their transcript
files. The readers here never hold a file in memory: lines are read one at
a time from a binary handle, and a line that is not JSON, or not an object
with a ``type``, is named (file and line number) and skipped, never fatal.
Files are opened for reading only.
"""
from __future__ import annotations

import json
import marshal
import os
import re
import struct
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from ..rows import time_in_range
from .llm_threads import parse_time

#: a title is the first line of the summary or prompt, cut to this many characters
TITLE_CHARS = 120
#: a line longer than this is skipped unread (no transcript line comes near it)
MAX_LINE_BYTES = 256 * 1024 * 1024
#: a reader keeps the messages of a file's first HOLD_BYTES of lines (at most
#: HOLD_MESSAGES of them) in memory between its passes and spills the rest,
#: so that a large file takes no more memory than a small one
HOLD_BYTES = 4 << 20
HOLD_MESSAGES = 4_000
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@+=-]")


@dataclass
class LineReport:
    """What a reader left out of one file: skipped lines (named) and lines
    that are not messages, counted by their type."""

    path: str
    lines: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    not_messages: Counter[str] = field(default_factory=Counter)
    unknown_types: Counter[str] = field(default_factory=Counter)

    def skip(self, line: int, why: str) -> None:
        self.skipped.append({"path": self.path, "line": line, "why": why})

    def to_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "skipped": list(self.skipped),
                "not_messages": dict(sorted(self.not_messages.items())),
                "unknown_types": dict(sorted(self.unknown_types.items()))}


class Line:
    """One parsed line: its number, byte offset and object."""

    __slots__ = ("number", "offset", "obj")

    def __init__(self, number: int, offset: int, obj: dict[str, Any]) -> None:
        self.number, self.offset, self.obj = number, offset, obj


_DECODER = json.JSONDecoder()
_DECODE = _DECODER.decode  # json.loads on bytes detects the encoding each call
#: the C scanner that `decode` wraps (set in JSONDecoder.__init__; typeshed omits it)
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def _object(text: str) -> Any:
    """``_DECODE(text)`` for a line that is one JSON object and its line end,
    without decode's two whitespace matches; anything else goes to
    ``_DECODE`` itself, so its value or error is exactly decode's."""
    if text[:1] == "{":
        try:
            obj, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            return _DECODE(text)
        rest = len(text) - end
        if rest == 0 or (rest == 1 and text[end] == "\n") or text[end:] == "\r\n":
            return obj
    return _DECODE(text)


def _parse(raw: bytes, number: int, report: LineReport) -> dict[str, Any] | None:
    try:
        obj = _object(raw.decode("utf-8"))
    except RecursionError:
        report.skip(number, "not readable: JSON nested too deeply")
        return None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, the int-digit limit
        report.skip(number, f"not JSON ({getattr(e, 'msg', None) or e})")
        return None
    if not isinstance(obj, dict):
        report.skip(number, f"not a JSON object (a {type(obj).__name__})")
        return None
    return obj


def read_lines(f: BinaryIO, report: LineReport) -> Iterator[Line]:
    """Each non-blank line of ``f`` that is a JSON object; bad lines are named
    in ``report``."""
    offset, number = f.tell(), 0
    for raw in f:
        number += 1
        start, offset = offset, offset + len(raw)
        report.lines = number
        if raw.isspace() or not raw:  # (strip() would copy the line)
            continue
        if len(raw) > MAX_LINE_BYTES:
            report.skip(number, f"line of {len(raw)} bytes is too long")
            continue
        obj = _parse(raw, number, report)
        if obj is not None:
            yield Line(number, start, obj)


def open_log(path: Path) -> BinaryIO:
    """``path`` opened for reading (a directory or a missing file raises OSError)."""
    return open(path, "rb")


class RecordFile:
    """Mapped records between a reader's pass over a file and its yielding
    them: length-prefixed ``marshal`` in an unlinked, private temporary file
    (reading back costs a fraction of parsing the line's JSON again).

    ``in_dir`` names it instead (0600, in a private directory), so that a
    reader scanning in another process can hand it over (log_prescan.py);
    `adopt` opens such a file and unlinks it at once."""

    _LENGTH = struct.Struct("<I")

    def __init__(self, in_dir: str | None = None) -> None:
        if in_dir is None:
            self._f = tempfile.TemporaryFile(buffering=1 << 20)
            self.name: str | None = None
        else:
            fd, self.name = tempfile.mkstemp(dir=in_dir, suffix=".records")
            self._f = os.fdopen(fd, "w+b", buffering=1 << 20)

    @classmethod
    def adopt(cls, name: str) -> "RecordFile":
        """The named file another process wrote, now private to this one."""
        rf = cls.__new__(cls)
        rf._f = open(name, "rb", buffering=1 << 20)
        rf.name = None
        os.unlink(name)
        return rf

    def handed_over(self) -> str:
        """Flush and close a named file for `adopt` in another process."""
        assert self.name is not None
        self._f.close()
        return self.name

    def write(self, record: tuple[Any, ...]) -> int:
        """Append ``record``; returns where it starts (for `at`)."""
        offset = self._f.tell()
        data = marshal.dumps(record)
        self._f.write(self._LENGTH.pack(len(data)))
        self._f.write(data)
        return offset

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        self._f.seek(0)
        read = self._f.read
        while head := read(4):
            yield marshal.loads(read(self._LENGTH.unpack(head)[0]))

    def at(self, offset: int) -> tuple[Any, ...]:
        self._f.seek(offset)
        return marshal.loads(self._f.read(self._LENGTH.unpack(self._f.read(4))[0]))

    def __enter__(self) -> "RecordFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


def iso_time(value: Any) -> float | None:
    """An ISO 8601 time (``Z`` or an offset; naive is UTC) as epoch seconds,
    or None when it is not one we can store."""
    t = parse_time(value)
    return t if t is not None and time_in_range(t) else None


def file_time(path: Path) -> float:
    """The file's modification time: the time of lines that carry none."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def safe_id(raw: str) -> str:
    """``raw`` as a session id of ours (safe characters, at most 128)."""
    cleaned = _UNSAFE.sub("_", raw).lstrip("_.:@+=-")
    return cleaned[:128] or "imported"


def title_from(text: Any) -> str | None:
    """The first non-blank line of ``text``, cut to TITLE_CHARS."""
    if not isinstance(text, str):
        return None
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1] + "…"
    return None


def text_of(blocks: Any, kinds: tuple[str, ...] = ("text",)) -> str | None:
    """The text of a content value: a string, or the joined ``text`` of the
    blocks of the given types (None when there is none)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        return None
    parts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") in kinds
             and isinstance(b.get("text"), str)]
    return "\n".join(parts) if parts else None


def walk(root: Path, match: re.Pattern[str]) -> list[Path]:
    """The files under ``root`` whose name matches, sorted; symlinked
    directories are not followed (a walk stays inside what was named)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        found.extend(Path(dirpath) / n for n in sorted(filenames) if match.fullmatch(n))
    return found
