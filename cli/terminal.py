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
"""
from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

# C0 except tab and newline, DEL, C1 (includes the 8-bit CSI U+009B, DCS
# U+0090, OSC U+009D, ST U+009C), the line/paragraph separators, and the bidi
# embeddings, overrides and isolates ("Trojan Source").
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _spell(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_controls(text: str) -> str:
    """``text`` with every terminal control character spelled ``\\uXXXX``."""
    return _UNSAFE.sub(_spell, text)


def has_controls(text: str) -> bool:
    return _UNSAFE.search(text) is not None


class SafeStream:
    """A text stream that escapes control characters in everything written.

    It has no ``buffer`` attribute on purpose: click writes to a text
    stream's binary buffer when it finds one it prefers, which would
    bypass the filter."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(escape_controls(text) if isinstance(text, str) else text)
        return len(text)

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
