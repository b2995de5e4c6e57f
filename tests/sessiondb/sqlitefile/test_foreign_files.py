"""Files we did not write: identified before any pragma, never changed by any command.

Each foreign file is built by its program's own package (or, for Hermes
Agent, from its transcribed DDL; see tests/helpers/foreign_dbs.py), placed
at a home's ``state.db`` and run through every command. The home's files
(names, bytes, modes) must be identical afterwards, and each command must
say what the file is in one line, exit 1, with no traceback.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sqlite3
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB, StorageError
from sessiondb.base.errors import Cause, ForeignStore, StoreCorrupt, StoreNotFound
from sessiondb.base.explain import describe_error
from sessiondb.sqlitefile.identity import identify
from tests.helpers import foreign_dbs as f
from tests.helpers.cliparse import parse_hermes

LABELS = {
    "hermes-agent": "Hermes Agent state.db, schema v31",
    "llm": "llm logs.db (threads/turns)",
    "llm-responses": "llm logs.db (responses/conversations)",
    "openai-agents": "OpenAI Agents SDK SQLiteSession",
    "langgraph": "LangGraph SqliteSaver",
    "sqlite": "an SQLite database with tables notes, tags",
}


def _build(kind: str, path: Path, *, wal_tail: int = 0) -> None:
    small = {"hermes-agent": dict(sessions=6, messages=8), "llm": dict(conversations=3,
             responses=2), "openai-agents": dict(sessions=3, items=5),
             "langgraph": dict(threads=2, checkpoints=3)}
    if kind == "sqlite":
        conn = sqlite3.connect(path)
        conn.executescript("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);"
                           "CREATE TABLE tags(note INTEGER, tag TEXT);"
                           "INSERT INTO notes(body) VALUES ('a'), ('b');")
        conn.close()
    elif kind == "llm-responses":
        f.build_llm(path, layout="responses", wal_tail=wal_tail, **small["llm"])
    else:
        f.BUILDERS[kind](path, wal_tail=wal_tail, **small[kind])


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and directory under ``root``: bytes, size and mode."""
    out: dict[str, tuple] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (digest, st.st_size if p.is_file() else 0,
                                         oct(st.st_mode))
    return out


