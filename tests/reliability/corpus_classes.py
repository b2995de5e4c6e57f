"""The damaged-store classes of the corruption corpus.

Each class damages a fresh copy in ``work/state.db`` (and its sidecars)
and returns an `Expect`: the verdicts and outcomes allowed, ``expected``
(the exact id -> text map the SQL lanes must write; None: no output) and
``truth`` (the rows still physically present, which a page carver could
reach). A class where ``expected`` falls short of ``truth`` is
carver-dependent: with the carver lane it is held to ``truth`` instead
(corpus.py, `tighten_for_carver`).
"""
from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.helpers import damage
from tests.helpers.damage import PAGE_SIZE, pages_of, smash_page, sql, write_at

from .corpus_build import Pristine, WalBundle

PARTIAL = frozenset({"partial"})
RECOVERED = frozenset({"recovered"})


@dataclass
class Expect:
    verdicts: frozenset[str]
    outcomes: frozenset[str]
    expected: dict[int, str] | None
    truth: dict[int, str]
    note: str = ""
    # When no exact answer exists: every recovered (id, text) must be one of these.
    allowed: set[tuple[int, str]] | None = None


@dataclass
class Ctx:
    pristine: Pristine
    wal: WalBundle
    other: tuple[Path, dict[int, str]]


def _copy(src: Path, work: Path) -> Path:
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = work / "state.db"
    shutil.copyfile(src, target)
    return target


def _copy_bundle(b: WalBundle, work: Path) -> Path:
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    for f in b.directory.iterdir():
        shutil.copyfile(f, work / f.name)
    return work / "state.db"


def _sub(texts: dict[int, str], ids: set[int]) -> dict[int, str]:
    return {i: t for i, t in texts.items() if i in ids}


def _pages(p: Pristine, bad: set[int], verdicts=frozenset({"structural"}),
           outcomes=PARTIAL) -> Expect:
    return Expect(verdicts, outcomes, _sub(p.texts, p.messages.reachable(bad)),
                  _sub(p.texts, p.on_leaves(bad)))


def _schema_pages(path: Path) -> set[int]:
    return set(pages_of(path, "sqlite_schema")) | {1}


def _canonical_pages(path: Path) -> set[int]:
    """Pages of everything but the derived full-text tables (read before damage)."""
    rows = sql(path, "SELECT pageno, name FROM dbstat")
    return {p for p, name in rows if not name.startswith(("messages_fts", "messages_terms"))}


def healthy(c: Ctx, work: Path) -> Expect:
    _copy(c.pristine.path, work)
    return Expect(frozenset({"healthy"}), RECOVERED, c.pristine.texts, c.pristine.texts)


RANDOM_RATES = (0.01, 0.03, 0.10, 0.25)


def random_pages(rate: float, seed: int, suffix: str = "") -> Callable[[Ctx, Path], Expect]:
    def case(c: Ctx, work: Path) -> Expect:
        path = _copy(c.pristine.path, work)
        n = damage.page_count(path)
        candidates = sorted(set(range(2, n + 1)) - _schema_pages(c.pristine.path))
        bad = set(random.Random(seed).sample(candidates, max(1, int(len(candidates) * rate))))
        for pg in bad:
            smash_page(path, pg)
        exp = _pages(c.pristine, bad, outcomes=frozenset({"partial", "recovered"}))
        if not exp.expected:  # nothing reachable: no output unless sessions were read
            exp.outcomes = frozenset({"partial", "not_recoverable"})
        if not bad & _canonical_pages(c.pristine.path):  # only the derived index was hit
            exp.verdicts, exp.outcomes = frozenset({"fts_only"}), RECOVERED
        return exp
    case.__name__ = f"random_pages_{int(rate * 100)}pct{suffix}"
    return case


def smash(which: str) -> Callable[[Ctx, Path], Expect]:
    def case(c: Ctx, work: Path) -> Expect:
        p = c.pristine
        path = _copy(p.path, work)
        pick = {"messages_root": lambda: p.messages.root,
                "messages_interior": p.messages.middle_interior,
                "messages_leaf": p.messages.middle_leaf,
                "sessions_root": lambda: p.sessions.root,
                "page1": lambda: 1}[which]
        pg = pick()
        smash_page(path, pg)
        if which == "page1":
            return Expect(frozenset({"structural", "not_a_database"}),
                          frozenset({"not_recoverable"}), None, p.texts)
        return _pages(p, {pg})
    case.__name__ = f"smash_{which}"
    return case


