"""Verification's integrity check runs its parts at once (recovery/inspection/integrity.py):
for every kind of damage it answers what the single ``PRAGMA integrity_check``
statement answers on the same file, and verification fails the same way."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import apsw
import pytest

from hstate_recovery.inspection.integrity import _part, integrity_lines, virtual_tables
from hstate_recovery.salvage.verify import verify_output
from tests.helpers import damage


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> damage.Truth:
    truth = damage.build_store(tmp_path_factory.mktemp("split") / "new.db", sessions=3,
                               per_session=40)
    damage.add_fts(truth.path)
    return truth


def statement(path: Path) -> list[str] | str:
    """The single statement's answer: its lines, or the error it raised."""
    conn = apsw.Connection(str(path))
    try:
        return [r[0] for r in conn.execute("PRAGMA integrity_check(20)")]
    except apsw.Error as e:
        return f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def split(path: Path) -> list[str] | str:
    conn = apsw.Connection(str(path))
    try:
        tables = virtual_tables(conn)
    finally:
        conn.close()
    try:
        return integrity_lines(path, tables, 20)
    except apsw.Error as e:
        return f"{type(e).__name__}: {e}"


def _smash(name: str, kind: str = "leaf") -> Callable[[Path], None]:
    return lambda p: damage.smash_page(p, damage.pages_of(p, name, kind)[0])


def _cut_blob(fts: str) -> Callable[[Path], None]:
    """Half of an FTS5 segment blob gone: FTS5's own check reports it as a line."""
    return lambda p: damage.sql(p, f"UPDATE {fts}_data SET block = substr(block, 1, "
                                   f"length(block) / 2) WHERE id = (SELECT max(id) FROM {fts}_data)")


def _row_off_index(truth: damage.Truth) -> Callable[[Path], None]:
    """One byte of a message's session id changed in its table leaf only: the
    b-trees are sound, the row is missing from the indexes on session_id."""
    def flip(p: Path) -> None:
        sid, data = truth.sessions[1].encode(), bytearray(p.read_bytes())
        for pg in damage.pages_of(p, "messages", "leaf"):
            at = data.find(sid, (pg - 1) * damage.PAGE_SIZE, pg * damage.PAGE_SIZE)
            if at >= 0:
                data[at + len(sid) - 1] ^= 1
                p.write_bytes(bytes(data))
                return
        raise AssertionError("no message leaf names the session")
    return flip


CASES = {
    "sound": [],
    "table leaf destroyed": [_smash("messages")],
    "index leaf destroyed": [_smash("messages_in_order")],
    "row missing from its indexes": ["flip"],
    "word index segment cut": [_cut_blob("messages_fts")],
    "term table segment cut": [_cut_blob("messages_terms")],
    "word index page destroyed": [_smash("messages_fts_data")],
    "term table page destroyed": [_smash("messages_terms_data")],
    "rows and word index both": ["flip", _cut_blob("messages_fts")],
    "index page and term table both": [_smash("messages_in_order"),
                                          _cut_blob("messages_terms")],
}


def _damaged(pristine: damage.Truth, tmp_path: Path, case: str) -> Path:
    path = tmp_path / "out.db"
    shutil.copyfile(pristine.path, path)
    for harm in CASES[case]:
        (_row_off_index(pristine) if harm == "flip" else harm)(path)
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_split_answers_as_the_statement(pristine, tmp_path, case):
    path = _damaged(pristine, tmp_path, case)
    want = statement(path)
    assert (want == ["ok"]) == (case == "sound")  # the damage is real
    assert split(path) == want


@pytest.mark.parametrize("case", list(CASES))
def test_verification_fails_as_with_the_statement(pristine, tmp_path, case):
    path = _damaged(pristine, tmp_path, case)
    want = statement(path)
    v = verify_output(path, {"messages": 120})
    if isinstance(want, str):  # the statement raised
        assert f"integrity: {want}" in v.findings
        assert "integrity_check" not in v.checks
    else:
        assert v.checks["integrity_check"] == want
        assert (f"integrity_check: {'; '.join(want[:3])}" in v.findings) == (want != ["ok"])
    assert v.ok == (case == "sound")


def test_two_failing_search_indexes_give_both_lines(pristine, tmp_path):
    # (the one place the order may differ: the statement walks its schema hash)
    path = tmp_path / "out.db"
    shutil.copyfile(pristine.path, path)
    _cut_blob("messages_fts")(path)
    _cut_blob("messages_terms")(path)
    want = statement(path)
    assert isinstance(want, list) and len(want) == 2
    assert sorted(split(path)) == sorted(want)


def test_each_part_checks_only_its_share(pristine, tmp_path):
    """The b-tree part skips the virtual tables (their modules are gone on its
    connection) and a virtual table's part checks that table alone: no check
    is made twice, and none is left out (the cases above)."""
    path = tmp_path / "out.db"
    shutil.copyfile(pristine.path, path)
    _cut_blob("messages_terms")(path)
    line = 'fts5: corruption found reading blob'
    assert _part(path, None, 20, None) == ["ok"]
    assert _part(path, "messages_fts", 20, None) == ["ok"]
    (got,) = _part(path, "messages_terms", 20, None)
    assert got.startswith(line) and "messages_terms" in got


def test_a_file_without_virtual_tables(tmp_path):
    path = tmp_path / "plain.db"
    damage.sql(path, "CREATE TABLE t(x UNIQUE); INSERT INTO t VALUES (1), (2)")
    assert virtual_tables(apsw.Connection(str(path))) == []
    assert split(path) == ["ok"] == statement(path)
