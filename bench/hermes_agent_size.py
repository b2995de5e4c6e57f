"""Our store of a Hermes Agent history beside the Hermes Agent file, bytes for bytes.

Builds a Hermes Agent state.db (schema v31, its own DDL, both of its FTS5
indexes and their triggers; tests/helpers/foreign_dbs.py, as the
foreign-file tests build it) of ``--messages`` messages in sessions of 100,
imports it with `sessiondb.importers.import_hermes_agent`, lets our indexer
catch up, closes both, and prints each file's bytes (database plus -wal).

``--text lorem`` keeps the test files' own message text (a row number and
twelve words of five); ``--text prose`` puts the prose corpus's turns
(bench/common.py, ~340 characters) in the same rows, ``--text real`` real
English and code from this machine's files (bench/real_text.py).

    python bench/hermes_agent_size.py [--messages 100000] [--text lorem|prose|real]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import prose_message, real_message, store_bytes  # noqa: E402
from sessiondb import SessionDB  # noqa: E402
from sessiondb.importers import import_hermes_agent  # noqa: E402
from tests.helpers import foreign_dbs  # noqa: E402

PER_SESSION = 100


def _prose_text(i: int, words: int = 12) -> str:
    return str(prose_message(i)["content"])


_REAL: dict[int, int] = {}


def _real_text(i: int, words: int = 12) -> str:
    """Real text (bench/real_text.py), a new piece for each new number the builder asks for."""
    return str(real_message(_REAL.setdefault(i, len(_REAL)))["content"])


def run(messages: int, text: str, root: Path) -> dict[str, float]:
    if text == "prose":
        foreign_dbs._text = _prose_text  # the builder's text, swapped for the prose corpus
    elif text == "real":
        foreign_dbs._text = _real_text
    theirs, ours = root / "hermes-agent.db", root / "ours.db"
    started = time.perf_counter()
    foreign_dbs.build_hermes_agent(theirs, max(1, messages // PER_SESSION), PER_SESSION)
    built = time.perf_counter()
    with SessionDB(ours, background_index=False) as db:
        result = import_hermes_agent(db, theirs)
        db.catch_up_index()
    done = time.perf_counter()
    n = result.messages_added
    return {"messages": n, "theirs": store_bytes(theirs), "ours": store_bytes(ours),
            "build_s": built - started, "import_s": done - built}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--text", choices=("lorem", "prose", "real"), default="lorem")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hermes-ha-size-") as tmp:
        r = run(args.messages, args.text, Path(tmp))
    n = r["messages"]
    print(f"Hermes Agent history, {n:,} messages ({args.text} text): Hermes Agent file"
          f" {r['theirs'] / 1e6:.1f} MB ({r['theirs'] / n:.0f} B/msg), ours"
          f" {r['ours'] / 1e6:.1f} MB ({r['ours'] / n:.0f} B/msg) = {r['ours'] / r['theirs']:.0%}"
          f" of theirs (built {r['build_s']:.0f} s, imported and indexed {r['import_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
