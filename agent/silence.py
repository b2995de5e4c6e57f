"""Silence stdout/stderr for one thread only (the review fork's).

`contextlib.redirect_stdout` swaps the stream for the whole process, so the
user's live turn would go quiet too. Here ``sys.stdout``/``sys.stderr`` are
wrapped, while any thread is silenced, in a proxy that drops writes from
silenced threads and forwards everything else; the last silenced thread to
leave puts the original streams back (unless someone replaced them since).
"""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

_state = threading.local()
_lock = threading.Lock()
_active = 0
_installed: dict[str, "_Proxy"] = {}


class _Proxy:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        if getattr(_state, "silenced", False):
            return len(text)
        return self._inner.write(text)

    def flush(self) -> None:
        if not getattr(_state, "silenced", False):
            self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def is_silenced() -> bool:
    return bool(getattr(_state, "silenced", False))


@contextmanager
def silenced() -> Iterator[None]:
    """Drop this thread's writes to stdout and stderr inside the block."""
    global _active
    with _lock:
        _active += 1
        for name in ("stdout", "stderr"):
            current = getattr(sys, name)
            if not isinstance(current, _Proxy):
                _installed[name] = proxy = _Proxy(current)
                setattr(sys, name, proxy)
    _state.silenced = True
    try:
        yield
    finally:
        _state.silenced = False
        with _lock:
            _active -= 1
            if _active == 0:
                for name, proxy in list(_installed.items()):
                    if getattr(sys, name) is proxy:
                        setattr(sys, name, proxy._inner)
                    del _installed[name]
