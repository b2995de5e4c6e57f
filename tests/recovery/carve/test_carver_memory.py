"""What the carver keeps per page of an auto_vacuum file stays out of memory.

The pointer map has an entry for every page; holding them all (a dict of
tuples, ~300 bytes a page) made a damaged recover's peak grow with the file
(135.6 MB at 300,000 messages in bench/scale.py against 78.1 MB at 100,000).
Entries are read from their map page where needed, so loading the map of
a file of a few thousand pages retains next to nothing.
"""
from __future__ import annotations

import tracemalloc
from pathlib import Path

from hstate_recovery.carve.carver import Carver, open_source
from tests.helpers.carving import build_store


def test_loading_the_pointer_map_keeps_no_entry_per_page(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_store(path, sessions=4, per_session=300, page_size=1024, auto_vacuum=True,
                big_every=5)
    with open_source(path, None) as image:
        assert image.info.header is not None and image.info.header.auto_vacuum
        pages = image.page_count
        carver = Carver(image)
        assert carver._settle_page_size()
        carver.skip.add(pages)  # (the page set's bitmap at its full size, made beforehand)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            carver._load_ptrmap()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert pages > 2000
        assert kept < 100 * 1024, (kept, pages)  # a dict of every entry: ~300 bytes a page
        assert carver._ptrmap_entry(pages) is not None  # (read from its map page)
