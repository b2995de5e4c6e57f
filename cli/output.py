"""Output helpers shared by every command: JSON documents and tables."""
from __future__ import annotations

import json
import shutil
import time
from typing import Any, Iterable, Sequence

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
