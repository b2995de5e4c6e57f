"""Bad input, fuzzed with hypothesis: the public API and the CLI.

The API gets arbitrary message dicts, session ids and search queries; it must either work
or raise a typed `StorageError`, and a refused call must leave the store
byte-for-byte the same in content. The CLI gets random commands, flags and
values through click's runner; it must exit 0 (or a documented recovery
code) or print an ``Error:`` line (or click's usage error) with exit 1/2,
never a traceback, and a refused command must leave the store unchanged.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from collections import Counter

import apsw
import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hstate_cli.main import cli
from sessiondb import SessionDB, StorageError, TranscriptWriter, strip_markers

FUZZ = settings(max_examples=int(os.environ.get("HERMES_FUZZ_EXAMPLES", "150")),
                deadline=None, suppress_health_check=list(HealthCheck))

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
odd_text = st.one_of(st.text(max_size=40), st.sampled_from(
    ["", "..", "../x", "a/b", "\x00", "s1", "s1 ", "-", "--help", "💥", "a" * 200, "%s"]))
messages = st.one_of(
    json_values,
    st.fixed_dictionaries({"role": st.one_of(st.sampled_from(
        ["user", "assistant", "system", "tool", "bogus", ""]), json_values)},
        optional={"content": json_values, "tool_calls": json_values,
                  "tool_call_id": json_values, "timestamp": json_values,
                  "token_count": json_values, "_db_uid": json_values,
                  "_db_persisted": json_values, "extra": json_values}))


valid = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                               "content": st.text(max_size=20)})
api_messages = st.one_of(valid, messages)
api_sids = st.one_of(st.just("s1"), odd_text)


def digest(path: Path) -> str:
    """The store's content (every row of every table), not its bytes."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        h = hashlib.sha256()
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            " AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name")]
        for t in tables:  # some (FTS shadow tables) are WITHOUT ROWID: sort here
            for row in sorted(repr(r) for r in conn.execute(f'SELECT * FROM "{t}"')):
                h.update(row.encode())
        return h.hexdigest()
    finally:
        conn.close()


def seeded(path: Path) -> None:
    with SessionDB(path) as db:
        db.create_session("s1", source="test", title="one")
        db.append_messages("s1", [{"role": "user", "content": f"m{i}"} for i in range(3)])


def test_api_takes_any_message_or_session_id(tmp_path: Path):
    path = tmp_path / "state.db"
    seeded(path)
    db = SessionDB(path, background_index=False)  # only the calls under test write
    outcomes: Counter = Counter()

    @FUZZ
    @given(sid=api_sids, message=api_messages, batch=st.lists(api_messages, max_size=3),
           op=st.sampled_from(["append", "batch", "create", "flush", "get"]))
    def check(sid: str, message: Any, batch: list[Any], op: str) -> None:
        before = digest(path)
        try:
            if op == "append":
                rid = db.append_message(sid, message)
                assert isinstance(rid, int)
                stored = strip_markers(db.get_messages(sid))[-1]
                assert stored["role"] == message["role"]
            elif op == "batch":
                db.append_messages(sid, batch)
            elif op == "create":
                db.create_session(sid, source=str(message)[:20] or "x")
            elif op == "flush":
                TranscriptWriter(db, sid).flush([message] if isinstance(message, dict) else message)
            else:
                db.get_messages(sid)
            outcomes["ok"] += 1
        except StorageError:
            outcomes["refused"] += 1
            assert digest(path) == before, f"{op} was refused but changed the store"
        assert not db.quarantined

    try:
        check()
        db.catch_up_index()
        assert db.quick_check() == ["ok"] and db.search_health().ok
        assert outcomes["ok"] and outcomes["refused"] > 10, outcomes
    finally:
        db.close()


def _commands() -> list[tuple[list[str], click.Command]]:
    out: list[tuple[list[str], click.Command]] = []

    def walk(prefix: list[str], cmd: click.Command) -> None:
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(prefix + [name], sub)
        else:
            out.append((prefix, cmd))
    walk([], cli)
    # chat talks to a model and demo runs a whole scripted tour: not input parsing.
    return [(p, c) for p, c in out if p[0] not in ("chat", "demo")]


COMMANDS = _commands()
# argv can hold any byte but NUL (C strings end there), so no NUL here.
values = st.one_of(odd_text, st.integers(-10, 10**12).map(str),
                   st.sampled_from(["0", "-1", "1e309", "nan", "jsonl", "json", "markdown",
                                    "backup", "s1", "out.db", "out.jsonl", "."])
                   ).map(lambda v: v.replace("\x00", ""))


