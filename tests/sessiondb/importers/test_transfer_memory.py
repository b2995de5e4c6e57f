"""`sessions import` and `sessions import-spool` in bounded memory: ten times
the input moves peak RSS (of a real CLI process) by far less than the input.
(Export of a long session: tests/sessiondb/store/test_paging.py.)"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sessiondb import SessionDB
from sessiondb.maintenance.export import EXPORT_FORMAT, EXPORT_VERSION

ROOT = Path(__file__).resolve().parents[3]
RUN = ("import resource, sys\nfrom hstate_cli.main import cli\n"
       "try:\n    cli(sys.argv[1:], standalone_mode=False)\nfinally:\n"
       "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")
TEXT = "lorem ipsum dolor " * 55  # ~1 KB a message


def peak_kb(home: Path, *args: str) -> int:
    done = subprocess.run([sys.executable, "-c", RUN, "--home", str(home), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return int(done.stderr.strip().splitlines()[-1])


def write_export(path: Path, messages: int, per_session: int = 1000) -> None:
    """A hermes JSONL export written directly (the importer checks every line)."""
    with open(path, "w") as f:
        f.write(json.dumps({"type": "header", "format": EXPORT_FORMAT,
                            "version": EXPORT_VERSION}) + "\n")
        sessions = 0
        for i in range(messages):
            if i % per_session == 0:
                sessions += 1
                sid = f"20250101_000000_{sessions:08x}"
                f.write(json.dumps({"type": "session", "session": {
                    "id": sid, "source": "t", "started_at": 1.7e9, "updated_at": 1.7e9}}) + "\n")
            f.write(json.dumps({"type": "message", "session_id": sid, "uid": f"u{i}",
                                "timestamp": 1.7e9 + i, "state": "active",
                                "compaction_id": None, "kind": "message",
                                "message": {"role": "user", "content": f"m{i} {TEXT}"}}) + "\n")
        f.write(json.dumps({"type": "end", "sessions": sessions, "messages": messages}) + "\n")


def test_import_of_ten_times_the_messages_stays_within_a_small_rss_margin(tmp_path):
    peaks = {}
    for name, n in (("small", 2_000), ("large", 20_000)):
        export = tmp_path / f"{name}.jsonl"
        write_export(export, n)
        peaks[name] = peak_kb(tmp_path / name, "sessions", "import", str(export), "--json")
        with SessionDB.open(tmp_path / name) as db:
            assert db.count_messages() == n
            assert db.index_backlog().empty  # the import drove the index to date
    # 18 MB more messages; holding them (or the index build) in memory would add more
    assert peaks["large"] - peaks["small"] < 8 * 1024, peaks


def write_spool(home: Path, messages: int) -> None:
    spool = home / "spool"
    spool.mkdir(parents=True, mode=0o700, exist_ok=True)
    with open(spool / "20250101_000000_0000abcd.jsonl", "w") as f:
        f.write(json.dumps({"kind": "session", "session_id": "20250101_000000_0000abcd",
                            "source": "t"}) + "\n")
        for i in range(messages):
            f.write(json.dumps({"kind": "message", "session_id": "20250101_000000_0000abcd",
                                "uid": f"u{i}", "timestamp": 1.7e9 + i,
                                "message": {"role": "user", "content": f"m{i} {TEXT}"}}) + "\n")


def test_import_spool_of_ten_times_the_messages_stays_within_a_small_rss_margin(tmp_path):
    peaks = {}
    for name, n in (("small", 2_000), ("large", 20_000)):
        home = tmp_path / name
        with SessionDB.open(home):
            pass
        write_spool(home, n)
        peaks[name] = peak_kb(home, "sessions", "import-spool", "--json")
        with SessionDB.open(home) as db:
            assert db.count_messages() == n
    assert peaks["large"] - peaks["small"] < 8 * 1024, peaks
