"""Search indexes built in parallel by builder processes, then copied in as rows.

Tokenizing is most of the cost of filling a store's search index (per
message of the scale export, ~30-45 us for the word index and ~90-125 us
for the trigram index, against ~80 us for checking and writing the row),
and FTS5 builds an index on one thread. On two cores a second process can
build an index while the first writes rows or builds the other one. This
module is that, once, for both callers:

- the import into an empty store (import_index.py) starts one builder per
  index before its writing pass; each follows the store's committed rows
  (``follow=True``) as the batches commit, and after the last one the
  import copies both indexes in;
- recover (recovery/output/bulk.py, through recovery_api) starts a trigram
  builder and builds the word index in place meanwhile, then copies the
  trigram index in. For a damaged source the builder starts with the lanes
  and follows rows written in any id order (``track``: `_Gaps` re-reads
  the ids it has not seen; each row's id and `text_crc` are kept, so
  `ParallelBuild.correct` can tell whether the copy is exact).

A builder (`main`, run as ``python -m sessiondb.index.fts_build STORE TABLE
SCRATCH``) reads ``id, text`` from the store's text view through a
read-only connection (in WAL mode the writer never waits for it) and
inserts them into the same FTS5 table (`search_index.fts_ddl`, the same
external-content clause, so the on-disk format is the store's) in a
private scratch file: no journal, no sync (a crash loses only the
scratch), no merging while it loads (`LOAD_SETTINGS`: a segment per
COMMIT_ROWS rows or 16 MB of pending terms, as recover's in-place fill
leaves them; no 'optimize', which cost ~1 s of the trigram builder's 11 s
at 100k messages, on the critical path; the destination's own automerge
setting merges them as later writes come). It reads what has committed; a line ``final`` on its stdin says
the last row is in, and it ends once it has read every row (EOF first
stops it). Its one line of JSON on stdout is the highest row id indexed
(the caller checks it against the store), its CPU seconds and peak RSS.

`ParallelBuild.copied` then attaches the scratch files read-only and
`copy_index_tables` (search_copy.py, the one copy primitive) replaces the
destination's ``_data``, ``_idx`` and ``_docsize`` rows (the trigram index
has no ``_docsize`` since m011) in the caller's transaction; ``_config`` stays the destination's (the scratch's holds the
loading settings). The caller decides whether the copy is exact (it knows
what was written meanwhile) and sets the watermark. FTS5 caches an index's
structure per connection: copy on a connection that has not read that
index since its last DDL (see search_copy.py).

Scratch files live in a private (0700) directory beside the store, named
with doctor's scratch prefix (a leftover is found and removed), deleted by
`close` however the caller ends; a builder that does not stop is killed
(our own child, by its handle).
"""
from __future__ import annotations

import bisect
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import zlib
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

import apsw

from ..base import create_private_file, one, policy
from . import search_index
from .search_copy import attach_readonly, copy_index_tables

log = logging.getLogger(__name__)

# Starts with hstate_recovery.source.liveread.SCRATCH_PREFIX, which doctor --fix cleans up.
PREFIX = ".hermes-scratch-ftsbuild-"
#: copied from a built index; ``_config`` stays the destination's
COPIED_SHADOWS = ("data", "idx", "docsize")
# FTS5 while a scratch index loads: no merging as it goes, a larger
# pending-terms buffer (bounded: 16 MB a builder).
LOAD_SETTINGS = (("automerge", 0), ("crisismerge", 2000), ("hashsize", 16 << 20))
READ_ROWS = 1_000  # rows a builder reads from the store at a time
COMMIT_ROWS = 50_000  # rows per scratch transaction (each commit flushes a segment)
BUFFER_ROWS = 10_000  # a tracking builder's rows per commit (sorted by id first)
BUFFER_BYTES = 16 << 20  # ... or this much text
MIN_ROWID, MAX_ROWID = -(1 << 63), (1 << 63) - 1
POLL_S = 0.05  # a following builder with nothing to read waits this long for a commit
STOP_WAIT_S = 10.0  # a stopped builder ends within a read batch; past this it is killed


