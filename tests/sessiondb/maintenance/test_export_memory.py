"""A 100k-message export streams: its memory peak does not grow with the session."""
from __future__ import annotations

import json
import tracemalloc

from sessiondb.maintenance.export import export_to_path
from sessiondb.importers.importer import import_export_file

N = 100_000
TEXT = "x" * 200


def test_large_export_runs_in_bounded_memory(open_store, tmp_path):
    db = open_store()
    db.create_session("big", source="bench")
    db.append_messages("big", [{"role": "user", "content": f"{i} {TEXT}"} for i in range(N)])
    db.create_session("small", source="bench")
    db.append_messages("small", [{"role": "user", "content": "tiny"}])
    out = tmp_path / "big.jsonl"

    tracemalloc.start()
    try:
        summary = export_to_path(db.core, None, "jsonl", out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert (summary.sessions, summary.messages) == (2, N + 1)
    size = out.stat().st_size
    assert size > N * 200  # the whole transcript really went through
    # Loading the transcript whole would hold ~N dicts (well over 50 MB); a
    # streamed export holds one page of rows plus write buffers.
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes for a {size}-byte export"
    with out.open() as f:
        assert json.loads(f.readline())["type"] == "header"
    last = out.read_text().splitlines()[-1]
    assert json.loads(last) == {"type": "end", "sessions": 2, "messages": N + 1}


def test_large_import_runs_in_bounded_memory(open_store, tmp_path):
    # Fewer, bigger messages: a 22 MB file whose whole-file load would far
    # exceed the bound, while a streamed import holds one chunk at a time.
    count, text = 10_000, "y" * 2000
    db = open_store()
    db.create_session("big", source="bench")
    db.append_messages("big", [{"role": "user", "content": f"{i} {text}"}
                               for i in range(count)])
    out = tmp_path / "big.jsonl"
    export_to_path(db.core, None, "jsonl", out)
    assert out.stat().st_size > 20 * 1024 * 1024
    fresh = open_store(home=tmp_path / "fresh")

    tracemalloc.start()
    try:
        result = import_export_file(fresh, out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert result.messages_added == count
    assert fresh.count_messages(["big"]) == count
    assert peak < 6 * 1024 * 1024, f"peak {peak} bytes"
