"""Output helpers shared by every command: JSON documents and tables."""
from __future__ import annotations

import json
import re
import shutil
import sys
import textwrap
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

import click
from tabulate import tabulate

from .terminal import Escaped, escape_controls, escape_text, raw_stderr


def emit_json(document: Any) -> None:
    """One JSON document on stdout, keys sorted so output is stable."""
    click.echo(json.dumps(document, ensure_ascii=False, indent=2, sort_keys=True, default=str))


def fmt_time(ts: float | None) -> str:
    """Local time to the minute; a stored value no calendar can hold (a row
    written before times were range-checked) is shown as the number."""
    if ts is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))
    except (OverflowError, OSError, ValueError, TypeError):
        return f"{ts!r} (out of range)"


_SPACES = re.compile(r"[ \t\n\r\f\v]+")


def shorten(text: str, width: int) -> str:
    """One line of at most ``width`` characters. Only ASCII white space folds
    to a space: str.split() would also fold U+2028, U+0085 and the like,
    which the table spells out as controls (``\u2028``) instead."""
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 message``, ``2 messages`` (``many`` for irregular plurals)."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def paragraph(text: str) -> None:
    """Free text wrapped to the terminal width (long words broken, not cut)."""
    click.echo(textwrap.fill(escape_text(text), terminal_width(), break_long_words=True,
                             break_on_hyphens=False))


def terminal_width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


COLUMN_GAP = 2  # tabulate's "simple" format puts two spaces between columns
HEADER_PAD = 2  # ... and makes each column two wider than its header
MIN_COLUMN = 10  # narrower than this a wrapped column is unreadable; overflow instead


def _cell(value: Any) -> Any:
    if isinstance(value, Escaped) or not isinstance(value, str):
        return value
    return escape_text(value)


def _line_width(value: Any) -> int:
    return max((len(line) for line in str(value).split("\n")), default=0)


def column_cap(widths: list[int], budget: int,
               floors: list[int] | None = None) -> int | None:
    """The largest width every column may keep so the row fits ``budget``
    (the widest columns give up the most), or None when it already fits.

    Without ``floors`` a column may shrink to MIN_COLUMN (below that the
    table overflows instead). With ``floors`` (each column's longest word)
    no column shrinks below its floor, and None is returned when even the
    floors do not fit."""
    if sum(widths) <= budget:
        return None
    if floors is None:
        floors, lo = [MIN_COLUMN] * len(widths), MIN_COLUMN
    else:
        lo = 1

    def total(cap: int) -> int:
        return sum(min(w, max(cap, f)) for w, f in zip(widths, floors))
    if lo == 1 and total(1) > budget:
        return None
    hi = max(widths)
    while lo < hi:  # largest cap whose capped widths still fit
        mid = (lo + hi + 1) // 2
        if total(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _longest_word(value: Any) -> int:
    return max((len(word) for word in str(value).split()), default=0)


def _wrap(value: Any, cap: int, break_words: bool = True) -> Any:
    if not isinstance(value, str) or _line_width(value) <= cap:
        return value
    return "\n".join(line for part in value.split("\n") for line in
                     (textwrap.wrap(part, cap, break_long_words=break_words,
                                    break_on_hyphens=False) or [""]))


def fit_rows(rows: list[list[Any]], headers: list[str],
             width: int) -> tuple[list[list[Any]], list[str]]:
    """Rows and headers wrapped so each table line fits ``width``: first at
    spaces only, words kept whole (``background_review`` stays one word);
    only when that cannot fit are long words (ids, paths) broken too."""
    budget = width - COLUMN_GAP * (len(headers) - 1)
    widths = [max([len(h) + HEADER_PAD, *(_line_width(r[i]) for r in rows)])
              for i, h in enumerate(headers)]
    if sum(widths) <= budget:
        return rows, headers
    floors = [max([_longest_word(h) + HEADER_PAD, *(_longest_word(r[i]) for r in rows), 1])
              for i, h in enumerate(headers)]
    fitted = column_cap(widths, budget, floors)
    broken = fitted is None
    cap = (column_cap(widths, budget) or MIN_COLUMN) if fitted is None else fitted
    return ([[_wrap(v, cap, broken) for v in r] for r in rows],
            [_wrap(h, cap - HEADER_PAD, broken) if len(h) + HEADER_PAD > cap else h
             for h in headers])


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> None:
    """A table sized to the terminal: control characters escaped, the widest
    columns wrapped (never cut) when a line would be wider than the terminal."""
    cells = [[_cell(v) for v in r] for r in rows]
    heads = [escape_controls(h) for h in headers]
    fitted, heads = fit_rows(cells, heads, terminal_width())
    click.echo(tabulate(fitted, headers=heads, tablefmt="simple"))


@contextmanager
def progress(total: int | None, label: str) -> Iterator[Callable[[int], None] | None]:
    """A progress callback drawing a bar on stderr, or None when stderr is not a
    terminal (pipes and files get no bar and no control codes)."""
    stream = raw_stderr()  # the bar's own CR and cursor codes must reach the terminal
    if not total or not stream.isatty():
        yield None
        return
    with click.progressbar(length=total, label=label, file=stream) as bar:
        yield bar.update


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
