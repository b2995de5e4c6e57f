"""Importing Claude Code transcripts beside the store's own import, same messages, same run.

Generates ``--lines`` lines of Claude Code transcripts (``--files`` files
in one project directory: prompts, replies split over two lines like the
client writes them, tool calls and results with the bulky ``toolUseResult``
the client keeps beside them, file-history snapshots and progress lines),
imports them with ``sessions import --from claude-code`` into an empty
home, exports that home with ``sessions export`` (our own JSONL) and
imports the export into a second empty home (the store's own import path,
the peer). Both are timed as library calls in this process, in alternating
rounds (medians; the machine may be shared); the goal is Claude Code
messages/s >= the store's own import's messages/s on the same messages.
The Claude Code import runs twice a round: with the files' first pass in
read-ahead workers (sessiondb/importers/log_prescan.py; forced on here,
``sessions import`` uses them only when a core is idle) and with every
file read in-process.

    python bench/import_logs.py                 # 100,000 lines in 100 files
    python bench/import_logs.py --lines 20000 --files 20
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sessiondb import SessionDB  # noqa: E402
from sessiondb.importers import import_export_file, import_logs, log_prescan  # noqa: E402
from sessiondb.maintenance.export import export_to_path  # noqa: E402
from tests.helpers import agent_logs as a  # noqa: E402

WORDS = ("parser header record offset cache index page retry socket timeout schema "
         "migration session transcript token budget worker queue lock commit").split()


def _text(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n)) + f" n{i}"


def _cycle(sid: str, i: int, prev: str) -> list[dict]:
    """Ten lines of one exchange: 8 messages (7 message lines), 3 other lines."""
    ts = f"2026-01-20T{10 + i // 36000 % 10:02d}:{i // 600 % 60:02d}:{i // 10 % 60:02d}.000Z"
    u = [f"{sid[:8]}-{i + k:09d}" for k in range(7)]
    return [
        a.cc_user(u[0], prev, ts, _text(i, 25), session=sid),
        {"type": "file-history-snapshot", "messageId": u[0], "snapshot": {"trackedFileBackups": {}},
         "isSnapshotUpdate": False},
        a.cc_assistant(u[1], u[0], ts, [{"type": "text", "text": _text(i + 1, 40)}],
                       msg_id=f"msg_{i}", session=sid),
        a.cc_assistant(u[2], u[1], ts, [a.tool_use(f"toolu_{i}", "Read",
                                                   {"file_path": "/src/app.py"})],
                       msg_id=f"msg_{i}", session=sid),
        {"type": "progress", "data": {"type": "hook_progress"}, "uuid": f"p{i}",
         "timestamp": ts, "sessionId": sid},
        a.cc_user(u[3], u[2], ts, [a.tool_result(f"toolu_{i}", _text(i + 2, 120))],
                  session=sid, toolUseResult={"type": "text", "file": {
                      "filePath": "/src/app.py", "content": _text(i + 3, 400)}}),
        a.cc_assistant(u[4], u[3], ts, [{"type": "thinking", "thinking": _text(i + 4, 30),
                                         "signature": "s"},
                                        a.tool_use(f"toolu_b{i}", "Bash", {"command": "pytest"})],
                       msg_id=f"msg_b{i}", session=sid),
        a.cc_user(u[5], u[4], ts, [a.tool_result(f"toolu_b{i}", _text(i + 5, 60))], session=sid),
        {"type": "system", "subtype": "stop_hook_summary", "uuid": f"s{i}", "timestamp": ts},
        a.cc_assistant(u[6], u[5], ts, [{"type": "text", "text": _text(i + 6, 60)}],
                       msg_id=f"msg_c{i}", session=sid),
    ]


def write_project(root: Path, lines: int, files: int) -> Path:
    project = root / "projects" / "-src-app"
    per_file = lines // files
    for f in range(files):
        sid = f"{f:08x}-0000-4000-8000-000000000000"
        with open(project.mkdir(parents=True, exist_ok=True) or project / f"{sid}.jsonl",
                  "w") as out:
            prev = None
            for i in range(0, per_file, 10):
                for line in _cycle(sid, f * per_file + i, prev):
                    out.write(json.dumps(line) + "\n")
                prev = f"{sid[:8]}-{f * per_file + i + 6:09d}"
    return project


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the index builders)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds, result) of ``fn()``."""
    t, c = time.perf_counter(), _cpu()
    out = fn()
    return time.perf_counter() - t, _cpu() - c, out


