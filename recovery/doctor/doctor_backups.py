"""doctor's `backups` and `replication` checks: is there a copy of the store
to go back to, and is Litestream keeping one up to date?

`backups` reads the manifests in ``<home>/backups/`` (see
`repairs.online_backup`): the newest verified backup's age, a warning past
``HERMES_BACKUP_MAX_AGE_HOURS`` (default 24). `replication` recognises a
store replicated by Litestream from the directory Litestream keeps beside
it (``.<name>-litestream/``, its local LTX files): the newest transaction
it shipped and when, the WAL position it had read, and whether a
Litestream process holds the store now. Both only read.
"""
from __future__ import annotations

import os
import re
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessiondb.recovery_api import open_holders, own_entries, read_damage_record

from ..base import Severity
from ..repairs import backups, online_backup
from .model import Finding, Target

MAX_AGE_ENV = "HERMES_BACKUP_MAX_AGE_HOURS"
DEFAULT_MAX_AGE_H = 24.0
REPLICA_LAG_WARN_S = 60.0  # WAL written this long after the newest LTX file: not shipping
# The start of an LTX file header (github.com/superfly/ltx): magic, flags,
# page size, commit (pages), min and max TXID, timestamp (ms), pre-apply
# checksum, then the WAL offset, size and salts the file was read from.
_LTX_HEAD = struct.Struct(">4sIIIQQqQqqII")
_HEX16 = re.compile(r"[0-9a-f]{16}")  # a Litestream 0.3 generation id


def max_age_s() -> float:
    try:
        return float(os.environ.get(MAX_AGE_ENV, DEFAULT_MAX_AGE_H)) * 3600
    except ValueError:
        return DEFAULT_MAX_AGE_H * 3600