@pytest.fixture
def export_file(tmp_path: Path) -> Path:
    with SessionDB(tmp_path / "src" / "state.db") as db:
        db.create_session("s1", source="cli")
        db.append_message("s1", {"role": "user", "content": "hello"})
    out = tmp_path / "export.jsonl"
    res = CliRunner().invoke(cli, ["--home", str(tmp_path / "src"), "sessions", "export",
                                   "--all", "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


KINDS = ["hermes-agent", "llm", "llm-responses", "openai-agents", "langgraph", "sqlite"]


@pytest.mark.parametrize("kind, wal_tail", [(k, n) for k in KINDS for n in (0, 3)
                                             if k != "sqlite" or n == 0])
def test_identified_without_changing_a_byte(tmp_path: Path, kind: str, wal_tail: int) -> None:
    path = tmp_path / "state.db"
    _build(kind, path, wal_tail=wal_tail)
    before = snapshot(tmp_path)
    ident = identify(path)
    assert ident.label == LABELS[kind]
    assert ident.kind == ("llm" if kind == "llm-responses" else kind)
    assert ident.foreign and not ident.ours
    assert snapshot(tmp_path) == before
    commands = ident.commands(tmp_path)
    for line in commands:
        parse_hermes(line)
    if kind in ("hermes-agent", "llm", "llm-responses"):
        assert "import" in ident.applies
        assert f"--from {ident.kind} {path}" in commands[-1]
    assert any("--inspect-only" in line for line in commands)


def test_hermes_agent_upgraded_file_is_identified(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    f.build_hermes_agent(path, sessions=4, messages=4, upgraded=True)
    assert identify(path).label == "Hermes Agent state.db, schema v31"


def test_our_store_with_page_one_only_in_the_wal(tmp_path: Path) -> None:
    """A fresh store of ours before its first checkpoint, copied live (no -shm):
    the main file still holds the empty page 1 of the WAL switch."""
    from sessiondb.engine import migrations
    live = tmp_path / "live.db"
    live.touch()
    conn = apsw.Connection(str(live))
    try:
        conn.execute("PRAGMA journal_mode=wal; PRAGMA wal_autocheckpoint=0")
        migrations.apply_pending(conn, lambda: conn.execute("BEGIN IMMEDIATE"))
        copy = tmp_path / "copy"
        copy.mkdir()
        shutil.copyfile(live, copy / "state.db")
        shutil.copyfile(f"{live}-wal", copy / "state.db-wal")
    finally:
        conn.close()
    before = snapshot(copy)
    ident = identify(copy / "state.db")
    assert (ident.kind, ident.version, ident.wal) == \
        ("hermes-state", migrations.MIGRATIONS[-1].__name__, True)
    assert snapshot(copy) == before
    (copy / "state.db-wal").unlink()  # without the -wal page 1 has no schema at all
    assert identify(copy / "state.db").kind == "empty"


def test_not_sqlite_and_empty(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("just some notes\n" * 20)
    with pytest.raises(StoreCorrupt, match="file is not a database"):
        identify(text)
    assert identify(tmp_path / "absent.db").kind == "empty"
    (tmp_path / "zero.db").write_bytes(b"")
    assert identify(tmp_path / "zero.db").kind == "empty"
    conn = apsw.Connection(str(tmp_path / "blank.db"))
    conn.execute("PRAGMA user_version=7")  # another program's mark, but no tables
    conn.close()
    assert identify(tmp_path / "blank.db").kind == "sqlite"


def _commands(home: Path, export: Path, out: Path) -> list[list[str]]:
    h = ["--home", str(home)]
    s = h + ["sessions"]
    return [s + ["list"], s + ["list", "--json"], s + ["show", "x1"], s + ["search", "lorem"],
            s + ["stats"], s + ["stats", "--json"], s + ["export", "--all"],
            s + ["export", "--all", "-o", str(out)], s + ["import", str(export), "--dry-run"],
            s + ["import", str(export)], s + ["import", "--from", "llm", str(export)],
            s + ["rename", "x1", "new title"], s + ["delete", "x1", "--yes"],
            s + ["reindex"], s + ["repair"], s + ["repair", "--check-only"],
            s + ["import-spool"], h + ["chat", "--offline", "-q", "hi"],
            s + ["pin", "x1"], s + ["unpin", "x1"], s + ["archive", "x1"],
            s + ["unarchive", "x1"], s + ["prune", "--older-than", "1d", "--dry-run"],
            s + ["prune", "--older-than", "1d"], s + ["optimize"]]


@pytest.mark.parametrize("kind", KINDS)
def test_every_command_refuses_and_changes_nothing(tmp_path: Path, kind: str,
                                                   export_file: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    _build(kind, home / "state.db", wal_tail=0 if kind == "sqlite" else 2)
    before = snapshot(home)
    out = tmp_path / "out.jsonl"
    for args in _commands(home, export_file, out):
        res = CliRunner().invoke(cli, args)
        text = res.output.strip()
        assert res.exit_code == 1, (args, res.output)
        assert "Traceback" not in res.output and len(text.splitlines()) == 1, (args, text)
        assert text.startswith(f"Error: {home / 'state.db'} is {LABELS[kind]}, not a "
                               "hermes-state store"), (args, text)
        assert "recover --source" in text
        assert snapshot(home) == before, args
    assert not out.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_doctor_identifies_and_never_advises_our_fixes(tmp_path: Path, kind: str) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    _build(kind, home / "state.db", wal_tail=0 if kind == "sqlite" else 2)
    os.chmod(home / "state.db", 0o644)  # doctor --fix must not chmod it either
    before = snapshot(home)
    for args in (["doctor", "--json"], ["doctor", "--fix", "--json"]):
        res = CliRunner().invoke(cli, ["--home", str(home)] + args)
        doc = json.loads(res.output)
        # whose file it is is information; the exit code is the worst real finding
        assert res.exit_code == {"ok": 0, "info": 0, "warn": 3, "error": 4}[doc["worst"]]
        ident = [x for x in doc["findings"] if x["id"] == "identity"]
        assert len(ident) == 1 and ident[0]["severity"] == "info"
        assert LABELS[kind] in ident[0]["message"]
        ids = {x["id"] for x in doc["findings"]}
        assert not ids & {"schema", "search_index", "fts_stale", "permissions", "quick_check"}
        advice = " ".join(x["fix"] or "" for x in doc["findings"])
        assert "repair" not in advice and "reindex" not in advice and "migrat" not in advice
        assert doc.get("applied") in (None, [])
        for action in ident[0]["fix"].split("; or "):
            parse_hermes(action)
        assert snapshot(home) == before


def test_foreign_error_is_typed_and_its_actions_parse(tmp_path: Path) -> None:
    path = tmp_path / "home" / "state.db"
    path.parent.mkdir()
    _build("hermes-agent", path)
    with pytest.raises(ForeignStore) as info:
        SessionDB(path, home=path.parent)
    err = info.value
    assert isinstance(err, StorageError) and err.cause is Cause.FOREIGN
    assert (err.kind, err.code) == ("hermes-agent", "storage_foreign")
    failure = describe_error(err, home=path.parent)
    assert any("--from hermes-agent" in a for a in failure.actions)
    for action in failure.actions:
        parse_hermes(action)
        words = shlex.split(action)
        if "import" in words:  # into a home of ours, never into the foreign file's home
            assert words[2] == f"{path.parent}-state"


READING = [["sessions", "list"], ["sessions", "show", "x1"], ["sessions", "search", "a"],
           ["sessions", "stats"], ["sessions", "export", "--all"], ["sessions", "reindex"],
           ["sessions", "rename", "x1", "t"], ["sessions", "delete", "x1", "--yes"]]


@pytest.mark.parametrize("args", READING, ids=lambda a: " ".join(a[1:]))
def test_reading_commands_on_a_missing_store_create_nothing(tmp_path: Path,
                                                           args: list[str]) -> None:
    home = tmp_path / "typo"
    res = CliRunner().invoke(cli, ["--home", str(home)] + args)
    assert (res.exit_code, res.output) == (1, f"Error: no store at {home / 'state.db'}\n")
    assert not home.exists()


def test_import_dry_run_on_a_missing_store_creates_nothing(tmp_path: Path,
                                                          export_file: Path) -> None:
    home = tmp_path / "typo"
    res = CliRunner().invoke(cli, ["--home", str(home), "sessions", "import", str(export_file),
                                   "--dry-run"])
    assert (res.exit_code, res.output) == (1, f"Error: no store at {home / 'state.db'}\n")
    assert not home.exists()
    with pytest.raises(StoreNotFound):
        SessionDB.open(home, create=False)
    assert not home.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_inspect_and_recover_read_a_copy_only(tmp_path: Path, kind: str) -> None:
    """Their verdicts on foreign files are recovery's (by the file's own
    schema); here only that the source and its sidecars stay byte-identical."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    _build(kind, home / "state.db", wal_tail=0 if kind == "sqlite" else 2)
    before = snapshot(home)
    src = str(home / "state.db")
    for args in (["--inspect-only"], ["--inspect-only", "--json"],
                 ["--output", str(tmp_path / "out.db")]):
        res = CliRunner().invoke(cli, ["--home", str(home), "sessions", "recover",
                                       "--source", src] + args)
        assert "Traceback" not in res.output
        assert snapshot(home) == before, args


def test_the_foreign_cause_is_classified_from_its_code() -> None:
    from sessiondb.base.causes import classify, classify_text
    assert classify(ForeignStore("x", kind="llm")) is Cause.FOREIGN
    assert classify_text("Error: storage_foreign: /h/state.db is ...") is Cause.FOREIGN


def _hot_journal(original: bytes, changed: bytes, page_size: int) -> bytes:
    """A rollback journal (SQLite's format) holding the pages of ``original``
    that ``changed`` overwrote: what a writer crashing mid-commit leaves."""
    import struct
    nonce = 0x1234567
    records = []
    for k in range(len(original) // page_size):
        page = original[k * page_size:(k + 1) * page_size]
        if changed[k * page_size:(k + 1) * page_size] != page:
            total = (nonce + sum(page[i] for i in range(page_size - 200, 0, -200))) & 0xFFFFFFFF
            records.append(struct.pack(">I", k + 1) + page + struct.pack(">I", total))
    header = bytes.fromhex("d9d505f920a163d7") + struct.pack(
        ">5I", len(records), nonce, len(original) // page_size, 512, page_size)
    return header.ljust(512, b"\0") + b"".join(records)


def test_a_hot_rollback_journal_gives_the_last_committed_state(tmp_path: Path) -> None:
    """DELETE mode, a crash mid-commit: the file holds uncommitted pages and
    the -journal their originals; identification reads the committed state,
    as SQLite's rollback would restore it."""
    from sessiondb.engine import migrations
    path = tmp_path / "state.db"
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA journal_mode=delete")
        migrations.apply_pending(conn, lambda: conn.execute("BEGIN IMMEDIATE"))
        committed, original = identify(path), path.read_bytes()
        conn.execute("CREATE TABLE zzz_uncommitted(x)")
    finally:
        conn.close()
    assert "zzz_uncommitted" in identify(path).tables
    Path(f"{path}-journal").write_bytes(_hot_journal(original, path.read_bytes(), 4096))
    ident = identify(path)
    assert (ident.kind, ident.tables, ident.version) == \
        (committed.kind, committed.tables, committed.version)
    stale = bytearray(Path(f"{path}-journal").read_bytes())
    stale[:8] = bytes(8)  # a journal whose header is not (yet) valid is not hot
    Path(f"{path}-journal").write_bytes(bytes(stale))
    assert "zzz_uncommitted" in identify(path).tables
