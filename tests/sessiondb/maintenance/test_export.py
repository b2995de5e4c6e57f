"""Export and import of our own formats: exact round trips, idempotence, bad files."""
from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import pytest

from sessiondb import SessionDB, SessionNotFound
from sessiondb.rows.codec import encode
from sessiondb.maintenance.export import export_sessions, export_to_path, session_messages
from sessiondb.importers.importer import ImportFileError, import_export_file
from sessiondb.base.outfile import OutputError, OutputExists, private_output

pytestmark = pytest.mark.both_backends

ODD_MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "NUL \x00 and ünïcødé and emoji 🦉", "timestamp": 12.5},
    {"role": "assistant", "content": None, "token_count": 7, "finish_reason": "tool_use",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "search", "arguments": "{\"q\": \"owls\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "search",
     "content": [{"type": "text", "text": "owls are birds"}, {"type": "image", "data": "..."}]},
    {"role": "assistant", "content": "", "extra": {"nested": [1, 2.5, None, True]}},
    {"role": "user"},
]


def fill(db: SessionDB) -> None:
    """Two related sessions with odd messages, archived rows and token usage."""
    db.create_session("parent", source="agent", model="m1", title="Owls")
    db.append_messages("parent", [dict(m) for m in ODD_MESSAGES])
    db.record_usage("parent", input_tokens=11, output_tokens=22, cache_read_tokens=3)
    db.end_session("parent", "done")
    db.create_session("child", source="cli", parent_session_id="parent")
    db.append_messages("child", [{"role": "user", "content": f"m{i}"} for i in range(5)])
    summary = encode({"role": "user", "content": "summary of m0-m2"})
    with db.atomic() as conn:
        # What compaction leaves behind: archived rows and a summary marker row.
        conn.execute("UPDATE messages SET state = 'archived', compaction_id = 'cmp1'"
                     " WHERE session_id = 'child' AND position <= 3")
        db.insert_encoded(conn, "child", [summary], kind="summary")


def snapshot(db: SessionDB) -> dict:
    """Everything an export promises to carry, per session."""
    out = {}
    for s in db.session_page(limit=1000):
        rows = [(m.uid, m.timestamp, m.state, m.compaction_id, m.kind, m.message)
                for m in session_messages(db.core, s.id)]
        out[s.id] = (s.to_dict(), rows)
    return out


def export_text(db: SessionDB, fmt: str = "jsonl", ids=None) -> str:
    buf = io.StringIO()
    export_sessions(db.core, ids, fmt, buf)
    return buf.getvalue()


def test_round_trip_into_a_fresh_home_is_exact(open_store, tmp_path):
    src = open_store()
    fill(src)
    path = tmp_path / "all.jsonl"
    summary = export_to_path(src.core, None, "jsonl", path)
    assert (summary.sessions, summary.messages) == (2, 12)
    dst = open_store(home=tmp_path / "fresh")
    result = import_export_file(dst, path)
    assert (result.sessions_created, result.messages_added, result.messages_skipped) == (2, 12, 0)
    assert snapshot(dst) == snapshot(src)
    # Re-exporting the copy gives the same bytes but for the header's timestamp.
    assert export_text(dst).splitlines()[1:] == path.read_text().splitlines()[1:]
    assert dst.get_session("child").parent_session_id == "parent"


def test_reimport_is_idempotent_and_keeps_local_changes(open_store, tmp_path):
    src = open_store()
    fill(src)
    path = tmp_path / "all.jsonl"
    export_to_path(src.core, None, "jsonl", path)
    dst = open_store(home=tmp_path / "fresh")
    import_export_file(dst, path)
    dst.set_title("child", "renamed here")
    dst.append_message("child", {"role": "user", "content": "only here"})
    before = snapshot(dst)
    again = import_export_file(dst, path)
    assert (again.sessions_created, again.sessions_existing) == (0, 2)
    assert (again.messages_added, again.messages_skipped) == (0, 12)
    assert snapshot(dst) == before


def test_import_adds_only_missing_messages_to_an_existing_session(open_store, tmp_path):
    db = open_store()
    db.create_session("s", source="t")
    first = [{"role": "user", "content": f"m{i}"} for i in range(3)]
    db.append_messages("s", first)
    path = tmp_path / "s.jsonl"
    export_to_path(db.core, ["s"], "jsonl", path)
    other = open_store(home=tmp_path / "other")
    other.create_session("s", source="t")
    other.append_messages("s", [dict(first[0])])  # same uid as the exported first message
    plan = import_export_file(other, path, dry_run=True)
    assert (plan.messages_added, plan.messages_skipped) == (2, 1)
    assert len(other.get_messages("s")) == 1  # the dry run wrote nothing
    done = import_export_file(other, path)
    assert (done.messages_added, done.messages_skipped) == (2, 1)
    assert [m["content"] for m in other.get_messages("s")] == ["m0", "m1", "m2"]
    assert other.get_session("s").message_count == 3


