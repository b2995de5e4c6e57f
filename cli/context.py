"""What every command needs (the home and profile), apart from the root group
so command modules import it without importing `main` (no import cycle)."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from sessiondb import SessionDB, StoreFace
from sessiondb.base import program_name


@dataclass
class AppContext:
    """What every command needs: where the store is. Resolved at call time."""

    home: Path
    profile: str | None
    #: ``--store-url`` / ``$HERMES_STORE_URL``: a PostgreSQL store instead of
    #: the home's SQLite file (the home still holds the spool).
    store_url: str | None = None

    def open_store(self, *, create: bool = True, background_index: bool = True,
                   read_only: bool = False) -> StoreFace:
        """The home's store. Reading commands pass ``create=False``: a missing
        store is then "no store at PATH" and nothing is created. ``read_only``
        (`hermes mcp serve`): nothing is written either, not even a schema
        upgrade or an index rebuild (`SessionDB` says how)."""
        if read_only:
            return SessionDB.open(self.home, self.profile, url=self.store_url, read_only=True)
        return SessionDB.open(self.home, self.profile, create=create, url=self.store_url,
                              background_index=background_index)

    def command(self, *args: str) -> str:
        """A hermes command line pinned to this home and profile, ready to paste."""
        words = [program_name(), "--home", str(self.home),
                 *(["--profile", self.profile] if self.profile else [])]
        if self.store_url:
            from sessiondb.pg import redact  # never a password on a terminal
            words += ["--store-url", redact(self.store_url)]
        return shlex.join([*words, *args])