def one_round(root: Path, project: Path, k: int) -> dict:
    """Both imports into fresh homes, opened as `sessions import` opens them
    (no background indexer: the import drives the index)."""
    free, log_prescan.cores_free = log_prescan.cores_free, lambda: True  # workers, whatever the load
    try:
        with SessionDB.open(root / f"cc{k}", background_index=False) as db:
            cc_s, cc_cpu, report = timed(lambda: import_logs(db, "claude-code", [project]))
    finally:
        log_prescan.cores_free = free
    with SessionDB.open(root / f"cc{k}") as db:
        export = root / f"export{k}.jsonl"
        export_to_path(db.core, None, "jsonl", export)
    workers, log_prescan.MIN_BYTES = log_prescan.MIN_BYTES, 1 << 62  # every file in-process
    try:
        with SessionDB.open(root / f"cc_here{k}", background_index=False) as db:
            here_s, here_cpu, _ = timed(lambda: import_logs(db, "claude-code", [project]))
    finally:
        log_prescan.MIN_BYTES = workers
    with SessionDB.open(root / f"own{k}", background_index=False) as db:
        own_s, own_cpu, own = timed(lambda: import_export_file(db, export))
    totals = report.totals()
    return {"cc_s": cc_s, "own_s": own_s, "here_s": here_s, "here_cpu": here_cpu, "cc_cpu": cc_cpu, "own_cpu": own_cpu, "messages": totals["messages_added"],
            "own_messages": own.messages_added, "lines": totals["lines"],
            "files": totals["files"], "sessions": totals["sessions_created"],
            "cc_index": totals["index_build"], "own_index": own.index_build}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project = write_project(root, args.lines, args.files)
        mb = sum(p.stat().st_size for p in project.iterdir()) / 1e6
        rounds = [one_round(root, project, k) for k in range(args.rounds)]
        r0 = rounds[0]
        cc_s = statistics.median(r["cc_s"] for r in rounds)
        own_s = statistics.median(r["own_s"] for r in rounds)
        cc_cpu = statistics.median(r["cc_cpu"] for r in rounds)
        own_cpu = statistics.median(r["own_cpu"] for r in rounds)
        here_s = statistics.median(r["here_s"] for r in rounds)
        here_cpu = statistics.median(r["here_cpu"] for r in rounds)
        n = r0["messages"]
        assert r0["own_messages"] == n, rounds  # the same messages, both ways
        doc = {"lines": r0["lines"], "files": r0["files"], "transcript_mb": round(mb, 1),
               "messages": n, "sessions": r0["sessions"], "rounds": args.rounds,
               "claude_code_s": round(cc_s, 2), "claude_code_msg_per_s": round(n / cc_s),
               "claude_code_lines_per_s": round(r0["lines"] / cc_s),
               "own_import_s": round(own_s, 2), "own_import_msg_per_s": round(n / own_s),
               "ratio": round(own_s / cc_s, 2),
               "claude_code_cpu_s": round(cc_cpu, 2), "own_import_cpu_s": round(own_cpu, 2),
               "ratio_cpu": round(own_cpu / cc_cpu, 2),
               "in_process_s": round(here_s, 2), "in_process_msg_per_s": round(n / here_s),
               "in_process_cpu_s": round(here_cpu, 2),
               "ratio_in_process": round(own_s / here_s, 2),
               "index_build": {"claude_code": r0["cc_index"], "own": r0["own_index"]},
               "all_rounds_s": [(round(r["cc_s"], 2), round(r["here_s"], 2), round(r["own_s"], 2))
                         for r in rounds],
               "load_average": os.getloadavg()[0]}
        doc["goal_met"] = doc["ratio"] >= 1.0  # messages/s, wall clock
        print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
