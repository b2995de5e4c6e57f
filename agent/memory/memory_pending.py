"""Staged memory changes: replaces and removes an unattended review proposed.

They wait in ``<dir>/memories/pending.json`` (written crash-safely under
the memories lock) until the user applies or discards them; nothing an
unattended run proposes can take away what the user or the assistant
wrote without the user saying so.
"""
from __future__ import annotations

import builtins
import json
import secrets
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import MemoryEditError
from . import homefiles
from .memory import MemoryStore, PENDING_NAME, Provenance, clean_text

ACTIONS = ("replace", "remove")


@dataclass(frozen=True)
class PendingChange:
    id: str
    action: str
    target: str
    old_text: str
    content: str
    origin: str
    session_id: str
    at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PendingChanges:
    """The staged changes of one MemoryStore."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.path = store.dir / PENDING_NAME

    def _read(self) -> list[PendingChange]:
        text = homefiles.read_text(self.path)
        if not text.strip():
            return []
        try:
            return [PendingChange(**c) for c in json.loads(text)["changes"]]
        except (ValueError, KeyError, TypeError) as e:
            raise MemoryEditError(f"{self.path} is not a pending-changes file ({e})",
                                  path=str(self.path)) from e

    def _write(self, changes: list[PendingChange]) -> None:
        doc = {"version": 1, "changes": [c.to_dict() for c in changes]}
        homefiles.write_text(self.path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")

    def list(self) -> list[PendingChange]:
        return self._read()

    def stage(self, action: str, target: str, old_text: str, content: str,
              prov: Provenance) -> PendingChange:
        """Keep a change for the user to apply; checked now so a bad one fails early."""
        if action not in ACTIONS:
            raise MemoryEditError(f"only {' and '.join(ACTIONS)} are staged, not {action!r}")
        self.store.path(target)
        clean_text(old_text, "old_text")
        if action == "replace":
            clean_text(content)
        change = PendingChange(secrets.token_hex(4), action, target, old_text,
                               content if action == "replace" else "", prov.origin,
                               prov.session_id, prov.at)
        with homefiles.locked(self.store.dir):
            self._write([*self._read(), change])
        return change

    def _take(self, ids: builtins.list[str] | None) -> builtins.list[PendingChange]:
        """Remove the chosen changes (all when ``ids`` is None) and return them."""
        with homefiles.locked(self.store.dir):
            changes = self._read()
            unknown: set[str] = set(ids or ()) - {c.id for c in changes}
            if unknown:
                raise MemoryEditError(f"no pending change {sorted(unknown)[0]!r}")
            chosen = [c for c in changes if ids is None or c.id in ids]
            if chosen:
                self._write([c for c in changes if c not in chosen])
            return chosen

    def discard(self, ids: builtins.list[str] | None = None) -> builtins.list[PendingChange]:
        return self._take(ids)

    def apply(self, ids: builtins.list[str] | None = None) -> builtins.list[dict[str, Any]]:
        """Apply chosen changes; one that no longer applies is reported, not raised."""
        results = []
        for c in self._take(ids):
            prov = Provenance(c.origin, c.session_id)
            try:
                if c.action == "replace":
                    self.store.replace(c.target, c.old_text, c.content, prov)
                else:
                    self.store.remove(c.target, c.old_text, prov)
                results.append({"id": c.id, "action": c.action, "applied": True, "error": None})
            except MemoryEditError as e:
                results.append({"id": c.id, "action": c.action, "applied": False,
                                "error": str(e)})
        return results