def two_leaves(c: Ctx, work: Path) -> Expect:
    p = c.pristine
    path = _copy(p.path, work)
    leaves = sorted(p.messages.leaves, key=lambda pg: p.messages.leaves[pg][0])
    bad = {leaves[3], leaves[-4]}
    for pg in bad:
        smash_page(path, pg)
    return _pages(p, bad)


def index_leaf(c: Ctx, work: Path) -> Expect:
    path = _copy(c.pristine.path, work)
    smash_page(path, pages_of(c.pristine.path, "messages_in_order", "leaf")[1])
    return Expect(frozenset({"structural"}), frozenset({"recovered", "partial"}),
                  c.pristine.texts, c.pristine.texts, "an index is derived: no row lost")


def header_field(offset: int, data: bytes, label: str) -> Callable[[Ctx, Path], Expect]:
    def case(c: Ctx, work: Path) -> Expect:
        write_at(_copy(c.pristine.path, work), offset, data)
        return Expect(frozenset({"structural"}), RECOVERED, c.pristine.texts,
                      c.pristine.texts, "header fixed on the copy")
    case.__name__ = f"header_{label}"
    return case


def fts_shadow(table: str) -> Callable[[Ctx, Path], Expect]:
    def case(c: Ctx, work: Path) -> Expect:
        assert c.pristine.fts_path is not None
        path = _copy(c.pristine.fts_path, work)
        smash_page(path, pages_of(c.pristine.fts_path, table)[0])
        return Expect(frozenset({"fts_only"}), RECOVERED, c.pristine.texts, c.pristine.texts,
                      "derived index rebuilt")
    case.__name__ = f"fts_{table}"
    return case


def truncate(fraction: float, extra: int = 0) -> Callable[[Ctx, Path], Expect]:
    def case(c: Ctx, work: Path) -> Expect:
        path = _copy(c.pristine.path, work)
        n = damage.page_count(path)
        cut = int(n * fraction)
        os.truncate(path, cut * PAGE_SIZE + extra)
        first_bad = cut + 1 if not extra else cut + 1
        return _pages(c.pristine, set(range(first_bad, n + 1)))
    case.__name__ = f"truncate_{int(fraction * 100)}pct" + ("_mid_page" if extra else "")
    return case


def zero_range(start_frac: float, count: int, label: str) -> Callable[[Ctx, Path], Expect]:
    def case(c: Ctx, work: Path) -> Expect:
        path = _copy(c.pristine.path, work)
        n = damage.page_count(path)
        first = max(2, int(n * start_frac))
        bad = set(range(first, min(n, first + count - 1) + 1)) - _schema_pages(c.pristine.path)
        canonical = bad & _canonical_pages(c.pristine.path)
        for pg in bad:
            write_at(path, (pg - 1) * PAGE_SIZE, bytes(PAGE_SIZE))
        if not canonical:  # the range fell on the full-text index's pages only
            return Expect(frozenset({"fts_only"}), RECOVERED, c.pristine.texts,
                          c.pristine.texts, "derived index rebuilt")
        return _pages(c.pristine, bad)
    case.__name__ = f"zero_range_{label}"
    return case


def leaf_header_bitflip(c: Ctx, work: Path) -> Expect:
    p = c.pristine
    path = _copy(p.path, work)
    bad = set(random.Random(11).sample(sorted(p.messages.leaves), 4))
    for pg in bad:
        off = (pg - 1) * PAGE_SIZE
        byte = path.read_bytes()[off]
        write_at(path, off, bytes([byte ^ 0x40]))  # 13 (table leaf) -> 77: not a page type
    return _pages(p, bad)


def freelist_trunk(c: Ctx, work: Path) -> Expect:
    p = c.pristine
    path = _copy(p.path, work)
    gone = {r for (r,) in sql(path, "SELECT id FROM messages WHERE session_id = 's5'")}
    sql(path, "DELETE FROM messages WHERE session_id = 's5'")
    trunk = int.from_bytes(path.read_bytes()[32:36], "big")
    assert trunk, "the delete left no free page"
    smash_page(path, trunk)
    live = {i: t for i, t in p.texts.items() if i not in gone}
    return Expect(frozenset({"structural"}), frozenset({"recovered", "partial"}), live, live,
                  "only free pages damaged")