def _ago(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def check_backups(t: Target) -> list[Finding]:
    where = backups.backup_dir(t.pdir)
    found = online_backup.list_backup_infos(where, "state")
    newest = online_backup.newest_verified(where)
    create: str | None = t.command("backup", "create")
    record = read_damage_record(t.db)
    if record is not None and record.names(t.db):
        # A backup of a damaged file would not verify: offer no command that fails.
        create = None
    if newest is None:
        what = (f"{len(found)} backup(s), none verified" if found
                else "no backups yet")
        if create is None:
            what += " (none can be made of a store recorded as damaged)"
        return [Finding("backups", Severity.INFO, what, create)]
    age = time.time() - newest.created
    data = {"newest": newest.path, "age_s": round(age, 1), "count": len(found),
            "max_age_s": max_age_s()}
    text = (f"{len(found)} backup(s); newest verified {Path(newest.path).name}, "
            f"{_ago(age)} old, {newest.messages or 0} messages")
    if age > max_age_s():
        return [Finding("backups", Severity.WARN, f"{text}: older than "
                        f"{_ago(max_age_s())} ({MAX_AGE_ENV})", create, data=data)]
    return [Finding("backups", Severity.OK, text, data=data)]


@dataclass(frozen=True)
class ReplicaPosition:
    """What Litestream last shipped (or staged), read from its sidecar."""

    path: Path  # the newest file it wrote there
    where: str  # its position, as Litestream names it
    written: float  # that file's mtime
    wal_salt: tuple[int, int] | None
    wal_end: int  # WAL bytes read up to, in that WAL generation
    data: dict[str, Any]  # the layout and its own fields (txid, generation, ...)


def sidecar_dir(db: Path) -> Path:
    return db.parent / f".{db.name}-litestream"


def newest_ltx(sidecar: Path) -> ReplicaPosition | None:
    """Litestream 0.5's layout: ``ltx/0/<min>-<max>.ltx``, each file's header
    naming its TXIDs and the WAL range it was read from."""
    files = own_entries(sidecar / "ltx" / "0", "*.ltx")
    if not files:
        return None
    newest = files[-1]  # names are zero-padded hex TXID ranges: sorted by name is by TXID
    try:
        with open(newest, "rb") as f:
            head = f.read(_LTX_HEAD.size)
        fields = _LTX_HEAD.unpack(head)
    except (OSError, struct.error):
        return None
    if fields[0] != b"LTX1":
        return None
    return ReplicaPosition(newest, f"TXID {fields[5]}", newest.stat().st_mtime,
                           (fields[10], fields[11]), fields[8] + fields[9],
                           {"layout": "ltx", "txid": fields[5]})


def newest_shadow_wal(sidecar: Path) -> ReplicaPosition | None:
    """Litestream 0.3's layout: ``generation`` (the current generation's id)
    and ``generations/<id>/wal/<index>.wal``, shadow copies of the WAL from
    its start; the newest one's header carries the WAL's salts and its size
    is how far the WAL was read (Litestream's position ``<id>/<index>:<size>``)."""
    try:
        generation = (sidecar / "generation").read_text().strip()
    except OSError:
        return None
    if not _HEX16.fullmatch(generation):
        return None
    files = own_entries(sidecar / "generations" / generation / "wal", "*.wal")
    if not files:
        return None
    newest = files[-1]  # names are zero-padded hex indexes
    try:
        st = newest.stat()
        with open(newest, "rb") as f:
            head = f.read(32)
        index = int(newest.stem, 16)
    except (OSError, ValueError):
        return None
    salts = struct.unpack(">II", head[16:24]) if len(head) == 32 else None
    return ReplicaPosition(newest, f"generation {generation}, WAL {index:08x}:{st.st_size}",
                           st.st_mtime, salts, st.st_size,
                           {"layout": "generations", "generation": generation,
                            "wal_index": index})


def _wal_state(db: Path) -> tuple[tuple[int, int] | None, int, float | None]:
    """(salts, size, mtime) of the store's -wal; salts None when it is empty."""
    wal = Path(f"{db}-wal")
    try:
        st = wal.stat()
        with open(wal, "rb") as f:
            head = f.read(32)
    except OSError:
        return None, 0, None
    salts = struct.unpack(">II", head[16:24]) if len(head) == 32 else None
    return salts, st.st_size, st.st_mtime


def _is_litestream(command: str) -> bool:
    """The program is Litestream (not merely a process whose paths say so)."""
    return os.path.basename(command.split(" ", 1)[0]).startswith("litestream")


def check_replication(t: Target) -> list[Finding]:
    side = sidecar_dir(t.db)
    if not side.is_dir():
        return [Finding("replication", Severity.OK, "not replicated by Litestream (continuous "
                        "replication: docs/backups.md)")]
    pos = newest_ltx(side) or newest_shadow_wal(side)
    running = [h for h in open_holders([t.db]) if _is_litestream(h.command)]
    if pos is None:
        return [Finding("replication", Severity.WARN, f"{side.name}/ exists but holds no file "
                        "doctor can read: no LTX file (Litestream 0.5) and no shadow WAL of "
                        "a generation (0.3); Litestream has not shipped anything, or its "
                        "layout is one doctor does not know", _RUN)]
    salts, size, wal_mtime = _wal_state(t.db)
    lag = (wal_mtime - pos.written) if wal_mtime is not None else 0.0
    same_gen = salts == pos.wal_salt
    data = {**pos.data, "position": pos.where, "last_sync": pos.written,
            "wal_salt_matches": same_gen, "replicated_wal_bytes": pos.wal_end,
            "wal_bytes": size, "litestream_pids": [h.pid for h in running]}
    where = (f"WAL read to byte {pos.wal_end} of {size}" if same_gen
             else "WAL restarted since (its frames were checkpointed)")
    text = (f"Litestream: {pos.where}, last sync {_ago(time.time() - pos.written)} "
            f"ago; {where}")
    if not running:
        return [Finding("replication", Severity.WARN, f"{text}; no Litestream process holds "
                        "the store now: nothing replicates new writes", _RUN, data=data)]
    if lag > REPLICA_LAG_WARN_S:
        return [Finding("replication", Severity.WARN, f"{text}; the WAL changed "
                        f"{_ago(lag)} after the last sync", "litestream status; check its "
                        "log for replica errors", data=data)]
    return [Finding("replication", Severity.OK, f"{text}; replicating (pid "
                    f"{', '.join(str(h.pid) for h in running)})", data=data)]


_RUN = "start it: litestream replicate -config /etc/litestream.yml (docs/backups.md)"
