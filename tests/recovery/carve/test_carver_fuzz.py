"""Random bytes in random pages (and WAL frames) never crash or hang the carver.

Beyond not crashing: rows whose leaf and overflow pages were not touched
still come back exactly, wherever the damage landed (page 1 included: the
rows are then attributed by their tables' layouts).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hstate_recovery.carve.carver import carve, estimate
from sessiondb import SessionDB
from tests.helpers.carving import (Truth, build_store, carved_by_key, expected_after_damage,
                                   message, patch, read_truth)

PAGE = 1024


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Truth, int]:
    path = tmp_path_factory.mktemp("fuzz") / "state.db"
    build_store(path, sessions=3, per_session=30, page_size=PAGE, delete_sessions=1,
                big_every=6)
    truth = read_truth(path)
    return path, truth, path.stat().st_size // PAGE


# (page, offset within the page, bytes): short splats and whole-page garbage
MUTATION = st.tuples(st.integers(min_value=1, max_value=10_000), st.integers(0, PAGE - 1),
                     st.one_of(st.binary(min_size=1, max_size=16),
                               st.binary(min_size=PAGE, max_size=PAGE)))

FUZZ = settings(max_examples=60, deadline=5000, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@FUZZ
@given(mutations=st.lists(MUTATION, min_size=1, max_size=6))
def test_random_bytes_in_random_pages(pristine, mutations) -> None:
    _check_damage(pristine, mutations)


@FUZZ
@given(first=st.one_of(st.binary(min_size=1, max_size=16).map(lambda b: (0, b)),
                       st.tuples(st.integers(0, PAGE - 17), st.binary(min_size=1, max_size=16)),
                       st.binary(min_size=PAGE, max_size=PAGE).map(lambda b: (0, b))),
       mutations=st.lists(MUTATION, max_size=4))
def test_random_bytes_in_page_one_and_others(pristine, first, mutations) -> None:
    """With page 1 (header and schema) hit, rows come back by their layouts."""
    offset, data = first
    _check_damage(pristine, [(1, offset, data)] + mutations)


def _check_damage(pristine, mutations) -> None:
    path, truth, pages = pristine
    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / "state.db"
        shutil.copyfile(path, copy)
        touched = set()
        for page, offset, data in mutations:
            page = 1 + (page - 1) % pages
            offset = 0 if len(data) == PAGE else offset
            touched.add(page)
            patch(copy, (page - 1) * PAGE + offset, data[:PAGE - offset])
        result = carve(copy, include_freelist=True)
        estimate(copy)
    assert result.stats.pages_read <= 4 * pages + 16
    for table in truth.rows:
        whole, _ = expected_after_damage(truth, table, touched)
        got = carved_by_key(result, table)
        assert whole <= set(got), table
        assert all(got[k] == truth.rows[table][k] for k in whole), table


@pytest.fixture(scope="module")
def wal_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose last commits live only in its -wal (copied while open)."""
    base = tmp_path_factory.mktemp("fuzzwal")
    path = base / "state.db"
    ids = build_store(path, sessions=2, per_session=10, page_size=PAGE)
    with SessionDB(path) as db:
        for k in range(4):
            db.append_messages(ids[k % 2], [message(900 + k * 3 + j) for j in range(3)])
        shutil.copyfile(f"{path}-wal", base / "saved-wal")
    shutil.copyfile(base / "saved-wal", f"{path}-wal")
    return path


@FUZZ
@given(offset=st.integers(min_value=0, max_value=40_000),
       data=st.binary(min_size=1, max_size=64), cut=st.integers(min_value=0, max_value=4096))
def test_random_bytes_in_the_wal(wal_source: Path, offset: int, data: bytes, cut: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / "state.db"
        shutil.copyfile(wal_source, copy)
        wal = Path(f"{copy}-wal")
        shutil.copyfile(f"{wal_source}-wal", wal)
        size = wal.stat().st_size
        patch(wal, offset % size, data)
        os.truncate(wal, size - cut)
        result = carve(copy, wal, include_uncommitted=True)
        estimate(copy, wal)
    st_ = result.stats
    assert st_.wal_problem or st_.frames_applied + sum(st_.frames_ignored.values()) > 0
