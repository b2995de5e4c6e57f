"""Full-disk figures on a real 2 MiB tmpfs: every batch after the disk fills is
either spooled or truthfully handed back; nothing acknowledged is lost.

    python -m tests.reliability.full_disk [--batches N] [--size 3000]

Needs root (or CAP_SYS_ADMIN) to mount the tmpfs. Two runs: with the spool
reserve (as a store opens it) and without it (the reserve file removed, as
when it could not be made). Per run: batches acknowledged before the disk
filled, failed batches, of those spooled and handed back (`unsaved`), then,
after the filler is removed and the spool imported, acknowledged messages
missing from the store, spooled messages missing or duplicated, and handed
back messages found in the store.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from sessiondb import SessionDB, StorageError, import_spool
from sessiondb.importers.spool_import import spool_dir_for
from sessiondb.spool.spool_reserve import reserve_path
from tests.helpers.tinyfs import fill, mount_tmpfs, unmount


def one_run(where: Path, *, reserve: bool, batches: int, size: int) -> dict[str, int]:
    home = where / ("with" if reserve else "without")
    acked: list[str] = []
    spooled: list[str] = []
    unsaved: list[str] = []
    failed = 0
    with SessionDB.open(home) as db:
        sid = db.create_session("s1", source="full-disk")
        if not reserve:
            reserve_path(spool_dir_for(db.path)).unlink()
        filler = fill(where, f"filler-{home.name}")
        for i in range(batches):
            text = f"{i}:" + "y" * size
            try:
                db.append_messages(sid, [{"role": "user", "content": text}])
                acked.append(text)
            except StorageError as e:
                failed += 1
                (spooled if e.spooled_to else unsaved).append(text)
                assert e.spooled_to or [m["content"] for m in e.unsaved] == [text]
        filler.unlink()
        import_spool(db)
        stored = [m["content"] for m in db.get_messages(sid)]
    return {"acknowledged": len(acked), "failed batches": failed, "spooled": len(spooled),
            "handed back": len(unsaved),
            "acknowledged lost": sum(t not in stored for t in acked),
            "spooled lost or doubled": sum(stored.count(t) != 1 for t in spooled),
            "handed back but stored": sum(t in stored for t in unsaved)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--size", type=int, default=3000)
    args = ap.parse_args()
    rows = []
    for reserve in (True, False):
        where = Path(tempfile.mkdtemp(prefix="hermes-fulldisk-")) / "fs"
        if not mount_tmpfs(where):
            raise SystemExit("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
        try:
            rows.append(("reserve" if reserve else "no reserve",
                         one_run(where, reserve=reserve, batches=args.batches,
                                 size=args.size)))
        finally:
            unmount(where)
    keys = list(rows[0][1])
    print("| run | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, r in rows:
        print(f"| {name} | " + " | ".join(str(r[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
