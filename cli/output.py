"""Output helpers shared by every command: JSON documents and tables."""
from __future__ import annotations

import json
import shutil
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

import click
from tabulate import tabulate


def emit_json(document: Any) -> None:
    """One JSON document on stdout, keys sorted so output is stable."""
    click.echo(json.dumps(document, ensure_ascii=False, indent=2, sort_keys=True, default=str))


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def terminal_width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> None:
    click.echo(tabulate(list(rows), headers=list(headers), tablefmt="simple"))


@contextmanager
def progress(total: int | None, label: str) -> Iterator[Callable[[int], None] | None]:
    """A progress callback drawing a bar on stderr, or None when stderr is not a
    terminal (pipes and files get no bar and no control codes)."""
    stream = sys.stderr
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
