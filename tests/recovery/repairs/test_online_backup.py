"""`hermes backup create|list|verify`: online copies while writers append,
crash safety of create, rotation."""
from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.repairs import create_backup, list_backup_infos, online_backup, verify_backup
from sessiondb import SessionDB
from tests.helpers.backup_workers import content
from tests.helpers.damage import add_fts, build_store, sql
from tests.helpers.search_damage import junk_fts_blocks

ROOT = Path(__file__).resolve().parents[3]


class Writer:
    """A writer process; ``acked`` is the last index it acknowledged."""

    def __init__(self, home: Path, name: str) -> None:
        self.name = name
        self.errors = home / f"writer-{name}.err"
        with open(self.errors, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.backup_workers", str(home), name],
                stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        self.acked = -1
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.acked = int(line)

    def wait_past(self, index: int) -> None:
        """Sequencing: until this writer acknowledged ``index`` (it must not die)."""
        deadline = time.monotonic() + 60
        while self.acked < index:
            assert self.proc.poll() is None, self.errors.read_text()
            assert time.monotonic() < deadline, f"writer {self.name} stalled at {self.acked}"
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def rows_by_writer(path: Path) -> dict[str, list[str]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        out: dict[str, list[str]] = {}
        for sid, text in conn.execute("SELECT session_id, content FROM messages "
                                      "ORDER BY session_id, position"):
            out.setdefault(sid.removeprefix("writer-"), []).append(text)
        return out
    finally:
        conn.close()


def test_backup_while_two_writers_append_holds_every_acknowledged_message(
        hermes_home: Path) -> None:
    SessionDB.open(hermes_home).close()
    writers = [Writer(hermes_home, n) for n in ("a", "b")]
    try:
        for w in writers:
            w.wait_past(300)
        acked = {w.name: w.acked for w in writers}  # acknowledged before the backup began
        report = create_backup(hermes_home / "state.db", hermes_home / "backups")
        for w in writers:
            w.wait_past(acked[w.name] + 50)  # they kept writing during and after the backup
    finally:
        for w in writers:
            w.stop()
    rows = rows_by_writer(Path(report.backup.path))
    for name, last in acked.items():
        held = rows[name]
        assert len(held) > last  # every acknowledged message, in order, none half-written
        assert held == [content(name, i) for i in range(len(held))]
    assert report.backup.verified and report.backup.counts["messages"] == sum(
        len(v) for v in rows.values())


def test_backup_files_are_private_and_listed(hermes_home: Path) -> None:
    with SessionDB.open(hermes_home) as db:
        sid = db.create_session(source="t")
        db.append_message(sid, {"role": "user", "content": "hello"})
    res = CliRunner().invoke(cli, ["backup", "create", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)["backup"]
    path = Path(doc["path"])
    assert doc["verified"] and doc["sessions"] == 1 and doc["messages"] == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not Path(f"{path}-wal").exists() and not list(path.parent.glob(".*"))
    listed = json.loads(CliRunner().invoke(cli, ["backup", "list", "--json"]).stdout)
    assert [b["path"] for b in listed] == [str(path)] and listed[0]["verified"]
    res = CliRunner().invoke(cli, ["backup", "verify", str(path)])
    assert res.exit_code == 0 and "verified" in res.output


def test_progress_is_told_each_step_of_the_copy(hermes_home: Path) -> None:
    with SessionDB.open(hermes_home) as db:
        sid = db.create_session(source="t")
        db.append_messages(sid, [{"role": "user", "content": "x" * 4000} for _ in range(2000)])
    seen: list[tuple[str, int, int]] = []
    create_backup(hermes_home / "state.db", hermes_home / "backups",
                  progress=lambda *a: seen.append(a))
    copying = [(done, total) for what, done, total in seen if what == "copying pages"]
    assert len(copying) >= 2 and copying[-1][0] == copying[-1][1] > 0
    assert [d for d, _ in copying] == sorted(d for d, _ in copying)
    assert seen[-1][0] == "verifying the copy"


def test_an_interrupt_stops_the_copy_at_its_next_step_and_keeps_nothing(
        hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during the copy (which runs in a thread of its own) stops it at
    the next step instead of letting it copy the rest into a deleted file."""
    monkeypatch.setattr(online_backup, "STEP_PAGES", 8)
    with SessionDB.open(hermes_home) as db:
        sid = db.create_session(source="t")
        db.append_messages(sid, [{"role": "user", "content": os.urandom(2000).hex()}
                                 for _ in range(500)])
    steps: list[int] = []
    stops: list[threading.Event] = []
    real = online_backup._at_low_priority

    def watched(work: Any, stop: threading.Event) -> Any:  # the copy's own stop, seen
        stops.append(stop)
        return real(work, stop)
    monkeypatch.setattr(online_backup, "_at_low_priority", watched)

    def on_sigint(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    def tick(what: str, done: int, total: int) -> None:
        steps.append(done)
        if len(steps) == 2:  # as a terminal's Ctrl-C reaches the main thread
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            # this step goes on until the main thread, interrupted, has told
            # the copy to stop (a wait on that signal, not on time)
            assert stops[0].wait(30), "the interrupted caller never stopped the copy"
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            create_backup(hermes_home / "state.db", hermes_home / "backups", progress=tick)
    finally:
        signal.signal(signal.SIGINT, previous)
    for t in threading.enumerate():  # the copy's thread ends once it let go of the files
        if t.name == "hermes-backup":
            t.join(30)
    assert len(steps) == 2  # the next step saw the stop before copying more
    assert not [t for t in threading.enumerate() if t.name == "hermes-backup"]
    assert not list((hermes_home / "backups").iterdir())


def test_stale_temps_go_with_every_sidecar_their_check_left(tmp_path: Path) -> None:
    """A create killed during its check leaves the temp copy's -wal and -shm
    (its check connections open the copy); they go with the temp file, also
    when the temp file itself is already gone."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    where = tmp_path / "backups"
    where.mkdir(mode=0o700)
    left = [where / f".state-20261203T181500-804013960-{dead.pid}.db.tmp{s}"
            for s in ("", "-wal", "-shm")]
    orphan = where / f".state-20261203T181501-000000001-{dead.pid}.db.tmp-wal"
    for p in left + [orphan]:
        p.write_bytes(b"x")
    mine = where / f".state-20261203T181502-000000002-{os.getpid()}.db.tmp-wal"
    mine.write_bytes(b"x")  # a live create's: kept
    removed = online_backup.remove_stale_temps(where)
    assert sorted(removed) == sorted([str(left[0]), str(orphan)[:-len("-wal")]])
    assert sorted(where.iterdir()) == [mine]


def test_verify_reports_a_damaged_backup(hermes_home: Path) -> None:
    SessionDB.open(hermes_home).close()
    path = Path(create_backup(hermes_home / "state.db", hermes_home / "backups").backup.path)
    with open(path, "r+b") as f:  # junk over every page after page 1
        f.seek(4096)
        f.write(os.urandom(path.stat().st_size - 4096))
    assert not verify_backup(path).verified
    res = CliRunner().invoke(cli, ["backup", "verify", str(path)])
    assert res.exit_code == 1 and "does NOT verify" in res.output


def _full_quick_check(path: Path) -> list[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [ln for r in conn.execute("PRAGMA quick_check") for ln in str(r[0]).splitlines()]
    finally:
        conn.close()


def test_the_split_check_finds_what_quick_check_finds(tmp_path: Path) -> None:
    """The copy's check runs quick_check's parts in parallel (the b-trees
    with the freelist and page accounting; each FTS5 table's own check):
    sound, a smashed freelist, and a junk search index give the same
    verdict as one quick_check, and the same kinds of lines."""
    db = tmp_path / "state.db"
    build_store(db, sessions=4, per_session=60)
    add_fts(db)
    sql(db, "PRAGMA journal_mode = DELETE")
    sql(db, "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions LIMIT 2)")
    assert sql(db, "PRAGMA freelist_count")[0][0] > 0
    assert online_backup.split_quick_check(db) == _full_quick_check(db) == ["ok"]
    freelist = tmp_path / "freelist.db"
    freelist.write_bytes(db.read_bytes())
    with open(freelist, "r+b") as f:  # no free pages: the freed ones are never used
        f.seek(32)
        f.write(bytes(8))
    split = online_backup.split_quick_check(freelist)
    assert any("never used" in ln for ln in split), split
    assert any("never used" in ln for ln in _full_quick_check(freelist))
    fts = tmp_path / "fts.db"
    fts.write_bytes(db.read_bytes())
    assert junk_fts_blocks(fts, leaves_only=True) > 0
    full = _full_quick_check(fts)
    assert full != ["ok"]
    split = online_backup.split_quick_check(fts)
    assert split != ["ok"] and any("messages_fts" in ln for ln in split), (split, full)


def test_rotation_keeps_exactly_n_verified_backups(hermes_home: Path) -> None:
    with SessionDB.open(hermes_home) as db:
        sid = db.create_session(source="t")
        made = []
        for i in range(5):
            db.append_message(sid, {"role": "user", "content": f"m{i}"})
            made.append(create_backup(hermes_home / "state.db", hermes_home / "backups",
                                      keep=3).backup.path)
    kept = list_backup_infos(hermes_home / "backups")
    assert [b.path for b in kept] == made[-3:] and all(b.verified for b in kept)
    assert [b.messages for b in kept] == [3, 4, 5]
    assert sorted(p.name for p in (hermes_home / "backups").iterdir()) == sorted(
        [Path(p).name for p in made[-3:]] + [Path(p).name + ".json" for p in made[-3:]])


def test_a_foreign_file_is_copied_without_change(tmp_path: Path) -> None:
    src = tmp_path / "other.db"
    conn = apsw.Connection(str(src))
    conn.execute("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1), (2)"
                 ).fetchall()
    before = src.read_bytes()
    report = create_backup(src, tmp_path / "out", prefix="copy-other")
    after = src.read_bytes()
    conn.close()
    assert report.backup.counts == {"t": 2} and report.backup.newest_commit is None
    assert Path(report.backup.path).name.startswith("copy-other-")
    assert before == after


def test_kill_9_of_create_leaves_no_partial_backup(hermes_home: Path) -> None:
    with SessionDB.open(hermes_home) as db:
        sid = db.create_session(source="t")
        for b in range(20):
            db.append_messages(sid, [{"role": "user", "content": f"{b}-{i} " + "x" * 1000}
                                     for i in range(500)])
    where = hermes_home / "backups"
    argv = [sys.executable, "-c", "from hstate_cli.main import main; main()", "--home", str(hermes_home), "backup",
            "create", "--keep", "100"]
    started = time.monotonic()
    subprocess.run(argv + ["--help"], check=True, capture_output=True, cwd=ROOT)
    startup = time.monotonic() - started
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    whole = time.monotonic() - started
    rng = random.Random(34)
    for _ in range(8):  # kill points spread over the copy, the check and the rename
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, cwd=ROOT)
        time.sleep(rng.uniform(startup * 0.8, whole))
        proc.kill()
        proc.wait()
        for info in list_backup_infos(where):
            assert info.verified and verify_backup(Path(info.path)).verified, info.path
        assert all(p.name.startswith(".") or p.name.endswith((".db", ".db.json"))
                   for p in where.iterdir())
    report = create_backup(hermes_home / "state.db", where, keep=100)
    assert not [p for p in where.iterdir() if p.name.startswith(".")]
    assert report.backup.messages == 10_000



def test_a_source_that_is_not_sqlite_is_named_so_and_left_alone(hermes_home: Path,
                                                                tmp_path: Path) -> None:
    """Before: "The session database ... is damaged" and a recover command,
    for a text file given to --source."""
    text = tmp_path / "notes.db"
    text.write_text("hello\n")
    res = CliRunner().invoke(cli, ["backup", "create", "--source", str(text)])
    assert res.exit_code == 1 and res.output.splitlines() == [
        f"Error: {text} is not an SQLite database: nothing to back up"]
    assert text.read_text() == "hello\n" and not (hermes_home / "backups").exists()
