"""The compact row format (m010, docs/row-format.md): what a row stores,
that the API gives back exactly what it did, the migration of a store
written before m010, and recovery of both forms."""
from __future__ import annotations

import json
import time
from pathlib import Path

import apsw
import pytest

import hstate_recovery
from hstate_recovery.schema.layouts import MESSAGES
from sessiondb import SessionDB
from sessiondb.engine import migrations
from sessiondb.rows.codec import (decode, encode, fingerprint_of, logical_meta, stored_meta, uid_key, uid_text)

MESSAGES_IN = [
    {"role": "user", "content": "plain"},
    {"role": "assistant", "content": "reply", "finish_reason": "stop"},
    {"role": "assistant", "finish_reason": "length", "foo": 1, "content": [{"type": "text", "text": "x"}]},
    {"role": "assistant", "content": "a", "finish_reason": "tool_calls", "tool_calls": [{"id": "1"}]},
    {"role": "assistant", "content": "b", "x": [1, 2], "finish_reason": "stöp \"q\""},
    {"role": "tool", "content": "r", "tool_call_id": "1",
     "_db_uid": "ABCDEF0123456789ABCDEF0123456789"},  # upper case: stays text
    {"role": "user", "content": "z", "finish_reason": None},
    {"role": "user", "content": "v", "_db_uid": "import:42"},
    {"role": "user", "content": "u", "_db_uid": "0123456789abcdef0123456789abcdef"},
]


def raw(path: Path, sql: str) -> list[tuple]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def public(message: dict) -> str:
    """A dict as bytes, key order included (what the API must keep)."""
    return json.dumps({k: v for k, v in message.items() if k != "_db_persisted"},
                      ensure_ascii=False)


def expected(message: dict) -> dict:
    """What the codec before m010 gave back: decode of the full meta."""
    enc = encode(message)
    return decode(enc.role, enc.content_kind, enc.content, enc.tool_calls, enc.meta)


def test_uid_forms_are_one_to_one() -> None:
    hexuid = "0123456789abcdef0123456789abcdef"
    assert uid_key(hexuid) == bytes.fromhex(hexuid)
    for text in ("0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcde ",
                 " 123456789abcdef0123456789abcdef", "import:42", "", "ab" * 17):
        assert uid_key(text) == text
    assert uid_text(uid_key(hexuid)) == hexuid


@pytest.mark.parametrize("meta,reason,stored", [
    ('{"finish_reason":"stop"}', "stop", ""),  # an empty meta is '' since m012
    ('{"a":1,"finish_reason":"stop"}', "stop", '{"a":1}'),
    ('{"finish_reason":"stop","a":1}', "stop", '{"finish_reason":"stop","a":1}'),
    ('{"a":"x,\\"finish_reason\\":\\"stop\\"}', "stop", '{"a":"x,\\"finish_reason\\":\\"stop\\"}'),
    ('{"a":{"finish_reason":"stop"}}', "stop", '{"a":{"finish_reason":"stop"}}'),
    ('{"finish_reason":null}', None, '{"finish_reason":null}'),
])
def test_meta_keeps_finish_reason_once(meta: str, reason: str | None, stored: str) -> None:
    assert stored_meta(meta, reason) == stored
    if reason is None or f'"finish_reason":"{reason}"' in meta.replace("\\", "")[:-1]:
        if '"a":{' not in meta and '\\"' not in meta:  # a real row: the key is top-level
            assert logical_meta(stored, reason) == meta


def test_new_rows_are_compact_and_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="test")
        db.append_messages("s", [dict(m) for m in MESSAGES_IN])
        got = db.get_messages("s")
    assert [public(expected(m)) for m in MESSAGES_IN] == [
        public({k: v for k, v in m.items() if k != "_db_uid"}) for m in got]
    rows = raw(path, "SELECT typeof(uid), typeof(fingerprint), meta FROM messages ORDER BY id")
    assert [r[0] for r in rows] == ["blob"] * 5 + ["text", "blob", "text", "blob"]
    assert {r[1] for r in rows} == {"blob"}
    assert rows[1][2] == "" and rows[2][2] == '{"finish_reason":"length","foo":1}'
    assert rows[4][2] == '{"x":[1,2]}'
    assert got[5]["_db_uid"] == "ABCDEF0123456789ABCDEF0123456789"
    assert got[8]["_db_uid"] == "0123456789abcdef0123456789abcdef"
    assert not raw(path, "SELECT 1 FROM sqlite_master WHERE name = 'messages_by_time'")


def test_same_uid_again_is_a_no_op_and_edits_find_the_row(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="test")
        db.append_messages("s", [dict(m) for m in MESSAGES_IN])
        first = db.get_messages("s")
        again = [{k: v for k, v in m.items() if k != "_db_persisted"} for m in first]
        db.append_messages("s", again)  # uids known: nothing new
        assert len(db.get_messages("s")) == len(MESSAGES_IN)
        hits = db.search("reply")
        assert [h.message_id for h in hits] == [first[1]["_db_persisted"].id]


