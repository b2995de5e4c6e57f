"""Random bytes in random pages (and WAL frames) never crash or hang the carver.

Beyond not crashing: rows whose leaf and overflow pages were not touched
still come back exactly, wherever the damage landed (page 1 excepted).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.carver import carve, estimate
from tests.helpers.carving import (Truth, build_store, carved_by_key, expected_after_damage,
                                   patch, read_truth)

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
    if 1 in touched:
        return
    for table in truth.rows:
        whole, _ = expected_after_damage(truth, table, touched)
        got = carved_by_key(result, table)
        assert whole <= set(got), table
        assert all(got[k] == truth.rows[table][k] for k in whole), table


@FUZZ
@given(offset=st.integers(min_value=0, max_value=40_000), data=st.binary(min_size=1,
                                                                          max_size=64))
def test_random_bytes_in_the_wal(tmp_path_factory, offset: int, data: bytes) -> None:
    base = tmp_path_factory.getbasetemp() / "fuzzwal"
    src = base / "state.db"
    if not src.exists():
        _make_wal_store(src)
    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / "state.db"
        shutil.copyfile(src, copy)
        shutil.copyfile(f"{src}-wal", f"{copy}-wal")
        wal = Path(f"{copy}-wal")
        patch(wal, offset % max(1, wal.stat().st_size), data)
        result = carve(copy, wal, include_uncommitted=True)
    assert result.stats.frames_applied + sum(result.stats.frames_ignored.values()) >= 0


def _make_wal_store(path: Path) -> None:
    from sessiondb import SessionDB
    from tests.helpers.carving import message
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = build_store(path.with_name("base.db"), sessions=2, per_session=10, page_size=PAGE)
    shutil.copyfile(path.with_name("base.db"), path)
    with SessionDB(path) as db:
        for k in range(4):
            db.append_messages(ids[k % 2], [message(900 + k * 3 + j) for j in range(3)])
        shutil.copyfile(f"{path}-wal", path.with_name("saved-wal"))
    shutil.copyfile(path.with_name("saved-wal"), f"{path}-wal")
