"""Text a terminal can trust: the one place control characters are escaped.

Stored strings (titles, message text, snippets, ids, error text that quotes
them) are hostile input: an OSC 52 sequence writes the clipboard, OSC 0
retitles the window, a DCS or an 8-bit CSI (U+009B) drives the terminal,
BEL/BS/NUL/CR rewrite what the reader sees, and bidi overrides reorder it.
Every character that can do any of that is replaced by its visible
``\\uXXXX`` spelling, character by character, so a sequence cut in half by a
snippet is escaped just as well as a whole one.

The ``\\uXXXX`` spelling is also a valid JSON string escape of the same
character, and none of these characters can appear raw outside a string in
our JSON (its syntax is printable ASCII plus newline and space), so the
same filter keeps ``--json`` documents exact while making them safe to
print. Only newline and tab pass through.

`safe_streams` puts the filter in front of ``sys.stdout`` and ``sys.stderr``
for the whole of a command, so nothing a command prints can bypass it;
files written with ``--output`` never pass through it and keep the exact
text. Our own progress bars write to the unfiltered stream (`raw_stderr`).

Search hits are highlighted with two private marks (`highlight`) that the
stream turns into bold on a terminal and into nothing on a pipe or file.
"""
from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

# C0 except tab and newline, DEL, C1 (includes the 8-bit CSI U+009B, DCS
# U+0090, OSC U+009D, ST U+009C), the line/paragraph separators, and the bidi
# embeddings, overrides and isolates ("Trojan Source").
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_CONTROLS}]")
# Highlight marks our own formatting puts into text that is already escaped;
# the stream turns them into terminal attributes (or nothing). Stored text
# carrying them is spelled out like a control character (`escape_text`).
HL_ON, HL_OFF = "\ue000", "\ue001"
_UNSAFE_TEXT = re.compile(f"[{_CONTROLS}{HL_ON}{HL_OFF}]")
BOLD_ON, BOLD_OFF = "\x1b[1m", "\x1b[22m"


def _spell(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_controls(text: str) -> str:
    """``text`` with every terminal control character spelled ``\\uXXXX``."""
    return _UNSAFE.sub(_spell, text)


def escape_text(text: str) -> str:
    """Stored text for a table cell: controls and highlight marks spelled out."""
    return _UNSAFE_TEXT.sub(_spell, text)


class Escaped(str):
    """Cell text that is already escaped (and may carry highlight marks)."""


def highlight(snippet: str, mark_open: str, mark_close: str) -> Escaped:
    """A search snippet (terms between the library's marks) as cell text:
    the stored text escaped, each marked term between `HL_ON`/`HL_OFF`."""
    out, rest, on = [], snippet, False
    while rest:
        mark = mark_close if on else mark_open
        at = rest.find(mark)
        if at < 0:
            out.append(escape_text(rest))
            break
        out.append(escape_text(rest[:at]))
        out.append(HL_OFF if on else HL_ON)
        on, rest = not on, rest[at + len(mark):]
    if on:
        out.append(HL_OFF)
    return Escaped("".join(out))


def attributes_wanted(stream: Any) -> bool:
    """Terminal attributes only on a terminal that has them (NO_COLOR, TERM=dumb)."""
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):
        tty = False
    return tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def has_controls(text: str) -> bool:
    return _UNSAFE.search(text) is not None


class SafeStream:
    """A text stream that escapes control characters in everything written.

    It has no ``buffer`` attribute on purpose: click writes to a text
    stream's binary buffer when it finds one it prefers, which would
    bypass the filter."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        on, off = (BOLD_ON, BOLD_OFF) if attributes_wanted(inner) else ("", "")
        self._marks = str.maketrans({HL_ON: on, HL_OFF: off})

    def write(self, text: str) -> int:
        if isinstance(text, str):
            safe = escape_controls(text)
            if HL_ON in safe or HL_OFF in safe:
                safe = safe.translate(self._marks)
            self.inner.write(safe)
        else:
            self.inner.write(text)
        return len(text)  # callers count what they gave, not what was written

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            raise AttributeError(name)
        return getattr(self.inner, name)


def raw_stderr() -> TextIO:
    """stderr without the filter, for our own progress drawing (``\\r``, cursor codes)."""
    stream = sys.stderr
    return stream.inner if isinstance(stream, SafeStream) else stream


@contextmanager
def safe_streams() -> Iterator[None]:
    """Filter ``sys.stdout`` and ``sys.stderr`` for the duration of a command."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, SafeStream):
        sys.stderr = SafeStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
