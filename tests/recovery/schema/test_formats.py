"""The registry of known formats agrees with the files their programs write."""
from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from hstate_recovery.schema import formats
from hstate_recovery.schema.catalog import read_catalog
from tests.helpers import foreign_dbs as f

BUILD = {
    ("hermes-agent", "v31"): lambda p: f.build_hermes_agent(p, sessions=3, messages=4),
    ("hermes-agent", "v1+reconciled"): lambda p: f.build_hermes_agent(p, sessions=3,
                                                                      messages=4, upgraded=True),
    ("llm", "threads"): lambda p: f.build_llm(p, conversations=2, responses=2),
    ("llm", "responses"): lambda p: f.build_llm(p, conversations=2, responses=2,
                                                layout="responses"),
    ("openai-agents", ""): lambda p: f.build_openai_agents(p, sessions=2, items=3),
    ("langgraph", ""): lambda p: f.build_langgraph(p, threads=2, checkpoints=2),
}


@pytest.mark.parametrize("case", sorted(BUILD), ids=lambda c: "-".join(x for x in c if x))
def test_registry_layouts_match_the_programs_files(tmp_path: Path, case: tuple) -> None:
    truth = BUILD[case](tmp_path / "x.db")
    conn = apsw.Connection(str(truth.path))
    try:
        cat = read_catalog(conn)
        ident = cat.identification
        assert ident.kind == case[0] and ident.registered and cat.foreign
        fmt = formats.format_named(ident.label)
        for t in fmt.tables:
            if t.name not in cat.tables:
                continue
            cols = cat.tables[t.name].columns
            lay = formats.registry_layout(fmt, t.name, cols)
            assert lay is not None and [c.name for c in lay.columns] == cols, t.name
            # every stored row scores as a fit of its own table's layout
            for row in conn.execute(f'SELECT * FROM "{t.name}" LIMIT 20'):
                values = [None if c.name == lay.rowid_column else v
                          for c, v in zip(lay.columns, row)]
                classes = ["null" if v is None else {int: "integer", float: "real",
                                                     str: "text", bytes: "blob"}[type(v)]
                           for v in values]
                assert lay.score(values, classes) >= lay.orphan_min, (t.name, row)
    finally:
        conn.close()


def test_identification_of_ours_empty_and_generic() -> None:
    assert formats.identify({}).kind == formats.EMPTY
    generic = formats.identify({"a": ["x"], "b": ["y"]})
    assert generic.kind == "sqlite" and generic.label == "an SQLite database with tables a, b"
    ours = formats.identify({"messages": ["uid", "fingerprint", "content_kind"],
                             "migrations": ["name", "applied_at"]})
    assert ours.ours and not ours.registered