@st.composite
def argv(draw: st.DrawFn) -> list[str]:
    path, cmd = draw(st.sampled_from(COMMANDS))
    args = list(path)
    opts = [p for p in cmd.params if isinstance(p, click.Option) and "--help" not in p.opts]
    for opt in draw(st.lists(st.sampled_from(opts), max_size=4)) if opts else []:
        args.append(draw(st.sampled_from(opt.opts)))
        if not opt.is_flag:
            args.append(draw(values))
    args += draw(st.lists(values, max_size=2))
    if draw(st.booleans()):
        args.insert(draw(st.integers(0, len(args))), draw(values))
    return args


RECOVERY_EXITS = {3, 4, 5, 6}  # documented outcome codes of `sessions recover`


def test_cli_takes_any_flags_and_values(tmp_path: Path, hermes_home: Path,
                                        monkeypatch: pytest.MonkeyPatch):
    hermes_home.mkdir(mode=0o700)
    store = hermes_home / "state.db"
    seeded(store)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # relative outputs land here
    runner = CliRunner()
    codes: Counter = Counter()

    @FUZZ
    @given(args=argv())
    def check(args: list[str]) -> None:
        before = digest(store)
        result = runner.invoke(cli, args, input="n\n", catch_exceptions=True)
        codes[result.exit_code] += 1
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{args}: uncaught {result.exception!r}") from result.exception
        code = result.exit_code
        if args[:2] == ["sessions", "recover"] and code in RECOVERY_EXITS:
            return
        assert code in (0, 1, 2), (args, code, result.output)
        if code in (1, 2):
            lines = [ln for ln in result.output.splitlines() if ln.strip()]
            assert any(ln.startswith(("Error:", "Aborted!")) for ln in lines), (args,
                                                                             result.output)
            assert "Traceback" not in result.output
            assert digest(store) == before, f"{args} failed but changed the store"

    check()
    assert codes[0] and codes[2], codes  # both accepted and refused calls were made


@pytest.mark.parametrize("message,field", [
    ({"role": []}, "role"), ({"role": {"a": 1}}, "role"),
    ({"role": "user", "_db_uid": [None]}, "_db_uid"), ({"role": "user", "_db_uid": 7}, "_db_uid"),
], ids=["list-role", "dict-role", "list-uid", "int-uid"])
def test_unhashable_role_and_non_text_uid_are_typed(tmp_path: Path, message: dict, field: str):
    """Found by the fuzzer: these escaped as TypeError (an unhashable role
    tested against the role set; a list uid bound as an SQL parameter)."""
    from sessiondb import InvalidMessage
    path = tmp_path / "state.db"
    seeded(path)
    before = digest(path)
    with SessionDB(path) as db:
        with pytest.raises(InvalidMessage) as info:
            db.append_message("s1", message)
        assert info.value.field == field
        with pytest.raises(InvalidMessage):
            TranscriptWriter(db, "s1").flush([dict(message)])
    assert digest(path) == before


def test_search_takes_any_query_and_filters(tmp_path: Path):
    """Search queries and filters: a hit list or a typed error, never
    anything else, and the store untouched."""
    path = tmp_path / "state.db"
    seeded(path)
    db = SessionDB(path, background_index=False)  # only the calls under test write
    outcomes: Counter = Counter()
    before = digest(path)

    @FUZZ
    @given(query=st.one_of(odd_text, st.sampled_from(['"', "m1 OR", "NEAR(", "*", "m*", "^m",
                                                        "a:b", "(", "AND", "\\", "m1"])),
           raw=st.booleans(), limit=st.integers(-5, 1000), offset=st.integers(-5, 50),
           order=st.sampled_from(["rank", "time", "newest", "bogus", ""]),
           role=st.one_of(st.none(), odd_text), session=st.one_of(st.none(), api_sids))
    def check(query: str, raw: bool, limit: int, offset: int, order: str, role: Any,
              session: Any) -> None:
        try:
            hits = db.search(query, raw=raw, limit=limit, offset=offset, order=order,
                             role=role, session_id=session)
            assert isinstance(hits, list)
            outcomes["ok"] += 1
        except StorageError:
            outcomes["refused"] += 1

    try:
        check()
        assert digest(path) == before
        assert outcomes["ok"] and outcomes["refused"], outcomes
    finally:
        db.close()
