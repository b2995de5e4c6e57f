"""``python -m sessiondb.importers.prescan_worker DIR``: the transcript worker
of log_prescan.py (a module of its own, so that running it does not run a
module the package has already imported)."""
from __future__ import annotations

import sys

from .log_prescan import serve

if __name__ == "__main__":
    serve(sys.argv[1], sys.stdin, sys.stdout)
