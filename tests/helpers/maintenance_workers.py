"""Run as a separate process: a maintenance operation that dies by SIGKILL midway.

    python -m tests.helpers.maintenance_workers prune HOME      (killed after one batch)
    python -m tests.helpers.maintenance_workers optimize HOME STEP   (killed after STEP,
        or with STEP promote-mid SECONDS that long into the promotion)
    python -m tests.helpers.maintenance_workers flags HOME      (toggles flags until killed)
"""
from __future__ import annotations

import os
import signal
import sys
import threading

from hstate_recovery.repairs.optimize_store import optimize
from sessiondb import SessionDB
from sessiondb.maintenance import lifecycle as maintenance


def die(*_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(what: str, home: str, *rest: str) -> None:
    if what == "optimize":
        def seam(step: str) -> None:
            if step == rest[0]:
                die()
            if rest[0] == "promote-mid" and step == "verify":
                threading.Timer(float(rest[1]), die).start()  # lands inside the promotion
        optimize(home, seam=seam)
        print("finished", flush=True)
        return
    db = SessionDB.open(home)
    if what == "prune":
        maintenance.prune(db.core, maintenance.PruneFilter(source="old"), progress=die,
                          batch_messages=50)
    elif what == "flags":
        ids = [s.id for s in db.list_sessions(archived=None, limit=1000)]
        print("ready", flush=True)
        while True:
            for op in (maintenance.archive, maintenance.pin, maintenance.unarchive,
                       maintenance.unpin):
                op(db, ids)
    print("finished", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