def wal(kind: str) -> Callable[[Ctx, Path], Expect]:
    def case(c: Ctx, work: Path) -> Expect:
        b = c.wal
        path = _copy_bundle(b, work)
        walf = Path(f"{path}-wal")
        keep = set(b.texts)
        ok = frozenset({"healthy"})
        if kind == "torn_tail":
            os.truncate(walf, walf.stat().st_size - 100)
            keep -= set(b.commits[-1])
        elif kind in ("salt_mismatch", "checksum_flip"):
            m = len(b.commits) // 2
            off = b.frame_offset(b.commit_frames()[m])
            if kind == "salt_mismatch":
                write_at(walf, off + 8, b"\x5a\x5a\x5a\x5a")
            else:
                write_at(walf, off + 24 + 500, b"\xff\x00\xff")
            keep -= {i for ids in b.commits[m:] for i in ids}
        elif kind == "missing_shm":
            Path(f"{path}-shm").unlink()
        elif kind == "missing_wal":
            walf.unlink()
            keep = set(b.checkpointed)
        texts = _sub(b.texts, keep)
        return Expect(ok, RECOVERED, texts, texts)
    case.__name__ = f"wal_{kind}"
    return case


def not_a_database(c: Ctx, work: Path) -> Expect:
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    (work / "state.db").write_bytes(random.Random(3).randbytes(20 * 1024))
    return Expect(frozenset({"not_a_database"}), frozenset({"not_recoverable"}), None, {})


def empty_file(c: Ctx, work: Path) -> Expect:
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    (work / "state.db").write_bytes(b"")
    return Expect(frozenset({"empty"}), RECOVERED, {}, {},
                  "a zero-byte file is a valid empty database: recovered as an empty store")


def zero_file(c: Ctx, work: Path) -> Expect:
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    (work / "state.db").write_bytes(bytes(64 * 1024))
    return Expect(frozenset({"empty"}), frozenset({"not_recoverable"}), None, {})


def cp_other(over_wal: bool) -> Callable[[Ctx, Path], Expect]:
    def case(c: Ctx, work: Path) -> Expect:
        other, texts = c.other
        path = _copy_bundle(c.wal, work) if over_wal else _copy(c.pristine.path, work)
        ino = path.stat().st_ino
        with open(path, "r+b") as f:  # what `cp other state.db` does: same inode
            f.write(other.read_bytes())
            f.truncate()
        assert path.stat().st_ino == ino
        if over_wal:  # the old -wal's frames belong to the file that was overwritten
            both = set(texts.items()) | set(c.wal.texts.items())
            return Expect(frozenset({"structural"}), PARTIAL, None, texts,
                          "the stale -wal is applied to the foreign file: rows of both "
                          "stores, never invented ones", allowed=both)
        return Expect(frozenset({"healthy"}), RECOVERED, texts, texts,
                      "the other store is what the file now holds")
    case.__name__ = "cp_other_same_inode" + ("_over_live_wal" if over_wal else "")
    return case


CLASSES: list[Callable[[Ctx, Path], Expect]] = [
    healthy,
    random_pages(0.01, 1), random_pages(0.03, 2), random_pages(0.10, 3), random_pages(0.25, 4),
    smash("page1"), smash("sessions_root"), smash("messages_root"),
    smash("messages_interior"), smash("messages_leaf"), two_leaves, index_leaf,
    header_field(0, b"\x00" * 16, "magic"), header_field(16, b"\xab\xcd", "page_size"),
    header_field(44, b"\x00\x00\x00\x09", "schema_format"),
    fts_shadow("messages_fts_data"), fts_shadow("messages_fts_idx"),
    truncate(0.7), truncate(0.3), truncate(0.6, 300),
    zero_range(0.0, 5, "after_page1"), zero_range(0.5, 6, "middle"),
    zero_range(0.9, 10 ** 6, "tail"),
    leaf_header_bitflip, freelist_trunk,
    wal("intact"), wal("torn_tail"), wal("salt_mismatch"), wal("checksum_flip"),
    wal("missing_shm"), wal("missing_wal"),
    not_a_database, empty_file, zero_file, cp_other(False), cp_other(True),
]
