"""doctor's `backups` (newest verified backup's age) and `replication`
(a Litestream sidecar beside the store) checks."""
from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.repairs import create_backup
from sessiondb import SessionDB
from sessiondb.recovery_api import record_damage


def finding(check: str) -> dict:
    res = CliRunner().invoke(cli, ["doctor", "--json"])
    doc = json.loads(res.stdout)
    found = [f for f in doc["findings"] if f["id"] == check]
    assert len(found) == 1, found
    return found[0]


def test_backups_age_is_reported_and_warned_past_the_maximum(
        hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    SessionDB.open(hermes_home).close()
    f = finding("backups")
    assert f["severity"] == "info" and "no backups yet" in f["message"]
    assert f["fix"].endswith("backup create")
    path = Path(create_backup(hermes_home / "state.db", hermes_home / "backups").backup.path)
    f = finding("backups")
    assert f["severity"] == "ok" and path.name in f["message"]
    manifest = Path(f"{path}.json")
    doc = json.loads(manifest.read_text())
    doc["created"] = time.time() - 30 * 3600
    manifest.write_text(json.dumps(doc))
    f = finding("backups")
    assert f["severity"] == "warn" and "30.0 h old" in f["message"]
    monkeypatch.setenv("HERMES_BACKUP_MAX_AGE_HOURS", "48")
    assert finding("backups")["severity"] == "ok"


def test_a_store_recorded_as_damaged_is_not_offered_a_backup(hermes_home: Path) -> None:
    """A backup of a damaged file fails its own check: doctor must not print
    `backup create` as the next step for it (it did, beside the damage record)."""
    SessionDB.open(hermes_home).close()
    record_damage(hermes_home / "state.db", "quick_check: page 4 is never used", "doctor")
    f = finding("backups")
    assert f["severity"] == "info" and f["fix"] is None
    assert "recorded as damaged" in f["message"]
    assert not list((hermes_home / "backups").glob("*.db"))


def ltx_header(txid: int, wal_offset: int, wal_size: int, salts: tuple[int, int]) -> bytes:
    return struct.pack(">4sIIIQQqQqqII", b"LTX1", 0, 4096, 10, txid, txid,
                       int(time.time() * 1000), 0, wal_offset, wal_size, *salts) + bytes(28)


def test_replication_recognises_a_litestream_sidecar(hermes_home: Path) -> None:
    SessionDB.open(hermes_home).close()
    f = finding("replication")
    assert f["severity"] == "ok" and "not replicated" in f["message"]
    ltx = hermes_home / ".state.db-litestream" / "ltx" / "0"
    ltx.mkdir(parents=True)
    assert finding("replication")["severity"] == "warn"
    (ltx / "0000000000000007-0000000000000007.ltx").write_bytes(ltx_header(7, 32, 4120, (1, 2)))
    f = finding("replication")
    assert f["severity"] == "warn" and "TXID 7" in f["message"]
    assert "no Litestream process holds the store" in f["message"]
    assert f["data"]["txid"] == 7 and f["data"]["litestream_pids"] == []
    os.utime(ltx / "0000000000000007-0000000000000007.ltx", (0, 0))
    assert "last sync" in finding("replication")["message"]


def test_replication_reads_litestream_0_3s_generations_layout(hermes_home: Path) -> None:
    """Litestream 0.3 keeps ``generation`` and ``generations/<id>/wal/<index>.wal``
    (shadow copies of the WAL, header first) instead of LTX files; the layout
    as the 0.3.13 binary writes it (`python bench/litestream.py legacy` runs
    the real binary)."""
    side = hermes_home / ".state.db-litestream"
    wal_dir = side / "generations" / "9b1c0843f1806d91" / "wal"
    with SessionDB.open(hermes_home) as db:  # open: its WAL stays
        db.append_message(db.create_session(source="t"), {"role": "user", "content": "hi"})
        wal_dir.mkdir(parents=True)
        (side / "generation").write_text("9b1c0843f1806d91")
        assert "no shadow WAL" in finding("replication")["message"]
        live = (hermes_home / "state.db-wal").read_bytes()[:32]
        assert len(live) == 32
        (wal_dir / "00000001.wal").write_bytes(bytes(32) + bytes(2072))  # an older WAL's
        (wal_dir / "00000002.wal").write_bytes(live + bytes(2072))
        f = finding("replication")
        assert f["severity"] == "warn" and "no Litestream process holds the store" in f["message"]
        assert "generation 9b1c0843f1806d91, WAL 00000002:2104" in f["message"]
        assert "WAL read to byte 2104 of" in f["message"]
        assert f["data"]["layout"] == "generations" and f["data"]["wal_index"] == 2
        assert f["data"]["wal_salt_matches"] is True and "txid" not in f["data"]
        (side / "generation").write_text("not a generation")
        assert "no shadow WAL" in finding("replication")["message"]