def cores() -> int:
    """CPUs this process may run on (a second builder helps only with a second)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# -- the builder process ----------------------------------------------------------

def text_crc(text: object) -> int:
    """A checksum of one row's searchable text, as a tracking builder keeps
    it (`ParallelBuild.correct` compares the store's rows with it)."""
    if isinstance(text, str):
        return zlib.crc32(text.encode("utf-8", "surrogatepass"))
    if isinstance(text, bytes):
        return zlib.crc32(text) ^ 0x5A5A5A5A
    return -1  # NULL: indexed as no tokens


def build(store: Path, table: str, scratch: Path, final: threading.Event,
          stop: threading.Event, track: bool = False) -> int:
    """``table`` from the store's committed rows into ``scratch`` until
    ``final`` is set and every row is read (or ``stop``); returns the
    highest row id indexed. ``track``: also keep each indexed row's id and
    `text_crc` in the scratch's ``indexed`` table."""
    src = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    dst = apsw.Connection(str(scratch))
    try:
        policy.apply_policy(src, policy.READER_POLICY)
        dst.execute("PRAGMA journal_mode=OFF")  # a scratch file: a crash only loses it
        dst.execute("PRAGMA synchronous=OFF")
        dst.execute(search_index.fts_ddl(
            table, f", content='{search_index.TEXT_VIEW}', content_rowid='id'"))
        for key, value in LOAD_SETTINGS:
            dst.execute(f"INSERT INTO {table}({table}, rank) VALUES (?, ?)", (key, value))
        if track:
            dst.execute("CREATE TABLE indexed(id INTEGER PRIMARY KEY, crc INTEGER NOT NULL)")
        top, finished, gaps = 0, False, _Gaps()
        while not (finished or stop.is_set()):
            with dst:  # each commit flushes the pending terms as a segment
                if track:
                    top, finished = _load_tracked(src, dst, table, top, gaps, final, stop)
                else:
                    top, finished = _load(src, dst, table, top, final, stop)
        return top
    finally:
        src.close()
        dst.close()


def _load(src: apsw.Connection, dst: apsw.Connection, table: str, top: int,
          final: threading.Event, stop: threading.Event) -> tuple[int, bool]:
    """Up to COMMIT_ROWS rows above ``top`` into the scratch; (new top,
    whether every row of the last commit has been read)."""
    loaded = 0
    while loaded < COMMIT_ROWS and not stop.is_set():
        done = final.is_set()  # read first: a read after it sees the last commit
        rows: list[tuple[Any, ...]] = src.execute(
            f"SELECT id, text FROM {search_index.TEXT_VIEW} WHERE id > ? ORDER BY id LIMIT ?",
            (top, READ_ROWS)).fetchall()
        if rows:
            dst.executemany(f"INSERT INTO {table}(rowid, text) VALUES (?, ?)", rows)
            top = int(rows[-1][0])
            loaded += len(rows)
        elif done:
            return top, True
        else:
            final.wait(POLL_S)
    return top, False


class _Gaps:
    """What a tracking builder has read, as runs of consecutive ids (a row
    can still be written into any id the builder has not read, in any
    order: the lanes write ranges as they find them). The gaps between
    runs are read again until the last row is in; a row written inside a
    run (an id reused after a delete) is found by `ParallelBuild.correct`."""

    def __init__(self) -> None:
        self.spans: list[list[int]] = []  # sorted, disjoint [lo, hi]

    def open(self) -> list[tuple[int, int]]:
        """The id ranges (inclusive) not yet read."""
        out, lo = [], MIN_ROWID
        for a, b in self.spans:
            if lo < a:
                out.append((lo, a - 1))
            lo = b + 1
        if self.spans and self.spans[-1][1] == MAX_ROWID:
            return out
        return out + [(lo, MAX_ROWID)]

    def read(self, ids: list[int]) -> None:
        """Mark ``ids`` (ascending) read: one run per stretch of consecutive ids."""
        runs: list[list[int]] = []
        for i in ids:
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        merged: list[list[int]] = []
        for span in sorted(self.spans + runs):  # one run per hole in the ids
            if merged and span[0] <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], span[1])
            else:
                merged.append(span)
        self.spans = merged


def _load_tracked(src: apsw.Connection, dst: apsw.Connection, table: str, top: int,
                  gaps: _Gaps, final: threading.Event,
                  stop: threading.Event) -> tuple[int, bool]:
    """Rows the store holds that this builder has not read, in whatever
    order they were written, into the scratch: up to BUFFER_ROWS rows (or
    BUFFER_BYTES of text) a commit, inserted in id order (FTS5 starts a new
    segment whenever the rowid goes backwards), each row's id and
    `text_crc` kept in ``indexed``; (highest id indexed, whether every row
    of the last commit has been read)."""
    buf: list[tuple[Any, ...]] = []
    size, finished = 0, False
    while not stop.is_set() and len(buf) < BUFFER_ROWS and size < BUFFER_BYTES:
        done = final.is_set()  # read first: a pass after it sees the last commit
        found, seen = 0, list[int]()
        for lo, hi in _worth_reading(src, gaps.open()):
            while lo <= hi and len(buf) < BUFFER_ROWS and size < BUFFER_BYTES:
                # the whole gap, a read at a time (a pass per gap read costs a
                # query for every hole that has rows)
                rows: list[tuple[Any, ...]] = src.execute(
                    f"SELECT id, text FROM {search_index.TEXT_VIEW} WHERE id BETWEEN ? AND ?"
                    " ORDER BY id LIMIT ?", (lo, hi, READ_ROWS)).fetchall()
                seen.extend(int(r[0]) for r in rows)
                buf.extend(rows)
                size += sum(len(r[1]) for r in rows if isinstance(r[1], (str, bytes)))
                found += len(rows)
                if len(rows) < READ_ROWS:
                    break
                lo = int(rows[-1][0]) + 1
            if len(buf) >= BUFFER_ROWS or size >= BUFFER_BYTES:
                break
        gaps.read(sorted(seen))
        if not found:
            if done:
                finished = True
                break
            final.wait(POLL_S)
    buf.sort(key=lambda r: r[0])
    dst.executemany(f"INSERT INTO {table}(rowid, text) VALUES (?, ?)", buf)
    dst.executemany("INSERT INTO indexed VALUES (?, ?)", [(r[0], text_crc(r[1])) for r in buf])
    return max(top, int(buf[-1][0])) if buf else top, finished