def legacy_store(path: Path, n: int = 40) -> list[dict]:
    """A store as m001-m009 left it: text uids and fingerprints, finish_reason
    copied into meta (the codec of that time), a messages_by_time index."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    old = migrations.MIGRATIONS[:9]
    assert old[-1].__name__ == "m009_index_shape"
    for m in old:
        with conn:
            migrations._ensure_ledger(conn)
            m(conn)
            conn.execute("INSERT INTO migrations(name, applied_at) VALUES (?, ?)",
                         (m.__name__, time.time()))
    conn.execute("INSERT INTO sessions(id, source, started_at, updated_at, message_count)"
                 " VALUES ('s', 'test', 1.7e9, 1.7e9, ?)", (n,))
    dicts = []
    with conn:
        for i in range(n):
            d: dict = {"role": "assistant" if i % 2 else "user", "content": f"old {i}"}
            meta = "{}"
            if i % 2:
                d["finish_reason"] = "stop"
                meta = '{"finish_reason":"stop"}'
            if i % 5 == 0:
                d["n"] = i
                meta = meta[:-1] + ("," if meta != "{}" else "") + f'"n":{i}}}'
            uid = f"{i:032x}" if i % 3 else f"legacy-{i}"
            fp = fingerprint_of(d["role"], "text", d["content"], None, meta)
            conn.execute("INSERT INTO messages(session_id, uid, position, role, content_kind,"
                         " content, finish_reason, timestamp, meta, fingerprint) VALUES"
                         " ('s', ?, ?, ?, 'text', ?, ?, ?, ?, ?)",
                         (uid, i + 1, d["role"], d["content"], d.get("finish_reason"),
                          1.7e9 + i, meta, fp))
            dicts.append({**d, "_db_uid": uid, "_fp": fp})
    conn.close()
    return dicts


def test_m009_store_migrates_and_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = legacy_store(path)
    assert raw(path, "SELECT count(*) FROM messages WHERE typeof(uid) = 'text'") == [(40,)]
    with SessionDB(path) as db:
        got = db.get_messages("s")
        assert [public({k: v for k, v in m.items() if k != "_fp"}) for m in old] == [
            public(m) for m in got]
        # fingerprints are of the message, not of its stored form: unchanged
        assert [m["_db_persisted"].fingerprint for m in got] == [m["_fp"] for m in old]
        again = [{k: v for k, v in m.items() if k != "_db_persisted"} for m in got]
        db.append_messages("s", again)  # every uid found in its new form
        assert len(db.get_messages("s")) == 40
        db.append_messages("s", [{"role": "user", "content": "new one"}])
        assert [h.message_id for h in db.search('"old 7"')] == [got[7]["_db_persisted"].id]
    assert "m010_compact_rows" in [r[0] for r in raw(path, "SELECT name FROM migrations")]
    forms = dict(raw(path, "SELECT typeof(uid), count(*) FROM messages GROUP BY 1"))
    assert forms == {"blob": 27, "text": 14}  # 26 hex legacy uids + the new one; 14 not hex
    # only where finish_reason is not meta's last key (i % 10 == 5: it precedes "n")
    assert raw(path, "SELECT count(*) FROM messages WHERE meta LIKE '%finish_reason%'") == [(4,)]
    assert not raw(path, "SELECT 1 FROM sqlite_master WHERE name = 'messages_by_time'")


def test_m010_runs_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    legacy_store(path, n=4)
    SessionDB(path).close()
    before = raw(path, "SELECT * FROM messages ORDER BY id")
    SessionDB(path).close()
    assert raw(path, "SELECT * FROM messages ORDER BY id") == before


def test_carved_compact_and_legacy_rows_prove_their_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="test")
        db.append_messages("s", [dict(m) for m in MESSAGES_IN])
    for row in raw(path, "SELECT * FROM messages"):
        values = [None, *row[1:]]
        assert MESSAGES.self_check(values) is True
        classes = ["null" if v is None else {bytes: "blob", str: "text", int: "integer",
                                              float: "real"}[type(v)] for v in values]
        assert MESSAGES.score(values, classes) == 1.0
    legacy = tmp_path / "legacy.db"
    legacy_store(legacy, n=6)
    for row in raw(legacy, "SELECT * FROM messages"):
        assert MESSAGES.self_check([None, *row[1:]]) is True


@pytest.mark.parametrize("lane", ["rows", "carve"])
def test_recovering_a_legacy_store_gives_a_compact_one(tmp_path: Path, lane: str) -> None:
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    old = legacy_store(src / "state.db")
    report = hstate_recovery.recover(src / "state.db", tmp_path / "new.db", lanes=[lane],
                              allow_partial=True)  # (carve alone does not map state_meta)
    got_stats = report.tables["messages"]
    stats = got_stats if isinstance(got_stats, dict) else got_stats.__dict__
    assert stats["recovered"] == 40 and not stats["rows_lost"]
    assert report.verification["ok"] is True
    out = tmp_path / "new.db"
    assert dict(raw(out, "SELECT typeof(uid), count(*) FROM messages GROUP BY 1")) == {
        "blob": 26, "text": 14}
    with SessionDB(out) as db:
        got = db.get_messages("s")
    assert [public({k: v for k, v in m.items() if k != "_fp"}) for m in old] == [
        public(m) for m in got]


def test_batch_uids_are_fresh_and_own_uids_are_still_checked(tmp_path: Path) -> None:
    from sessiondb import InvalidMessage
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="test")
        db.append_messages("s", [{"role": "user", "content": str(i)} for i in range(300)])
        uids = [m["_db_uid"] for m in db.get_messages("s")]
        assert len(set(uids)) == 300 and all(len(u) == 32 for u in uids)
        for bad in (0, 5, ["x"]):
            with pytest.raises(InvalidMessage):
                db.append_messages("s", [{"role": "user", "content": "a"},
                                         {"role": "user", "content": "b", "_db_uid": bad}])
        assert len(db.get_messages("s")) == 300  # nothing of a refused batch is stored
