"""Processes for the checkpointer tests (run as ``python -m``).

``fork PATH``: a parent whose checkpointer thread is busy forks; the child
checks what it inherited and uses the handle past the threshold while the
parent waits, then exits; the parent keeps writing. Prints one JSON line.

``append PATH JOURNAL START``: appends one message per commit with a small
threshold, forever, and writes each acknowledged text to JOURNAL (after
`append_message` returned), for kill -9 tests.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

THRESHOLD = 64


def text(tag: str, i: int) -> dict:
    return {"role": "user", "content": f"{tag} {i} " + "lorem ipsum dolor " * 12}


def _child(db) -> int:
    """0 when the inherited checkpointer was forgotten and one works here."""
    ck = db._checkpointer
    if ck._thread is not None or ck._conn is not None or ck._pid != os.getpid():
        return 3
    before = ck.stats.background
    for i in range(200):  # the inherited handle, while the parent waits
        db.append_message("child", text("child", i))
    thread = ck._thread
    ck.close()  # joins the child's own thread
    return 0 if ck.stats.background > before and thread is not None else 5


def fork(path: str) -> dict:
    from sessiondb import SessionDB
    db = SessionDB(path, checkpoint_pages=THRESHOLD)
    db.create_session("parent", source="fork")
    db.create_session("child", source="fork")
    for i in range(200):
        db.append_message("parent", text("parent", i))
    alive = db._checkpointer._thread is not None
    before = db.checkpoint_stats.background
    pid = os.fork()
    if pid == 0:
        try:
            code = _child(db)
        except BaseException:
            traceback.print_exc()
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    for i in range(200, 400):
        db.append_message("parent", text("parent", i))
    after = db.checkpoint_stats.background
    counts = {s: len(db.get_messages(s)) for s in ("parent", "child")}
    check = db.quick_check()
    db.close()
    return {"alive_at_fork": alive, "child_exit": os.waitstatus_to_exitcode(status),
            "background_before": before, "background_after": after, "counts": counts,
            "quick_check": check}


def append(path: str, journal: str, start: int) -> None:
    from sessiondb import SessionDB
    db = SessionDB(path, checkpoint_pages=THRESHOLD)
    db.create_session("crash", source="crash")
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    print("ready", flush=True)
    i = start
    while True:
        msg = text("acked", i)
        db.append_message("crash", msg)
        os.write(fd, (msg["content"] + "\n").encode())  # acknowledged: the call returned
        i += 1


if __name__ == "__main__":
    if sys.argv[1] == "fork":
        print(json.dumps(fork(sys.argv[2])))
    else:
        append(sys.argv[2], sys.argv[3], int(sys.argv[4]))
