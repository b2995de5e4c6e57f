"""A one-line progress display for commands that run in phases (recover:
snapshot, inspection, each lane, writing, building, verifying).

Drawn on stderr only when it is a terminal (the caller checks), so pipes,
files and ``--json`` output never see it. A phase that knows its total
gets a bar and a percentage, one that does not a running count; redraws
are at most ten a second, whatever the rate of calls.
"""
from __future__ import annotations

import time
from typing import Callable, TextIO

from .terminal import raw_stderr

WIDTH = 24
EVERY_S = 0.1


class PhaseBar:
    """``(what, done, total)`` callback drawing one line; call `done` at the end."""

    def __init__(self, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or raw_stderr()
        self.clock = clock
        self.last = -EVERY_S
        self.width = 0  # characters of the line drawn last, to blank what is left

    def __call__(self, what: str, done: int, total: int) -> None:
        now = self.clock()
        if now - self.last < EVERY_S and not (total and done >= total):
            return
        self.last = now
        self.draw(line(what, done, total))

    def draw(self, text: str) -> None:
        pad = " " * max(self.width - len(text), 0)
        self.stream.write(f"\r{text}{pad}")
        self.stream.flush()
        self.width = len(text)

    def done(self) -> None:
        if self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0


def line(what: str, done: int, total: int) -> str:
    """``copying messages [#######-----------------]  31% 3100/10000``."""
    if not total:
        return f"{what}: {done:,}"
    frac = min(max(done / total, 0.0), 1.0)
    filled = int(frac * WIDTH)
    return f"{what} [{'#' * filled}{'-' * (WIDTH - filled)}] {int(frac * 100):3d}% {done:,}/{total:,}"
