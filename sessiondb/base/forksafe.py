"""Fork safety for the store's background threads (checkpointer, indexer).

Each kind keeps a `ForkRegistry` of its live objects. Before a fork every
object takes its own lock (so the child never inherits one held by a
thread that does not exist there); after it the parent releases them in
reverse order and the child resets each object's process state.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Callable, Generic, Protocol, TypeVar


class ForkAware(Protocol):
    def _before_fork(self) -> None: ...
    def _after_fork_parent(self) -> None: ...
    def _after_fork_child(self) -> None: ...


T = TypeVar("T", bound=ForkAware)


class ForkRegistry(Generic[T]):
    """The live objects of one kind, told about every fork of the process."""

    def __init__(self) -> None:
        self._live: "weakref.WeakSet[T]" = weakref.WeakSet()
        self._forking: list[T] = []
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self._before, after_in_parent=self._parent,
                                after_in_child=self._child)

    def add(self, obj: T) -> None:
        self._live.add(obj)

    def discard(self, obj: T) -> None:
        self._live.discard(obj)

    def _before(self) -> None:
        self._forking[:] = list(self._live)
        for obj in self._forking:
            obj._before_fork()

    def _parent(self) -> None:
        for obj in reversed(self._forking):
            obj._after_fork_parent()
        self._forking.clear()

    def _child(self) -> None:
        for obj in self._forking:
            obj._after_fork_child()
        self._forking.clear()


class ThreadOwner:
    """What the checkpointer and the indexer share: one daemon thread per
    process, started on the first wake-up and woken by an event. The owner
    sets ``_pid``, ``_state`` (a lock guarding ``_thread`` against lost
    wake-ups), ``_wake`` and ``_thread``, and hands `_wake_thread` the
    thread's body and its fresh start after a fork."""

    _pid: int
    _state: threading.Lock
    _wake: threading.Event
    _quit: threading.Event
    _stopping: bool
    _thread: threading.Thread | None

    def _wake_thread(self, name: str, run: Callable[[], None],
                     new_process_state: Callable[[], None]) -> None:
        """Set the wake event, starting a thread on ``run`` if none runs here
        (after a fork without our at-fork hook, ``new_process_state`` resets
        the parent's state first)."""
        if os.getpid() != self._pid:
            new_process_state()
        with self._state:
            self._wake.set()
            if self._thread is None:
                thread = threading.Thread(target=run, name=name, daemon=True)
                self._thread = thread
                thread.start()

    def _stop_thread(self) -> bool:
        """Tell the thread to quit and join it (unless it is the caller).
        False in a forked child: the thread and its connection are the
        parent's, so the caller must leave them alone."""
        self._stopping = True
        if os.getpid() != self._pid:
            return False
        self._quit.set()
        with self._state:
            thread = self._thread
            self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        return True
