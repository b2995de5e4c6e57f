"""Corruption corpus, CI size: every class once (`python -m
tests.reliability.corpus --seeds N` adds random-damage layouts)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.damage import smash_page, sql
from tests.reliability import corpus
from tests.reliability.corpus_classes import CLASSES

import hstate_recovery


def test_corpus_has_at_least_30_classes():
    names = [c.__name__ for c in CLASSES]
    assert len(names) == len(set(names)) >= 30


def test_every_damage_class_meets_its_ground_truth(tmp_path: Path):
    results = corpus.run(tmp_path / "corpus")
    print("\n" + corpus.table(results))
    assert len(results) == len(CLASSES)
    assert {r.name: r.problems for r in results if r.problems} == {}
    by_name = {r.name: r for r in results}
    assert by_name["healthy"].recovered == by_name["healthy"].truth == 600
    assert by_name["smash_page1"].carver and by_name["smash_messages_interior"].carver
    assert by_name["freelist_trunk"].verdict == "structural"


def test_damaged_freelist_is_structural_not_healthy(tmp_path: Path):
    """Found by the corpus: inspect checked table by table only, so a
    smashed freelist trunk (garbage for the next write) read as healthy."""
    from tests.helpers import damage
    path = tmp_path / "state.db"
    damage.build_store(path, per_session=40)
    sql(path, "DELETE FROM messages WHERE session_id = 's5'")
    trunk = int.from_bytes(path.read_bytes()[32:36], "big")
    smash_page(path, trunk)
    insp = hstate_recovery.inspect(path)
    assert insp.verdict == "structural"
    assert "(file)" in insp.quick_check["damaged"]
    assert insp.quick_check["derived_only"] is False


# Layouts (with the search tables present) where the old bisection lost rows.
# The seeds pick pages of the pristine store, so they follow its layout: since
# m011 (no trigram _docsize) 1044 at 10% damages the first leaf and 1003 and
# 1393 at 25% both edge leaves, with the root sound (what 1003/1003/1002 did).
# 1228 and 1269 at 25% damage both edge leaves too, and every lookup the
# unreadable-root probe makes (each power of two) lands on one of them: the
# tree map's sound root now keeps bisection going (0 of 234 and 231 before).
@pytest.mark.parametrize("rate,seed", [(0.10, 1044), (0.25, 1003), (0.25, 1393),
                                       (0.25, 1228), (0.25, 1269)],
                         ids=["10pct-1044", "25pct-1003", "25pct-1393", "25pct-1228",
                              "25pct-1269"])
def test_bisection_reaches_every_reachable_row(tmp_path: Path, rate: float, seed: int):
    """Found by the corpus's random layouts: with the first leaf damaged the
    bisection spent its whole budget on the empty negative rowid space (36
    of 543 reachable rows came back); with both edge leaves damaged it gave
    the tree up as unreadable although its root was sound (0 of 234)."""
    from tests.reliability.corpus_classes import random_pages
    ctx = corpus.build_ctx(tmp_path / "build")
    sql_lanes = [lane for lane in hstate_recovery.LANES if lane != "carve"]  # bisection's own work
    result = corpus.run_class(random_pages(rate, seed), ctx, tmp_path / "case", lanes=sql_lanes)
    assert result.problems == []
    assert result.recovered == result.expected > 200
