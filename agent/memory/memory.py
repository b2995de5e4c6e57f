"""Memories: ``<dir>/memories/MEMORY.md`` (notes) and ``USER.md`` (the user).

Each file is a list of entries, each headed by one comment line carrying
its provenance (id, write origin, session id, time), so a human can read
and edit the file and every entry says who wrote it. Each file has a size
cap over its entries' text. Every change is one locked read-modify-write
with a crash-safe replace (see homefiles.py).

A replace or remove proposed by an unattended review is not applied: it is
staged in ``pending.json`` next to the files, shown by ``hermes memory
pending`` and applied only by ``hermes memory apply``. Adds are applied.
"""
from __future__ import annotations

import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MemoryEditError, MemoryFull
from . import homefiles

ORIGINS = ("assistant_tool", "background_review", "refine_review", "user")
UNATTENDED = ("background_review",)
TARGETS = {"memory": "MEMORY.md", "user": "USER.md"}
CAPS = {"memory": 2200, "user": 1375}  # characters of entry text per file
PENDING_NAME = "pending.json"
PREAMBLE = "<!-- hermes memory file: one entry per header line; hermes memory shows it -->"
_HEADER_RE = re.compile(r"^<!-- entry ([0-9a-f]{8}) origin=(\S+) session=(\S*) at=(\S+) -->$")
_HEADER_START = "<!-- entry "


@dataclass(frozen=True)
class Provenance:
    """Who wrote an entry: write origin, session id, when (UTC ISO time)."""

    origin: str
    session_id: str = ""
    at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                          time.gmtime()))

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise MemoryEditError(f"unknown write origin {self.origin!r}")
        if any(c.isspace() for c in self.session_id):
            raise MemoryEditError("a session id has no spaces")


@dataclass(frozen=True)
class Entry:
    id: str
    text: str
    origin: str
    session_id: str
    at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse(text: str) -> list[Entry]:
    """Entries of a memory file; text before the first header (a hand edit)
    becomes one entry of origin ``user``."""
    entries: list[Entry] = []
    head: tuple[str, str, str, str] | None = ("", "user", "", "")
    body: list[str] = []

    def close() -> None:
        joined = "\n".join(body).strip()
        if head is not None and joined:
            entries.append(Entry(head[0] or secrets.token_hex(4), joined, *head[1:]))
    for line in text.splitlines():
        m = _HEADER_RE.match(line)
        if m:
            close()
            head, body = (m.group(1), m.group(2), m.group(3), m.group(4)), []
        elif line != PREAMBLE:
            body.append(line)
    close()
    return entries


def render(entries: list[Entry]) -> str:
    out = [PREAMBLE]
    for e in entries:
        out += [f"<!-- entry {e.id} origin={e.origin} session={e.session_id} at={e.at} -->",
                e.text, ""]
    return "\n".join(out).rstrip("\n") + "\n"


def clean_text(content: object, what: str = "content") -> str:
    if not isinstance(content, str) or not content.strip():
        raise MemoryEditError(f"{what} must be non-empty text")
    text = content.strip()
    if any(line.lstrip().startswith(_HEADER_START) for line in text.splitlines()) \
            or PREAMBLE in text:
        raise MemoryEditError(f"{what} must not contain an entry header line")
    return text


class MemoryStore:
    """The memory files of one home (or profile) directory."""

    def __init__(self, base: Path, caps: dict[str, int] | None = None) -> None:
        self.dir = Path(base) / "memories"
        self.caps = dict(CAPS, **(caps or {}))

    def path(self, target: str) -> Path:
        if target not in TARGETS:
            raise MemoryEditError(f"unknown memory target {target!r}: use memory or user")
        return self.dir / TARGETS[target]

    def entries(self, target: str) -> list[Entry]:
        return parse(homefiles.read_text(self.path(target)))

    def used(self, target: str) -> int:
        return sum(len(e.text) for e in self.entries(target))

    def _save(self, target: str, entries: list[Entry]) -> None:
        path = self.path(target)
        used = sum(len(e.text) for e in entries)
        if used > self.caps[target]:
            raise MemoryFull(f"{TARGETS[target]} would hold {used} of {self.caps[target]} "
                             "characters; replace or remove entries first", path=str(path),
                             used=used, cap=self.caps[target])
        homefiles.write_text(path, render(entries))

    def _locked_change(self, target: str, change: Any) -> Any:
        path = self.path(target)
        with homefiles.locked(self.dir):
            homefiles.clean_stale_temps(path)
            entries = parse(homefiles.read_text(path))
            result, changed = change(entries)
            if changed is not None:
                self._save(target, changed)
            return result

    def add(self, target: str, content: str, prov: Provenance) -> Entry:
        """Append an entry (an identical entry already there is not repeated)."""
        text = clean_text(content)

        def change(entries: list[Entry]) -> tuple[Entry, list[Entry] | None]:
            same = next((e for e in entries if e.text == text), None)
            if same is not None:
                return same, None
            entry = Entry(secrets.token_hex(4), text, prov.origin, prov.session_id, prov.at)
            return entry, [*entries, entry]
        return self._locked_change(target, change)

    @staticmethod
    def _match(entries: list[Entry], old_text: object) -> int:
        needle = clean_text(old_text, "old_text")
        hits = [i for i, e in enumerate(entries) if needle in e.text or e.id == needle]
        if not hits:
            raise MemoryEditError(f"no entry contains {needle[:60]!r}")
        if len(hits) > 1:
            raise MemoryEditError(f"{len(hits)} entries contain {needle[:60]!r}; quote more of one")
        return hits[0]

    def replace(self, target: str, old_text: str, content: str, prov: Provenance) -> Entry:
        """Replace the one entry containing ``old_text`` (or with that id)."""
        text = clean_text(content)

        def change(entries: list[Entry]) -> tuple[Entry, list[Entry]]:
            i = self._match(entries, old_text)
            entry = Entry(entries[i].id, text, prov.origin, prov.session_id, prov.at)
            return entry, [*entries[:i], entry, *entries[i + 1:]]
        return self._locked_change(target, change)

    def remove(self, target: str, old_text: str, prov: Provenance) -> Entry:
        """Remove the one entry containing ``old_text`` (or with that id)."""
        def change(entries: list[Entry]) -> tuple[Entry, list[Entry]]:
            i = self._match(entries, old_text)
            return entries[i], [*entries[:i], *entries[i + 1:]]
        return self._locked_change(target, change)
