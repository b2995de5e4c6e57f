"""The persisted quarantine: structural damage one process found, kept beside
the store so that every later process refuses to write to it too.

A handle that meets structural corruption quarantines itself and tells the
rest of its process (containment.py); that is forgotten when the process
ends. So the finding is also written to ``<store>.quarantined`` (JSON,
0600, written to a temp name, fsynced and renamed, the directory fsynced)
by the handle and by `doctor`, and every handle checks it when it opens:
with a record that names the file it opens (same device and inode), the
handle opens quarantined (reads work, every write is refused) until the
record is cleared by `install-recovered` (a new file), a successful
`repair`, or a full check (`doctor --full`) that finds the file clean.

A record that cannot be parsed still counts: a file damaged enough to
need one is not trusted because its record is damaged too.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..base import OutputError, fsync_dir, private_output

log = logging.getLogger(__name__)

SUFFIX = ".quarantined"


@dataclass(frozen=True)
class DamageRecord:
    """Why a store is refused for writing: what was found, by what, when."""

    reason: str
    found_by: str  # "a store handle", "doctor"
    pid: int
    since: float
    device: int | None = None  # the file the finding was about
    inode: int | None = None

    def names(self, path: Path) -> bool:
        """Whether the record is about the file now at ``path`` (a file
        put there since, under another inode, is not the damaged one)."""
        if self.device is None or self.inode is None:
            return True
        try:
            st = os.stat(path)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) == (self.device, self.inode)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"{self.found_by} found it structurally damaged at {when}: {self.reason}"


def record_path(db: Path) -> Path:
    """Where the record of ``db`` lives."""
    return db.with_name(db.name + SUFFIX)


def read_record(db: Path) -> DamageRecord | None:
    """The record beside ``db`` (None: there is none)."""
    try:
        text = record_path(db).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        return DamageRecord(f"its quarantine record cannot be read ({e})", "unknown", 0, 0.0)
    try:
        doc = json.loads(text)
        return DamageRecord(str(doc["reason"]), str(doc["found_by"]), int(doc["pid"]),
                            float(doc["since"]), doc.get("device"), doc.get("inode"))
    except (ValueError, KeyError, TypeError):
        return DamageRecord("its quarantine record is unreadable", "unknown", 0, 0.0)


def record_damage(db: Path, reason: str, found_by: str) -> DamageRecord | None:
    """Write the record for ``db`` unless one is there (the first finding is
    kept); returns the record in force, None if it could not be written."""
    existing = read_record(db)
    if existing is not None:
        return existing
    device: int | None = None
    inode: int | None = None
    try:
        st = os.stat(db)
        device, inode = st.st_dev, st.st_ino
    except OSError:
        pass
    rec = DamageRecord(reason[:2000], found_by, os.getpid(), time.time(), device, inode)
    try:  # 0600, temp name, fsync, link (never replacing one), directory fsynced
        with private_output(record_path(db)) as f:
            json.dump(asdict(rec), f, sort_keys=True)
    except OutputError as e:
        found = read_record(db)  # another process recorded it first
        if found is None:  # a read-only or full disk: the handle's own refusal still holds
            log.warning("could not record the damage of %s beside it: %s", db, e)
        return found
    return rec


def clear_damage(db: Path) -> bool:
    """Remove the record (the file was replaced, repaired or checked clean);
    returns whether there was one."""
    try:
        record_path(db).unlink()
    except FileNotFoundError:
        return False
    fsync_dir(db.parent)
    return True


__all__ = ["DamageRecord", "SUFFIX", "clear_damage", "read_record", "record_damage",
           "record_path"]
