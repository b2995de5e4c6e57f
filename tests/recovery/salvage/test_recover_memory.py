"""Recovery runs in bounded memory: rows stream from the lanes to the new file.

Two stores of the same shape, one four times the other (rows of ~8 KB, so
the larger holds ~32 MB of values), are recovered in a fresh process each;
the larger recovery's peak RSS must stay within a small factor of the
smaller's. Holding the rows (as recovery once did) adds their size to the
peak: about 1.6x here. Both the default lanes and the page carver alone.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from sessiondb import SessionDB

ROOT = Path(__file__).resolve().parents[3]
PER_SESSION = 100
RECOVER = r"""
import json, sys
from hstate_recovery import recover
r = recover(sys.argv[1], sys.argv[2], lanes=sys.argv[3].split(","), allow_partial=True)
print(json.dumps({"outcome": r.outcome, "messages": r.tables["messages"].copied}))
"""
# Linux keeps a process's peak RSS across exec, so a child forked from pytest
# would report pytest's size: a small wrapper runs the recovery and reads
# its child's peak (RUSAGE_CHILDREN), as bench/scale.py measures commands.
WRAP = r"""
import json, resource, subprocess, sys
done = subprocess.run([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], check=True,
                      capture_output=True, text=True)
out = json.loads(done.stdout.strip().splitlines()[-1])
out["rss_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps(out))
"""


def build(path: Path, messages: int) -> Path:
    """Assistant turns whose tool call carries ~8 KB of arguments (text the
    search index does not hold, so the stores are quick to build and recover)."""
    rng = random.Random(5)
    blob = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8000))
    with SessionDB(path, background_index=False) as db:
        for s in range(messages // PER_SESSION):
            sid = f"s{s:05d}"
            db.create_session(sid, source="test")
            db.append_messages(sid, [
                {"role": "assistant", "content": f"call {i}",
                 "tool_calls": [{"id": f"c{s}_{i}", "type": "function",
                                 "function": {"name": "dump", "arguments": blob[i:] + str(i)}}]}
                for i in range(PER_SESSION)])
    return path


def peak(source: Path, output: Path, lanes: str) -> dict:
    done = subprocess.run([sys.executable, "-c", WRAP, RECOVER, str(source), str(output), lanes],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sizes")
    return build(root / "small.db", 1000), build(root / "large.db", 4000)


@pytest.mark.parametrize("lanes", ["backup,rows,bisect,index,carve", "carve"])
def test_peak_rss_does_not_grow_with_the_store(stores, tmp_path, lanes):
    small, large = stores
    a = peak(small, tmp_path / "a.db", lanes)
    b = peak(large, tmp_path / "b.db", lanes)
    assert (a["messages"], b["messages"]) == (1000, 4000)
    assert large.stat().st_size > 3.5 * small.stat().st_size
    # 4x the rows (+24 MB of values): the peak stays put, within noise
    assert b["rss_kb"] <= 1.25 * a["rss_kb"], (a, b)


def damaged(store: Path, folder: Path, fraction: float = 0.01) -> Path:
    """A copy with ``fraction`` of its pages (never page 1) overwritten with
    seeded random bytes, as bench/scale.py damages its 1% copy."""
    rng = random.Random(7)
    copy = folder / f"damaged-{store.name}"
    copy.write_bytes(store.read_bytes())
    pages = copy.stat().st_size // 4096
    with open(copy, "r+b") as f:
        for p in rng.sample(range(2, pages + 1), max(1, round(pages * fraction))):
            f.seek((p - 1) * 4096)
            f.write(rng.randbytes(4096))
    return copy


def test_peak_rss_of_a_damaged_recover_does_not_grow_with_the_store(stores, tmp_path):
    """Rows carved from orphaned leaves, gaps and lost records all stream:
    nothing kept per row grows the peak (goal: <= 200 MB, <= 1.5x for the
    larger store; 100k against 1M messages is measured in bench/scale.py)."""
    small, large = (damaged(s, tmp_path) for s in stores)
    lanes = "backup,rows,bisect,index,carve"
    a = peak(small, tmp_path / "a.db", lanes)
    b = peak(large, tmp_path / "b.db", lanes)
    assert 0 < a["messages"] < 1000 and 0 < b["messages"] < 4000, (a, b)
    assert b["rss_kb"] <= 200 * 1024, b
    assert b["rss_kb"] <= 1.5 * a["rss_kb"], (a, b)
