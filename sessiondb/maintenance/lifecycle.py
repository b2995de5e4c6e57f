"""Keeping a store small: pin, archive, and prune sessions.

Flags live in ``session_flags`` (m008): a pinned session is never pruned,
an archived one is hidden from listings (and from search unless asked)
but keeps every row. Prune deletes whole sessions through the store's own
delete path (`sessions.delete` inside the core's `write`, so the search
index follows the canonical rows however it is maintained: the change log
carries the deletes to the indexer) and never writes index tables itself.

Which operations run beside other processes (`ONLINE`):

- pin/unpin/archive/unarchive: yes. Each is one small transaction on the
  flags table that no other process reads while writing a transcript.
- prune: no. A live agent keeps its transcript in memory and appends to
  its session between leases; deleting that session under it would turn
  its next write into a failure (and a spool file). Refused while any
  other process holds the store.
- optimize (recovery/repairs/optimize_store.py): no. It promotes a rewritten file under
  the exclusive lock.

Prune deletes in batches of whole sessions, children before parents, one
transaction per batch: a crash leaves every session either whole or gone,
and no parent is ever gone while a child it had is still there.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, TYPE_CHECKING

import apsw

from ..base import Cause, InvalidInput, StorageError, one
from ..rows import sessions
from ..sqlitefile import holders

if TYPE_CHECKING:  # for type hints only
    from ..base import Core

ONLINE = {"pin": True, "unpin": True, "archive": True, "unarchive": True,
          "prune": False, "optimize": False}
WHY = {
    "flags": "one small transaction on the flags table; writers of transcripts never read it",
    "prune": "a running agent may still append to a session it holds in memory; deleting it "
             "under that process would fail its next write",
    "optimize": "the rewritten file is promoted under the exclusive lock",
}
BATCH_MESSAGES = 5000
# Row bytes beyond the payload columns (record header, rowid, index entries).
ROW_OVERHEAD = 48


class MaintenanceRefused(StorageError):
    """A maintenance operation will not run now; ``operation``, ``holders`` and ``why`` say why."""

    cause = Cause.HELD

    def __init__(self, message: str, *, operation: str, holders: list[int] | None = None,
                 why: str = "", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.operation = operation
        self.holders = holders or []
        self.why = why


def refuse_if_held(db_path: Path, operation: str, why: str) -> None:
    """Raise MaintenanceRefused unless the lock table shows no other process on the store."""
    pids = holders.other_holders(db_path)
    if pids is None:
        raise MaintenanceRefused(
            f"cannot tell whether another process has {db_path} open (no /proc/locks); "
            f"refusing to {operation}: {why}", operation=operation, why=why, path=str(db_path))
    if pids:
        raise MaintenanceRefused(
            f"{db_path} is held by process {', '.join(map(str, pids))}; {operation} is not "
            f"safe online ({why}); stop it and run the command again",
            operation=operation, holders=pids, why=why, path=str(db_path))


# -- flags ---------------------------------------------------------------------

def _set_flag(core: "Core", ids: list[str], column: str, value: Any) -> list[str]:
    """Set one flag column on existing sessions in one transaction; returns the ids."""
    if not ids:
        raise InvalidInput("name at least one session")
    with core.write() as conn:
        for sid in ids:
            sessions.require(conn, sid)
            conn.execute(f"INSERT INTO session_flags(session_id, {column}) VALUES (?, ?)"
                         f" ON CONFLICT(session_id) DO UPDATE SET {column} = excluded.{column}",
                         (sid, value))
    return ids


def pin(core: "Core", ids: list[str]) -> list[str]:
    """Pin sessions: prune never selects them (nor, so, their ancestors)."""
    return _set_flag(core, ids, "pinned", 1)


def unpin(core: "Core", ids: list[str]) -> list[str]:
    return _set_flag(core, ids, "pinned", 0)


def archive(core: "Core", ids: list[str]) -> list[str]:
    """Hide sessions from listings (and default search); every row stays."""
    return _set_flag(core, ids, "archived_at", core.now())


def unarchive(core: "Core", ids: list[str]) -> list[str]:
    return _set_flag(core, ids, "archived_at", None)


@dataclass(frozen=True)
class Flags:
    pinned: bool
    archived_at: float | None


def flags_of(core: "Core", session_id: str) -> Flags:
    with core.read() as conn:
        sessions.require(conn, session_id)
        row = conn.execute("SELECT pinned, archived_at FROM session_flags WHERE session_id = ?",
                           (session_id,)).fetchone()
    return Flags(bool(row[0]), row[1]) if row else Flags(False, None)


def any_archived(conn: apsw.Connection) -> bool:
    """Whether any session is archived (a partial-index probe)."""
    return conn.execute("SELECT 1 FROM session_flags WHERE archived_at IS NOT NULL"
                        " LIMIT 1").fetchone() is not None


# -- prune: choosing -------------------------------------------------------------

@dataclass(frozen=True)
class PruneFilter:
    """Which sessions prune selects; every given filter must match.

    ``older_than_s``: last activity (end, else last update) longer ago than
    this; ``ended``: only ended sessions; ``never_active``: only sessions
    without a single message; ``larger_than``: estimated bytes above this.
    """

    older_than_s: float | None = None
    source: str | None = None
    ended: bool = False
    never_active: bool = False
    larger_than: int | None = None
    with_children: bool = False

    def check(self) -> None:
        if not (self.older_than_s is not None or self.source or self.ended
                or self.never_active or self.larger_than is not None):
            raise InvalidInput("name at least one filter (--older-than, --source, --ended, "
                               "--never-active, --larger-than); prune never selects everything "
                               "by default")
        for name in ("older_than_s", "larger_than"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InvalidInput(f"{name} must not be negative")


@dataclass
class PruneItem:
    id: str
    messages: int
    bytes: int


@dataclass
class PrunePlan:
    """What prune selects (or selected): sessions, kept sessions with a reason,
    and the bytes their removal frees (an estimate, see ``bytes_method``)."""

    dry_run: bool
    sessions: list[PruneItem] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    messages: int = 0
    bytes_estimate: int = 0
    bytes_method: str = "share of used pages by payload bytes"
    exported_to: str | None = None
    deleted_sessions: int = 0
    deleted_messages: int = 0
    freelist_bytes_after: int | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["sessions"] = [asdict(s) for s in self.sessions]
        return doc


_PAYLOAD = ("coalesce(sum(octet_length(content) + coalesce(octet_length(tool_calls), 0)"
            f" + octet_length(meta) + octet_length(uid) + octet_length(fingerprint) + {ROW_OVERHEAD}), 0)")


def _candidates(conn: apsw.Connection, f: PruneFilter, now: float) -> list[tuple[str, int]]:
    where: list[str] = []
    args: list[Any] = []
    if f.older_than_s is not None:
        where.append("coalesce(s.ended_at, s.updated_at) < ?")
        args.append(now - f.older_than_s)
    if f.source:
        where.append("s.source = ?")
        args.append(f.source)
    if f.ended:
        where.append("s.ended_at IS NOT NULL")
    if f.never_active:
        where.append("NOT EXISTS (SELECT 1 FROM messages AS m WHERE m.session_id = s.id)")
    sql = ("SELECT s.id, coalesce(fl.pinned, 0) FROM sessions AS s"
           " LEFT JOIN session_flags AS fl ON fl.session_id = s.id"
           + (" WHERE " + " AND ".join(where) if where else ""))
    return [(r[0], r[1]) for r in conn.execute(sql, args)]


def _children(conn: apsw.Connection) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for child, parent in conn.execute("SELECT id, parent_session_id FROM sessions"
                                      " WHERE parent_session_id IS NOT NULL"):
        out.setdefault(parent, []).append(child)
    return out


def _blocked(conn: apsw.Connection, now: float) -> dict[str, str]:
    """Sessions prune must keep whatever the filters say: pinned, or leased now."""
    out = {r[0]: "pinned" for r in conn.execute(
        "SELECT session_id FROM session_flags WHERE pinned = 1")}
    for (sid,) in conn.execute("SELECT session_id FROM leases WHERE expires_at > ?", (now,)):
        out.setdefault(sid, "a turn lease is held on it")
    return out


def _descendants(start: set[str], children: dict[str, list[str]]) -> set[str]:
    found, todo = set(), list(start)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _lineage(selected: set[str], children: dict[str, list[str]], blocked: dict[str, str],
             with_children: bool, kept: dict[str, str]) -> set[str]:
    """Drop, until nothing changes, every selected session that would leave a
    child behind (a child outside the selection, blocked, or itself dropped)."""
    if with_children:
        selected = selected | _descendants(selected, children)
    for sid in list(selected):
        if sid in blocked:
            selected.discard(sid)
            kept[sid] = blocked[sid]
    changed = True
    while changed:
        changed = False
        for sid in sorted(selected):
            left = [c for c in children.get(sid, ()) if c not in selected]
            if left:
                selected.discard(sid)
                kept[sid] = (f"has child session {left[0]}" + (" (kept)" if with_children
                             else "; add --with-children to prune it too"))
                changed = True
    return selected


def _sizes(conn: apsw.Connection, ids: list[str]) -> dict[str, tuple[int, int]]:
    """id -> (messages, payload bytes); octet_length reads no overflow pages."""
    out = {}
    for sid in ids:
        n, payload = one(conn.execute(f"SELECT count(*), {_PAYLOAD} FROM messages"
                                  " WHERE session_id = ?", (sid,)))
        out[sid] = (n, payload)
    return out


def _scale(conn: apsw.Connection) -> float:
    """Used file bytes per payload byte: what removing one payload byte gives
    back once optimized (row overhead, indexes, both search indexes)."""
    (payload,) = one(conn.execute(f"SELECT {_PAYLOAD} FROM messages"))
    page_size = one(conn.execute("PRAGMA page_size"))[0]
    used = (one(conn.execute("PRAGMA page_count"))[0]
            - one(conn.execute("PRAGMA freelist_count"))[0]) * page_size
    return used / payload if payload else 1.0


def _depths(ids: set[str], conn: apsw.Connection) -> dict[str, int]:
    parents = dict(conn.execute("SELECT id, parent_session_id FROM sessions"
                                " WHERE parent_session_id IS NOT NULL"))
    out = {}
    for sid in ids:
        depth, cur, seen = 0, sid, {sid}
        while parents.get(cur) is not None and parents[cur] not in seen:
            cur = parents[cur]
            seen.add(cur)
            depth += 1
        out[sid] = depth
    return out


def plan_prune(core: "Core", f: PruneFilter, *, dry_run: bool = True) -> PrunePlan:
    """Choose what prune removes, read-only, in one read transaction."""
    f.check()
    now = core.now()
    plan = PrunePlan(dry_run)
    with core.snapshot() as conn:
        selected = {sid for sid, _ in _candidates(conn, f, now)}
        sizes = _sizes(conn, sorted(selected))
        scale = _scale(conn) if selected else 1.0
        if f.larger_than is not None:
            selected = {s for s in selected if sizes[s][1] * scale > f.larger_than}
        children = _children(conn)
        more = _descendants(selected, children) - set(sizes) if f.with_children else set()
        sizes.update(_sizes(conn, sorted(more)))
        selected = _lineage(selected, children, _blocked(conn, now), f.with_children,
                            plan.kept)
        depth = _depths(selected, conn)
    for sid in sorted(selected, key=lambda s: (-depth[s], s)):  # children first
        n, payload = sizes[sid]
        plan.sessions.append(PruneItem(sid, n, int(payload * scale)))
    plan.messages = sum(s.messages for s in plan.sessions)
    plan.bytes_estimate = sum(s.bytes for s in plan.sessions)
    return plan


# -- prune: doing ----------------------------------------------------------------

Progress = Callable[[int], None]


def _batches(items: list[PruneItem], limit: int) -> list[list[PruneItem]]:
    out: list[list[PruneItem]] = [[]]
    size = 0
    for item in items:
        if out[-1] and size + item.messages > limit:
            out.append([])
            size = 0
        out[-1].append(item)
        size += item.messages
    return [b for b in out if b]


def _delete_batch(conn: apsw.Connection, batch: list[PruneItem]) -> tuple[int, int]:
    gone = messages = 0
    for item in batch:
        if sessions.exists(conn, item.id):
            messages += sessions.delete(conn, item.id)
            gone += 1
    return gone, messages


def prune(core: "Core", f: PruneFilter, *, dry_run: bool = False,
          export_to: str | os.PathLike[str] | None = None,
          progress: Progress | None = None,
          batch_messages: int = BATCH_MESSAGES) -> PrunePlan:
    """Delete the sessions `plan_prune` selects (after exporting them to
    ``export_to`` as JSONL, if given); with ``dry_run`` only plan.

    Whole sessions go in transactions of about ``batch_messages`` messages;
    ``progress`` is told each batch's messages once it committed. Refused
    (MaintenanceRefused) while another process holds the store.
    """
    plan = plan_prune(core, f, dry_run=dry_run)
    if dry_run or not plan.sessions:
        return plan
    refuse_if_held(core.path, "prune", WHY["prune"])
    if export_to is not None:
        from .export import export_to_path  # export reads pages; no import cycle at load
        export_to_path(core, [s.id for s in plan.sessions], "jsonl", export_to)
        plan.exported_to = str(export_to)
    for batch in _batches(plan.sessions, batch_messages):
        with core.write() as conn:
            gone, messages = _delete_batch(conn, batch)
        plan.deleted_sessions += gone
        plan.deleted_messages += messages
        if progress is not None:
            progress(sum(i.messages for i in batch))
    with core.read() as conn:
        plan.freelist_bytes_after = (one(conn.execute("PRAGMA freelist_count"))[0]
                                     * one(conn.execute("PRAGMA page_size"))[0])
    return plan


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``2w``, ``90m`` or seconds, as seconds (InvalidInput otherwise)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    t = text.strip().lower()
    try:
        if t and t[-1] in units:
            value = float(t[:-1]) * units[t[-1]]
        else:
            value = float(t)
    except ValueError:
        raise InvalidInput(f"not an age: {text!r} (use e.g. 90d, 12h, 2w)") from None
    if value < 0 or value != value:
        raise InvalidInput(f"not an age: {text!r}")
    return value


def parse_size(text: str) -> int:
    """``500K``, ``10M``, ``2G`` or bytes, as bytes (InvalidInput otherwise)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise InvalidInput(f"not a size: {text!r} (use e.g. 500K, 10M, 2G)") from None
    if value < 0 or value != value:
        raise InvalidInput(f"not a size: {text!r}")
    return int(value)


__all__ = ["pin", "unpin", "archive", "unarchive", "prune", "plan_prune", "PruneFilter",
           "PrunePlan", "MaintenanceRefused", "ONLINE", "flags_of"]
