"""Snapshot of a store bundle: private copies, fingerprints, holders, free space.

The user's files are only ever read with plain file I/O here; SQLite never
opens them. Every file of the bundle (`db`, `-wal`, `-shm`, `-journal`) is
fingerprinted before the first copy starts and again after the last one
ends, so a writer that touched any file during the whole window is caught.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from sessiondb.recovery_api import Holder, SIDECARS, open_holders

from ..base import InsufficientSpace, SourceChanging, SourceMissing

CHUNK = 1 << 20
DEFAULT_HEADROOM = 16 << 20  # room left on every filesystem after our writes


@dataclass(frozen=True)
class Fingerprint:
    """Identity and content of one file at one moment."""

    name: str
    size: int
    mtime_ns: int
    dev: int
    inode: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Snapshot:
    """Private copies of a bundle and what was seen while taking them."""

    source: Path
    directory: Path
    db_copy: Path
    before: dict[str, Fingerprint]
    after: dict[str, Fingerprint]
    holders: list[Holder] = field(default_factory=list)
    # the second fingerprint, when it is taken on a thread while the caller
    # goes on reading the copy (`take_snapshot(confirm_later=True)`)
    pending: threading.Thread | None = None
    failure: list[BaseException] = field(default_factory=list)

    def confirm(self) -> None:
        """Wait for a second fingerprint taken on a thread; SourceChanging
        (or its read error) if the source changed while it was copied."""
        if self.pending is not None:
            self.pending.join()
            self.pending = None
        if self.failure:
            raise self.failure[0]

    @property
    def bundle_bytes(self) -> int:
        return sum(f.size for f in self.before.values())

    def has(self, suffix: str) -> bool:
        return Path(f"{self.source}{suffix}").name in self.before

    def cleanup(self) -> None:
        if self.pending is not None:
            self.pending.join()
        shutil.rmtree(self.directory, ignore_errors=True)

    def to_dict(self) -> dict[str, Any]:
        return {"source": str(self.source), "work_dir": str(self.directory),
                "before": {k: v.to_dict() for k, v in self.before.items()},
                "after": {k: v.to_dict() for k, v in self.after.items()},
                "holders": [h.to_dict() for h in self.holders]}


def bundle_files(source: Path) -> list[Path]:
    """The database file and whichever sidecars exist, database first."""
    found = [source]
    found += [Path(f"{source}{s}") for s in SIDECARS if Path(f"{source}{s}").exists()]
    return found


Tick = Callable[[int], None]  # bytes read since the last call


def _hash_file(path: Path, copy_to: Path | None = None, tick: Tick | None = None) -> str:
    digest = hashlib.sha256()
    out = None
    if copy_to is not None:
        out = os.fdopen(os.open(copy_to, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                if out is not None:
                    out.write(chunk)
                if tick is not None:
                    tick(len(chunk))
        if out is not None:
            # no fsync: the copy is scratch in a private work dir, removed at
            # the end; syncing it only made every recover write the whole
            # store to disk once more (the lanes read it from the page cache)
            out.flush()
    finally:
        if out is not None:
            out.close()
    return digest.hexdigest()


def fingerprint(path: Path, sha256: str | None = None, tick: Tick | None = None) -> Fingerprint:
    """Stat and hash ``path`` (the hash may be supplied when just computed)."""
    st = os.stat(path)
    digest = sha256 if sha256 is not None else _hash_file(path, tick=tick)
    return Fingerprint(path.name, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, digest)


def check_space(needs: dict[Path, int], headroom: int = DEFAULT_HEADROOM) -> None:
    """Fail closed unless every filesystem has room for what we will write there.

    ``needs`` maps a directory to the bytes we will write under it;
    directories on the same filesystem are summed.
    """
    per_dev: dict[int, tuple[Path, int]] = {}
    for directory, size in needs.items():
        dev = os.stat(directory).st_dev
        where, total = per_dev.get(dev, (directory, 0))
        per_dev[dev] = (where, total + size)
    for where, total in per_dev.values():
        free = shutil.disk_usage(where).free
        if total + headroom > free:
            raise InsufficientSpace(
                f"not enough free space on the filesystem of {where}: need {total + headroom} "
                f"bytes (bundle, output and headroom), {free} free",
                needed=total + headroom, free=free, mount=str(where), path=str(where))


def private_work_dir(parent: Path | None) -> Path:
    """A fresh 0700 directory for the copies (mkdtemp creates it 0700)."""
    return Path(tempfile.mkdtemp(prefix="hermes-recover-", dir=parent))


def source_bytes(source: Path) -> int:
    return sum(os.stat(f).st_size for f in bundle_files(source))


def take_snapshot(source: Path, work_parent: Path | None = None, *,
                  extra_needs: dict[Path, int] | None = None,
                  headroom: int = DEFAULT_HEADROOM,
                  after_copy: Callable[[], None] | None = None,
                  progress: Callable[[str, int, int], None] | None = None,
                  confirm_later: bool = False) -> Snapshot:
    """Copy the bundle of ``source`` into a new private work directory.

    ``extra_needs`` adds bytes we will write elsewhere (the output) to the
    free-space check. ``after_copy`` runs between the copy and the second
    fingerprint (a seam for tests that change the source mid-copy).
    ``progress`` hears (what, bytes done, bytes total) while copying and
    checking (every byte is read twice: copied and hashed, then hashed again).
    Raises SourceChanging (after removing the copies) if any file changed.
    ``confirm_later`` takes the second fingerprint on a thread instead, while
    the caller reads the copy: the caller then calls `Snapshot.confirm`
    before it trusts or publishes anything made from the copy.
    """
    source = Path(source)
    if not source.is_file():
        raise SourceMissing(f"{source} does not exist or is not a regular file",
                            path=str(source))
    files = bundle_files(source)
    holders = open_holders(files)
    size = sum(os.stat(f).st_size for f in files)
    check_space({**(extra_needs or {}),
                 **{Path(work_parent or tempfile.gettempdir()): size}}, headroom)
    directory = private_work_dir(work_parent)
    try:
        return _copy_bundle(source, files, directory, holders, after_copy,
                            _ticker(progress, (1 if confirm_later else 2) * size),
                            confirm_later)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def _ticker(progress: Callable[[str, int, int], None] | None, total: int) -> Tick | None:
    if progress is None:
        return None
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        progress("snapshot (bytes)", min(done[0], total), total)
    return tick


def _copy_bundle(source: Path, files: list[Path], directory: Path, holders: list[Holder],
                 after_copy: Callable[[], None] | None, tick: Tick | None = None,
                 confirm_later: bool = False) -> Snapshot:
    stats = {f.name: os.stat(f) for f in files}
    before: dict[str, Fingerprint] = {}
    for f in files:
        digest = _hash_file(f, copy_to=directory / f.name, tick=tick)
        st = stats[f.name]
        before[f.name] = Fingerprint(f.name, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino,
                                     digest)
    if after_copy is not None:
        after_copy()
    snap = Snapshot(source, directory, directory / source.name, before, {}, holders)
    if not confirm_later:
        _second_look(snap, tick)
        snap.confirm()
        return snap
    # the second read of the source (hashing, about a third of a snapshot's
    # time) runs beside the caller's reads of the copy, on the other core
    snap.pending = threading.Thread(target=_second_look, args=(snap, None),
                                    name="hermes-snapshot-check", daemon=True)
    snap.pending.start()
    return snap


def _second_look(snap: Snapshot, tick: Tick | None) -> None:
    """The bundle fingerprinted again into ``snap.after``; a change (or a
    read error) goes into ``snap.failure`` for `Snapshot.confirm`."""
    try:
        snap.after = {f.name: fingerprint(f, tick=tick) for f in bundle_files(snap.source)}
        before, after = snap.before, snap.after
        changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
        if changed:
            now = open_holders(bundle_files(snap.source)) or snap.holders
            who = ", ".join(f"pid {h.pid} ({h.command})" for h in now) or "no process found open"
            raise SourceChanging(f"{snap.source} changed while it was copied "
                                 f"({', '.join(changed)}); a process may be writing it: {who}",
                                 changed=changed, holders=now, path=str(snap.source))
    except BaseException as e:  # raised in the caller's thread by confirm()
        snap.failure.append(e)