def test_json_export_is_one_document_with_the_same_content(open_store):
    db = open_store()
    fill(db)
    doc = json.loads(export_text(db, "json"))
    lines = [json.loads(x) for x in export_text(db, "jsonl").splitlines()]
    assert doc["format"] == "hermes-export" and doc["version"] == 1
    assert doc["totals"] == {"sessions": 2, "messages": 12}
    assert [s["session"] for s in doc["sessions"]] == \
        [x["session"] for x in lines if x["type"] == "session"]
    flat = [dict(m, session_id=s["session"]["id"]) for s in doc["sessions"]
            for m in s["messages"]]
    assert flat == [{k: v for k, v in x.items() if k != "type"} for x in lines
                    if x["type"] == "message"]


def test_json_export_of_no_messages_is_valid(open_store):
    db = open_store()
    db.create_session("empty", source="t")
    doc = json.loads(export_text(db, "json", ["empty"]))
    assert doc["sessions"][0]["messages"] == []
    assert json.loads(export_text(db, "json")) ["totals"] == {"sessions": 1, "messages": 0}


def test_markdown_export_reads_like_a_transcript(open_store):
    db = open_store()
    fill(db)
    text = export_text(db, "markdown", ["parent", "child"])
    assert text.startswith("# Owls\n")
    assert "- tool call `search`: `{\"q\": \"owls\"}`" in text
    assert "owls are birds [image]" in text
    assert "### user (archived)" in text
    assert text.index("# Owls") < text.index("# (untitled)")


def test_export_of_unknown_session_writes_nothing(open_store, tmp_path):
    db = open_store()
    fill(db)
    out = tmp_path / "x.jsonl"
    with pytest.raises(SessionNotFound):
        export_to_path(db.core, ["parent", "nope"], "jsonl", out)
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "home"]


def _export_lines(db: SessionDB, tmp_path: Path) -> list[str]:
    fill(db)
    path = tmp_path / "src.jsonl"
    export_to_path(db.core, None, "jsonl", path)
    return path.read_text().splitlines()


@pytest.mark.parametrize("mutate, error", [
    (lambda ls: ls[:-1], "the file ends without its end record (truncated?); "
                         "nothing was imported"),
    (lambda ls: ls[:5] + ["{not json"] + ls[5:], "line 6: not valid JSON"),
    (lambda ls: ls[1:], "line 1: not a hermes JSONL export"),
    (lambda ls: ls[:-1] + ['{"type": "end", "sessions": 2, "messages": 99}'],
     "end record counts 2 sessions and 99 messages, the file holds 2 and 12"),
    (lambda ls: [ls[0], ls[2]] + ls[1:2] + ls[3:], "line 2: message does not follow"),
    (lambda ls: ls[:3] + [ls[3].replace('"role":"user"', '"role":"robot"')] + ls[4:],
     "line 4: unknown role 'robot'"),
    (lambda ls: ls[:3] + [ls[3].replace('"state":"active"', '"state":"gone"')] + ls[4:],
     "line 4: message 'state' must be one of"),
    (lambda ls: [ls[0].replace('"version":1', '"version":2')] + ls[1:],
     "line 1: export version 2 is not supported"),
])
def test_bad_files_are_refused_before_anything_is_written(open_store, tmp_path, mutate, error):
    lines = _export_lines(open_store(), tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(mutate(lines)) + "\n")
    dst = open_store(home=tmp_path / "fresh")
    with pytest.raises(ImportFileError) as exc:
        import_export_file(dst, bad)
    assert error in str(exc.value)
    assert dst.session_page() == [] and dst.count_messages() == 0


def test_child_before_parent_is_linked_after_the_parent_arrives(open_store, tmp_path):
    src = open_store()
    fill(src)
    path = tmp_path / "rev.jsonl"
    export_to_path(src.core, ["child", "parent"], "jsonl", path)
    dst = open_store(home=tmp_path / "fresh")
    import_export_file(dst, path)
    assert dst.get_session("child").parent_session_id == "parent"
    assert snapshot(dst) == snapshot(src)


def test_private_output_is_0600_and_never_replaces_without_force(tmp_path):
    target = tmp_path / "out.txt"
    with private_output(target) as f:
        f.write("one")
    assert target.read_text() == "one"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    with pytest.raises(OutputExists):
        with private_output(target) as f:
            f.write("two")
    with private_output(target, force=True) as f:
        f.write("three")
    assert target.read_text() == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_private_output_failure_leaves_no_file(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with private_output(target) as f:
            f.write("partial")
            raise RuntimeError("writer failed")
    assert list(tmp_path.iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match=r"cannot write .*/file/out.txt: Not a directory"):
        with private_output(blocker / "out.txt"):
            pass
