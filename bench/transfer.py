"""Export/import throughput and memory, beside the floor of loading a transcript whole.

Usage: python bench/transfer.py [--messages N] [--size BYTES]

Prints one JSON document: seconds and messages/s for a JSONL export and for
importing it into a fresh home (two passes: check, then write), the Python
allocation peak of the streamed export, and, as the floor to compare with,
the peak of `get_messages` loading the same transcript at once.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sessiondb import SessionDB  # noqa: E402
from sessiondb.maintenance.export import export_to_path  # noqa: E402
from sessiondb.importers.importer import import_export_file  # noqa: E402


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = SessionDB.open(root / "src")
        db.create_session("big", source="bench")
        db.append_messages("big", [{"role": "user", "content": f"{i} " + "x" * args.size}
                                   for i in range(args.messages)])
        out = root / "big.jsonl"
        t = time.perf_counter()
        export_to_path(db.core, None, "jsonl", out)
        export_s = time.perf_counter() - t
        fresh = SessionDB.open(root / "dst")
        t = time.perf_counter()
        import_export_file(fresh, out)
        import_s = time.perf_counter() - t
        out.unlink()
        export_peak = _peak(lambda: export_to_path(db.core, None, "jsonl", out))
        load_peak = _peak(lambda: db.get_messages("big"))
        print(json.dumps({
            "messages": args.messages, "content_bytes": args.size,
            "file_bytes": out.stat().st_size,
            "export_s": round(export_s, 2), "export_msgs_per_s": round(args.messages / export_s),
            "import_s": round(import_s, 2), "import_msgs_per_s": round(args.messages / import_s),
            "export_peak_bytes": export_peak, "load_whole_peak_bytes": load_peak,
        }, indent=2))
        db.close()
        fresh.close()


if __name__ == "__main__":
    main()