def _worth_reading(src: apsw.Connection, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Of the unread id ``ranges`` (ascending), those worth a read: the open
    top (above every row read) always, a hole below it only when a row has
    come into it, asked of the store for every hole in one statement. (A
    read per hole every pass, most of them finding nothing, was a third of
    a following builder's reading on a 1%-damaged copy: a thousand holes
    and 8,000 empty queries at 100k messages.)"""
    top = [ranges[-1]] if ranges and ranges[-1][1] == MAX_ROWID else []
    holes = ranges[:len(ranges) - len(top)]
    if not holes:
        return top
    ids = sorted(int(i) for (i,) in src.execute(
        f"SELECT t.id FROM json_each(?) AS g JOIN {search_index.TEXT_VIEW} AS t"
        " ON t.id BETWEEN g.value ->> 0 AND g.value ->> 1", (json.dumps(holes),)))
    filled = [(lo, hi) for lo, hi in holes
              if (i := bisect.bisect_left(ids, lo)) < len(ids) and ids[i] <= hi]
    return filled + top


def main(argv: list[str]) -> int:
    """A builder process: ``STORE TABLE SCRATCH [track]`` (see the module docstring)."""
    store, table, scratch = argv[:3]
    track = argv[3:] == ["track"]
    if table not in search_index.TEXT_INDEXES:
        sys.stdout.write(json.dumps({"error": f"not a search index: {table!r}"}) + "\n")
        return 2
    final, stop = threading.Event(), threading.Event()

    def listen() -> None:
        line = sys.stdin.readline()  # EOF first: the caller failed or died
        (final if line.strip() == "final" else stop).set()

    threading.Thread(target=listen, daemon=True).start()
    try:
        top = build(Path(store), table, Path(scratch), final, stop, track)
    except (apsw.Error, OSError) as e:
        sys.stdout.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        return 1
    if stop.is_set():
        return 1
    usage = resource.getrusage(resource.RUSAGE_SELF)
    sys.stdout.write(json.dumps({"top": top, "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
                                 "rss_kb": usage.ru_maxrss}) + "\n")
    return 0


# -- the caller's side ------------------------------------------------------------

def _stale(conn: apsw.Connection, schema: str, table: str) -> int:
    """Rows the builder of ``table`` (scratch attached as ``schema``) indexed
    whose text has changed since, or that are gone."""
    conn.create_scalar_function("hermes_text_crc", text_crc,  # type: ignore[arg-type]
                                1, deterministic=True)
    (stale,) = one(conn.execute(
        f"SELECT count(*) FROM {schema}.indexed AS i LEFT JOIN {search_index.TEXT_VIEW} AS t"
        " ON t.id = i.id WHERE t.id IS NULL OR hermes_text_crc(t.text) != i.crc"))
    if stale:
        log.info("%d rows changed after the %s builder read them", stale, table)
    return int(stale)


def _child_env() -> dict[str, str]:
    """This environment, with the directory this package is imported from
    first on the path (a checkout run from elsewhere finds the same code)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class ParallelBuild:
    """Builder processes for ``tables`` of the store at ``store``, one each,
    and the copy of what they built. ``follow``: rows are still being
    written (call `finish` after the last commit); otherwise every row is
    in and the builders read them all and stop. ``track``: the builders
    keep what they indexed, so rows written below a builder's position, or
    changed or removed after it read them, can be found (`correct`). Raises
    OSError when a process cannot be started (nothing is left behind)."""

    def __init__(self, store: Path, tables: tuple[str, ...], *, follow: bool,
                 track: bool = False) -> None:
        self.store, self.tables, self.track = Path(store), tables, track
        self.dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=self.store.parent))  # 0700
        self.files = {t: self.dir / f"{t}.db" for t in tables}
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.reports: dict[str, dict[str, Any]] = {}
        self._schemas: dict[str, str] = {}  # table -> attached scratch (`attached`)
        try:
            for table, file in self.files.items():
                create_private_file(file)
                self.procs[table] = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(self.store), table, str(file)]
                    + (["track"] if track else []),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, env=_child_env())
            if not follow:
                self._send_final()
        except BaseException:
            self.close()
            raise

    def _send_final(self) -> None:
        for p in self.procs.values():
            if p.stdin is not None and not p.stdin.closed:
                p.stdin.write("final\n")
                p.stdin.flush()

    def finish(self, timeout: float) -> int | None:
        """Tell the builders the last row is in and wait (at most ``timeout``
        seconds in all); the highest row id they all indexed, or None (a
        builder failed, died or was too slow: logged, the caller indexes
        another way)."""
        try:
            self._send_final()
        except OSError as e:  # a builder that died closed its pipe
            log.info("an index builder is gone (%s)", e)
            return None
        tops = set()
        for table, p in self.procs.items():
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.info("the %s builder still ran after %.0f s", table, timeout)
                return None  # (`close` stops and reaps it)
            try:
                report = json.loads(out)
                tops.add(int(report["top"]))
            except (ValueError, KeyError, TypeError):
                log.info("the %s builder failed (exit %s): %s", table, p.returncode,
                         (out or err or "").strip()[-300:])
                return None
            self.reports[table] = report
        return tops.pop() if len(tops) == 1 else None

    def scratch_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files.values() if f.exists())

    def cpu_seconds(self) -> float:
        """The builders' CPU seconds, as they reported them (after `finish`)."""
        return round(sum(float(r.get("cpu_s", 0)) for r in self.reports.values()), 3)

    @contextmanager
    def attached(self, conn: apsw.Connection) -> Iterator[None]:
        """The scratch files attached to ``conn`` read-only (ATTACH cannot run
        inside a transaction: open the caller's inside this block)."""
        with ExitStack() as stack:
            self._schemas = {t: stack.enter_context(attach_readonly(conn, f, f"built_{t}"))
                             for t, f in self.files.items()}
            try:
                yield
            finally:
                self._schemas = {}

    def copy(self, conn: apsw.Connection) -> dict[str, int]:
        """Replace ``conn``'s shadow rows of every built index by the
        builders' (inside `attached`, in the caller's transaction); rows
        copied per shadow table."""
        if not self._schemas:
            raise RuntimeError("ParallelBuild.copy outside its attached() block")
        rows: dict[str, int] = {}
        for table, schema in self._schemas.items():
            rows.update(copy_index_tables(conn, schema, table, COPIED_SHADOWS))
        return rows

    def correct(self, conn: apsw.Connection, stale: int | None = None) -> bool:
        """After `copy`, in the same transaction: index the rows a tracking
        builder never saw (written below its position while it followed).
        False, changing nothing, when a row it indexed has since changed or
        gone: FTS5 needs a row's old text to take it out, so the caller must
        build that index another way. ``stale``: those rows, counted already
        by `stale_rows` on rows that have not changed since (else counted here)."""
        if not self.track or not self._schemas:
            raise RuntimeError("ParallelBuild.correct needs track=True, inside attached()")
        if stale is None:
            stale = sum(_stale(conn, schema, table) for table, schema in self._schemas.items())
        if stale:
            return False
        view = search_index.TEXT_VIEW
        for table, schema in self._schemas.items():
            conn.execute(f"INSERT INTO {table}(rowid, text) SELECT id, text FROM {view}"
                         f" WHERE id NOT IN (SELECT id FROM {schema}.indexed)")
        return True

    def stale_rows(self) -> int:
        """After `finish`: rows a tracking builder indexed that have since
        changed or gone, counted on a read-only connection of its own, so a
        caller whose rows are final can have it counted on another thread
        while it writes other tables (a checksum of every row's text: about
        0.6 s at 100k messages)."""
        if not self.track:
            raise RuntimeError("ParallelBuild.stale_rows needs track=True")
        conn = apsw.Connection(str(self.store), flags=apsw.SQLITE_OPEN_READONLY
                               | apsw.SQLITE_OPEN_URI)
        try:
            conn.set_busy_timeout(10_000)
            with ExitStack() as stack:
                schemas = {t: stack.enter_context(attach_readonly(conn, f, f"built_{t}"))
                           for t, f in self.files.items()}
                return sum(_stale(conn, schema, table) for table, schema in schemas.items())
        finally:
            conn.close()

    def close(self) -> None:
        """Stop builders still running (EOF on stdin stops them; killed past
        STOP_WAIT_S) and remove the scratch files."""
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    p.communicate(timeout=STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    p.kill()  # our own child, by its handle
                    p.communicate()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "ParallelBuild":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["COPIED_SHADOWS", "LOAD_SETTINGS", "PREFIX", "ParallelBuild", "cores"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
