"""WAL frames: the committed image, ignored frames and why, salvage.

Snapshots of a live store are copied while its writer is still open (a
closing last connection would checkpoint and delete the -wal).
"""
from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import apsw
import pytest

from hstate_recovery.carve.carver import UNCOMMITTED, carve
from hstate_recovery.source.headers import summarize_wal
from sessiondb.sqlitefile.wal import (FRAME_HEADER_SIZE, WAL_HEADER_SIZE, WAL_MAGIC_BE, parse_wal_header,
                          scan_wal, wal_checksum)
from sessiondb import SessionDB
from tests.helpers.carving import build_store, carved_by_key, message, patch, read_truth


def _snapshot(db_path: Path, dest: Path) -> Path:
    dest.mkdir()
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{db_path}{suffix}")
        if src.exists():
            shutil.copyfile(src, dest / f"state.db{suffix}")
    return dest / "state.db"


@pytest.fixture(scope="module")
def wal_store(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Base file checkpointed; then 5 commits live only in the WAL (snapshot A),
    then one more commit of 40 messages (snapshot B)."""
    base = tmp_path_factory.mktemp("wal")
    path = base / "live" / "state.db"
    path.parent.mkdir()
    ids = build_store(path, sessions=3, per_session=50, big_every=9)
    base_truth = read_truth(path)
    # No background indexing: its commits would put frames of their own between
    # the snapshots (the index catches up at close, after them).
    with SessionDB(path, background_index=False) as db:
        for k in range(5):
            db.append_messages(ids[k % 3], [message(5000 + 10 * k + j) for j in range(3)])
        a = _snapshot(path, base / "a")
        db.append_messages(ids[1], [message(6000 + j, big=200 * (j % 3)) for j in range(40)])
        b = _snapshot(path, base / "b")
    return {"a": a, "b": b, "truth_a": read_truth(a), "truth_b": read_truth(b),
            "base": base_truth, "ids": ids}


def _frames(path: Path) -> int:
    ps = parse_wal_header(Path(f"{path}-wal").read_bytes()[:32]).page_size
    return (os.path.getsize(f"{path}-wal") - WAL_HEADER_SIZE) // (FRAME_HEADER_SIZE + ps)


def _copy(src: Path, tmp_path: Path, shm: bool = True) -> Path:
    dest = tmp_path / "copy"
    dest.mkdir()
    for suffix in ("", "-wal") + (("-shm",) if shm else ()):
        shutil.copyfile(f"{src}{suffix}", dest / f"state.db{suffix}")
    return dest / "state.db"


def _wal(p: Path) -> Path:
    return Path(f"{p}-wal")


def _assert_tables(result, truth) -> None:
    for table, rows in truth.rows.items():
        assert carved_by_key(result, table) == rows, table


@pytest.mark.parametrize("shm", [True, False], ids=["with-shm", "without-shm"])
def test_committed_frames_are_applied(wal_store, tmp_path: Path, shm: bool) -> None:
    copy = _copy(wal_store["b"], tmp_path, shm)
    assert _wal(copy).stat().st_size > 0
    result = carve(copy, _wal(copy))
    _assert_tables(result, wal_store["truth_b"])
    assert result.stats.frames_applied == _frames(copy)
    assert result.stats.frames_ignored == {}
    old = set(wal_store["base"].rows["messages"])
    assert all(o.from_wal for row, o in result.rows("messages") if o.rowid not in old)
    assert result.counts_by_lane()["messages"]["wal"] >= 43
    # without the WAL, the file alone is the last checkpoint
    _assert_tables(carve(copy), wal_store["base"])


def test_torn_last_frame(wal_store, tmp_path: Path) -> None:
    copy = _copy(wal_store["b"], tmp_path)
    ps = wal_store["truth_b"].page_size
    os.truncate(_wal(copy), _wal(copy).stat().st_size - ps // 2)
    result = carve(copy, _wal(copy))
    _assert_tables(result, wal_store["truth_a"])
    ignored = result.stats.frames_ignored
    assert ignored["torn"] == 1 and ignored["uncommitted"] == _frames(copy) - _frames(
        wal_store["a"])
    # salvage on request: new rows of the torn commit, marked, values exact
    salvaged = carve(copy, _wal(copy), include_uncommitted=True)
    truth_a, truth_b = wal_store["truth_a"].rows["messages"], wal_store["truth_b"].rows["messages"]
    extra = {o.rowid: row for row, o in salvaged.rows("messages") if o.lane == UNCOMMITTED}
    assert extra and set(extra) <= set(truth_b) - set(truth_a)
    assert all(truth_b[k] == row for k, row in extra.items())
    assert {o.rowid for _, o in salvaged.rows("messages") if o.lane != UNCOMMITTED} == set(truth_a)


def test_salt_mismatch(wal_store, tmp_path: Path) -> None:
    copy = _copy(wal_store["b"], tmp_path)
    ps = wal_store["truth_b"].page_size
    first, total = _frames(wal_store["a"]), _frames(copy)
    for i in range(first, total):
        off = WAL_HEADER_SIZE + i * (FRAME_HEADER_SIZE + ps) + 8
        salt = Path(_wal(copy)).read_bytes()[off:off + 4]
        patch(_wal(copy), off, bytes([salt[0] ^ 0x55]) + salt[1:])
    result = carve(copy, _wal(copy))
    _assert_tables(result, wal_store["truth_a"])
    assert result.stats.frames_ignored == {"salt_mismatch": total - first}
    assert result.stats.frames_applied == first


def test_checksum_mismatch(wal_store, tmp_path: Path) -> None:
    copy = _copy(wal_store["b"], tmp_path)
    ps = wal_store["truth_b"].page_size
    first, total = _frames(wal_store["a"]), _frames(copy)
    off = WAL_HEADER_SIZE + (first + 1) * (FRAME_HEADER_SIZE + ps) + FRAME_HEADER_SIZE + 100
    byte = _wal(copy).read_bytes()[off]
    patch(_wal(copy), off, bytes([byte ^ 0xFF]))
    scan = scan_wal(_wal(copy))
    assert [f.reason for f in scan.ignored] == (
        ["uncommitted"] + ["checksum"] + ["after_break"] * (total - first - 2))
    _assert_tables(carve(copy, _wal(copy)), wal_store["truth_a"])


def _to_big_endian(wal: Path) -> None:
    """Rewrite a little-endian WAL with big-endian checksums (magic ...83)."""
    data = bytearray(wal.read_bytes())
    hdr = parse_wal_header(bytes(data[:32]))
    frame = FRAME_HEADER_SIZE + hdr.page_size
    data[0:4] = WAL_MAGIC_BE.to_bytes(4, "big")
    s = wal_checksum(bytes(data[:24]), 0, 0, True)
    data[24:32] = struct.pack(">II", *s)
    for off in range(WAL_HEADER_SIZE, len(data) - frame + 1, frame):
        s = wal_checksum(bytes(data[off:off + 8]), *s, True)
        s = wal_checksum(bytes(data[off + FRAME_HEADER_SIZE:off + frame]), *s, True)
        data[off + 16:off + 24] = struct.pack(">II", *s)
    wal.write_bytes(bytes(data))


def test_big_endian_checksums(wal_store, tmp_path: Path) -> None:
    copy = _copy(wal_store["b"], tmp_path, shm=False)
    _to_big_endian(_wal(copy))
    assert parse_wal_header(_wal(copy).read_bytes()[:32]).big_endian
    # SQLite itself accepts the rewritten WAL: the checksums are right
    probe = tmp_path / "probe"
    probe.mkdir()
    shutil.copyfile(copy, probe / "p.db")
    shutil.copyfile(_wal(copy), probe / "p.db-wal")
    conn = apsw.Connection(str(probe / "p.db"))
    try:
        (n,) = conn.execute("SELECT count(*) FROM messages").fetchone()
    finally:
        conn.close()
    assert n == len(wal_store["truth_b"].rows["messages"])
    _assert_tables(carve(copy, _wal(copy)), wal_store["truth_b"])


def test_page1_from_the_wal_when_the_file_header_is_zeroed(wal_store, tmp_path: Path) -> None:
    copy = _copy(wal_store["b"], tmp_path)
    assert 1 in {f.pgno for f in scan_wal(_wal(copy)).committed}
    ps = wal_store["truth_b"].page_size
    patch(copy, 0, bytes(ps))
    result = carve(copy, _wal(copy))
    assert result.stats.schema_readable and result.stats.page_size_source == "wal"
    _assert_tables(result, wal_store["truth_b"])


def test_garbage_wal_is_ignored(wal_store, tmp_path: Path) -> None:
    copy = _copy(wal_store["b"], tmp_path)
    patch(_wal(copy), 0, b"\x00" * 32)
    result = carve(copy, _wal(copy))
    assert result.stats.wal_problem == "bad WAL magic"
    _assert_tables(result, wal_store["base"])


def test_restarted_wal_ignores_the_stale_tail(tmp_path: Path) -> None:
    """After a checkpoint the next writer restarts the WAL from its start with
    new salts; the longer tail of the previous generation must not be applied."""
    path = tmp_path / "live" / "state.db"
    path.parent.mkdir()
    ids = build_store(path, sessions=2, per_session=10)
    with SessionDB(path, background_index=False) as db:  # only the commits below
        db.append_messages(ids[0], [message(700 + j, big=300) for j in range(30)])
        assert db.checkpoint()[0] == db.checkpoint()[1]  # every frame copied back
        db.set_title(ids[1], "after the restart")
        snap = _snapshot(path, tmp_path / "snap")
    truth = read_truth(snap)
    scan = scan_wal(_wal(snap))
    assert scan.committed and {f.reason for f in scan.ignored} == {"salt_mismatch"}
    result = carve(snap, _wal(snap), include_uncommitted=True)
    _assert_tables(result, truth)
    assert result.stats.frames_ignored["salt_mismatch"] == len(scan.ignored)
    assert carved_by_key(result, "sessions")[2]["title"] == "after the restart"


def test_inspect_wal_summary_verdicts(wal_store, tmp_path: Path) -> None:
    """inspect's WAL summary, read through scan_wal: valid frames stop at the
    first bad one, a torn tail is not a frame, a broken header checksum keeps
    the salts but no frame counts as valid."""
    copy = _copy(wal_store["b"], tmp_path)
    ps = wal_store["truth_b"].page_size
    first, total = _frames(wal_store["a"]), _frames(copy)
    hdr = parse_wal_header(_wal(copy).read_bytes()[:32])
    whole = summarize_wal(_wal(copy))
    assert (whole["frames"], whole["valid_frames"], whole["last_commit_frame"]) == (
        total, total, total)
    assert (whole["salt1"], whole["salt2"], whole["header_ok"]) == (hdr.salt1, hdr.salt2, True)
    with open(_wal(copy), "ab") as f:
        f.write(b"\x00\x00\x00\x02" + b"\x5a" * 100)  # a frame cut short
    off = WAL_HEADER_SIZE + (first + 1) * (FRAME_HEADER_SIZE + ps) + FRAME_HEADER_SIZE + 100
    patch(_wal(copy), off, bytes([_wal(copy).read_bytes()[off] ^ 0xFF]))
    broken = summarize_wal(_wal(copy))
    assert (broken["frames"], broken["valid_frames"], broken["last_commit_frame"]) == (
        total, first + 1, first)
    patch(_wal(copy), 24, bytes([_wal(copy).read_bytes()[24] ^ 0xFF]))
    no_header = summarize_wal(_wal(copy))
    assert (no_header["header_ok"], no_header["valid_frames"], no_header["frames"],
            no_header["last_commit_frame"], no_header["page_size"], no_header["salt1"]) == (
        False, 0, total, None, ps, hdr.salt1)
