"""The JSONL spool: file format and modes, idempotent import, torn lines, CLI."""
from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import Cause, InvalidInput, SessionDB, StoreCorrupt, strip_markers
from sessiondb.rows.codec import UID_KEY, encode
from sessiondb.importers.spool_import import (import_spool, message_records, spool_dir_for, spool_failed_write,
                             write_records)

pytestmark = pytest.mark.both_backends


def msg(i: int, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": f"secret words {i}", "timestamp": 1_700_000_000.0 + i,
            **extra}


def spool(db: SessionDB, sid: str, batch: list[dict[str, Any]],
          cause: Cause = Cause.CORRUPT) -> Path:
    """Spool ``batch`` exactly as a failed append does."""
    err = StoreCorrupt("test", path=str(db.path))
    err.cause = cause
    path = spool_failed_write(db.core, sid, batch, err)
    assert path is not None and err.spooled_to == str(path)
    return path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_spool_file_format_and_modes(db: SessionDB, sid: str) -> None:
    first, second = [msg(0), msg(1, name="x")], [msg(2)]
    path = spool(db, sid, first)
    spool(db, sid, second, Cause.DISK_FULL)
    assert path == spool_dir_for(db.path) / f"{sid}.jsonl"
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["kind"] == "session" and lines[0]["session_id"] == sid
    assert lines[0]["source"] == "test" and lines[0]["model"] == "m"
    assert [x["kind"] for x in lines[1:]] == ["message"] * 3  # one session line only
    assert [x["message"] for x in lines[1:]] == strip_markers(first + second)
    assert [x["cause"] for x in lines[1:]] == ["corrupt", "corrupt", "disk_full"]
    assert all(x["uid"] for x in lines[1:])


def test_unsafe_session_id_never_becomes_a_file_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        write_records(tmp_path / "spool", "../escape", [], {})
    assert not (tmp_path / "escape.jsonl").exists()


def test_import_is_idempotent_by_uid(db: SessionDB, sid: str) -> None:
    written = [msg(0)]
    db.append_messages(sid, written)
    spooled = [msg(1), msg(2)]
    spool(db, sid, written + spooled)  # the first one is already in the store
    report = import_spool(db)
    assert (report.imported, report.already_present) == (2, 1)
    assert strip_markers(db.get_messages(sid)) == strip_markers(written + spooled)
    assert report.files[0].moved_to and Path(report.files[0].moved_to).parent.name == "imported"
    # Running it again, or with the same file put back, changes nothing.
    assert import_spool(db).files == []
    moved = Path(report.files[0].moved_to)
    moved.rename(spool_dir_for(db.path) / f"{sid}.jsonl")
    again = import_spool(db)
    assert (again.imported, again.already_present) == (0, 3)
    assert strip_markers(db.get_messages(sid)) == strip_markers(written + spooled)
    assert db.get_session(sid).message_count == 3


def test_import_keeps_timestamps_and_creates_missing_sessions(db: SessionDB, tmp_path: Path,
                                                              open_store) -> None:
    db.create_session("lost", source="agent", model="claude", title="Trip")
    batch = [{"role": "user", "content": "no timestamp given"}]
    spool(db, "lost", batch)
    stamped = json.loads((spool_dir_for(db.path) / "lost.jsonl").read_text().splitlines()[1])
    other = open_store(tmp_path / "other" / "state.db")
    import_spool(other, spool_dir=spool_dir_for(db.path))
    session = other.get_session("lost")
    assert (session.source, session.model, session.title) == ("agent", "claude", "Trip")
    with other._read() as conn:
        (ts,) = conn.execute("SELECT timestamp FROM messages").fetchone()
    assert ts == stamped["timestamp"]
    assert strip_markers(other.get_messages("lost")) == strip_markers(batch)


def test_torn_last_line_is_tolerated_and_reported(db: SessionDB, sid: str) -> None:
    kept = [msg(0), msg(1)]
    path = spool(db, sid, kept)
    torn = json.dumps(message_records(sid, [msg(2)], [encode(msg(2))], Cause.CORRUPT)[0])
    with open(path, "a") as f:
        f.write(torn[: len(torn) // 2])  # a crash in the middle of an append
    report = import_spool(db)
    result = report.files[0]
    assert result.truncated_last_line == 4 and result.bad_lines == []
    assert result.imported == 2
    assert strip_markers(db.get_messages(sid)) == strip_markers(kept)
    assert result.moved_to is not None and not path.exists()


def test_unreadable_middle_line_keeps_the_file_untouched(db: SessionDB, sid: str) -> None:
    path = spool(db, sid, [msg(0)])
    with open(path, "a") as f:
        f.write("{not json\n")
    spool(db, sid, [msg(1)])
    before = path.read_bytes()
    report = import_spool(db)
    assert report.problems and report.files[0].bad_lines == [3]
    assert report.imported == 0 and db.get_messages(sid) == []
    assert path.read_bytes() == before
    res = CliRunner().invoke(cli, ["sessions", "import-spool", "--json"])
    assert res.exit_code == 1
    assert json.loads(res.output)["files"][0]["bad_lines"] == [3]


def test_dry_run_changes_nothing(db: SessionDB, sid: str) -> None:
    path = spool(db, sid, [msg(0), msg(1)])
    before = path.read_bytes()
    report = import_spool(db, dry_run=True)
    assert report.imported == 2 and report.files[0].moved_to is None
    assert db.get_messages(sid) == [] and path.read_bytes() == before


def test_a_write_after_an_import_starts_a_new_file(db: SessionDB, sid: str) -> None:
    spool(db, sid, [msg(0)])
    import_spool(db)
    path = spool(db, sid, [msg(1)])
    first = json.loads(path.read_text().splitlines()[0])
    assert first["kind"] == "session"
    import_spool(db)
    assert strip_markers(db.get_messages(sid)) == [msg(0), msg(1)]
    # The spooled dicts carry their uid, so retrying them is a no-op.
    retry = msg(2)
    spool(db, sid, [retry])
    assert retry[UID_KEY]
    db.append_message(sid, retry)
    import_spool(db)
    assert len(db.get_messages(sid)) == 3


def test_non_spool_causes_are_not_spooled(db: SessionDB, sid: str) -> None:
    for cause in (Cause.LOCKED, Cause.FTS_INDEX, Cause.INVALID_INPUT, Cause.LEASE_LOST):
        err = StoreCorrupt("x")
        err.cause = cause
        assert spool_failed_write(db.core, sid, [msg(0)], err) is None
        assert err.spooled_to is None
    assert not list(spool_dir_for(db.path).glob("*.jsonl"))  # only the reserve


def test_cli_import_spool(db: SessionDB, sid: str) -> None:
    batch = [msg(0), msg(1)]
    for m in batch:
        m[UID_KEY] = f"uid-{m['timestamp']}"
    spool(db, sid, batch)
    dry = CliRunner().invoke(cli, ["sessions", "import-spool", "--dry-run", "--json"])
    assert dry.exit_code == 0
    doc = json.loads(dry.output)
    assert doc["dry_run"] is True and doc["imported"] == 2
    assert "secret words" not in dry.output  # reports never carry message text
    res = CliRunner().invoke(cli, ["sessions", "import-spool"])
    assert res.exit_code == 0
    assert "imported 2 message(s); 0 were already in the store" in res.output
    assert "secret words" not in res.output
    assert len(db.get_messages(sid)) == 2
    res = CliRunner().invoke(cli, ["sessions", "import-spool"])
    assert res.output.startswith("nothing to import")
