"""Identify a database file before anything opens it: ours, empty, or whose.

`identify(path)` reads the header, the schema table and (for ours) the
migrations ledger with rawfile.py, so the file and its sidecars stay
byte-identical: no SQLite connection, no ``-shm`` or ``-wal`` created, no
journal-mode switch, no chmod. The rules look at table names in
``sqlite_master`` and at each program's own version record:

- ``hermes-state`` (ours): a ``migrations`` ledger that holds
  ``m001_initial`` beside ``state_meta`` (m005 also stamps the header's
  application_id, which the Identity carries);
- ``hermes-agent``: Hermes Agent's ``schema_version``, ``sessions`` and
  ``messages``;
- ``llm``: llm's ``_llm_migrations`` ledger, or its ``responses`` and
  ``conversations`` tables; 0.36 and later add ``threads`` and ``turns``;
- ``openai-agents``: the Agents SDK SQLiteSession's ``agent_sessions`` and
  ``agent_messages``; ``langgraph``: SqliteSaver's ``checkpoints`` and
  ``writes``;
- ``empty``: no file, a 0-byte file, or an SQLite file with no schema and
  no application_id or user_version of another program;
- ``sqlite``: anything else that is SQLite.

The kind names are shared with recovery's registry of known formats.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..base import StoreCorrupt, StoreIOError, StoreReadOnly
from .rawfile import Pages, RawFileError, open_pages

OURS, EMPTY = "hermes-state", "empty"
HERMES_AGENT, LLM, AGENTS_SDK, LANGGRAPH, SQLITE = (
    "hermes-agent", "llm", "openai-agents", "langgraph", "sqlite")
KINDS = (OURS, EMPTY, HERMES_AGENT, LLM, AGENTS_SDK, LANGGRAPH, SQLITE)
#: Foreign kinds `sessions import --from KIND` reads.
IMPORTABLE = (HERMES_AGENT, LLM)

SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config", "_segments",
                    "_segdir", "_stat", "_node", "_parent", "_rowid")
_LISTED_TABLES = 8


@dataclass(frozen=True)
class Identity:
    """What a file is. ``applies`` names the commands that work on it
    (``inspect``, ``recover``, ``import``); ``version`` is the program's own."""

    path: str
    kind: str
    label: str
    version: str | None = None
    tables: tuple[str, ...] = ()
    application_id: int | None = None
    wal: bool = False

    @property
    def ours(self) -> bool:
        return self.kind == OURS

    @property
    def foreign(self) -> bool:
        return self.kind not in (OURS, EMPTY)

    @property
    def applies(self) -> tuple[str, ...]:
        if not self.foreign:
            return ()
        return ("inspect", "recover") + (("import",) if self.kind in IMPORTABLE else ())

    def commands(self, home: Path | None = None, profile: str | None = None) -> tuple[str, ...]:
        """The command lines that apply to this file (from the copy table)."""
        if not self.foreign:
            return ()
        from ..base import ForeignStore
        from ..base import foreign_actions
        err = ForeignStore("", path=self.path, kind=self.kind, label=self.label,
                           applies=self.applies)
        return foreign_actions(err, Path(self.path), home, profile)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "label": self.label,
                "version": self.version, "tables": list(self.tables),
                "application_id": self.application_id, "wal": self.wal,
                "applies": list(self.applies)}


@dataclass(frozen=True)
class _Entry:
    type: str
    name: str
    rootpage: int
    sql: str


def identify(path: str | os.PathLike[str]) -> Identity:
    """Identify ``path`` without changing it or its sidecars.

    Raises StoreCorrupt when it is not SQLite (no header) or its schema
    cannot be read; the message says which."""
    p = Path(path)
    wal = Path(f"{p}-wal")
    has_wal = wal.is_file() and wal.stat().st_size > 0
    if not p.exists():
        if has_wal:
            raise StoreCorrupt(f"{p} is missing but its -wal is there", path=str(p))
        return Identity(str(p), EMPTY, "no file")
    if not p.is_file():
        raise StoreCorrupt(f"{p} is not a regular file", path=str(p))
    if p.stat().st_size == 0 and not has_wal:
        return Identity(str(p), EMPTY, "an empty file")
    try:
        with open_pages(p) as pages:
            return _identify_pages(p, pages)
    except RawFileError as e:
        raise StoreCorrupt(f"file is not a database, or its schema is unreadable: {p}: {e}",
                           path=str(p)) from e
    except PermissionError as e:
        raise StoreReadOnly(f"cannot read {p}: {e.strerror}", path=str(p)) from e
    except OSError as e:
        raise StoreIOError(f"cannot read {p}: {e.strerror or e}", path=str(p)) from e


def _identify_pages(path: Path, pages: Pages) -> Identity:
    if pages.page_count == 0:  # a header with no pages: SQLite's empty database
        entries: list[_Entry] = []
    else:
        entries = [_Entry(str(v[0]), str(v[1]), v[3] if isinstance(v[3], int) else 0,
                          v[4] if isinstance(v[4], str) else "")
                   for _rowid, v in pages.table_rows(1) if len(v) >= 5]
    tables = {e.name: e for e in entries if e.type == "table"}
    listed = _user_tables(entries)
    h = pages.header
    base: dict[str, Any] = {"path": str(path), "tables": tuple(listed),
                            "application_id": h.signed_application_id, "wal": h.wal_mode}
    if not entries:
        if h.application_id == 0 and h.user_version == 0:
            return Identity(kind=EMPTY, label="an SQLite database with no tables", **base)
        return Identity(kind=SQLITE, label="an SQLite database with no tables", **base)
    for rule in _RULES:
        found = rule(pages, tables)
        if found is not None:
            kind, label, version = found
            return Identity(kind=kind, label=label, version=version, **base)
    return Identity(kind=SQLITE, label=_generic_label(listed), **base)


def _user_tables(entries: list[_Entry]) -> list[str]:
    vtabs = [e.name for e in entries
             if e.type == "table" and e.sql.upper().startswith("CREATE VIRTUAL TABLE")]
    out = []
    for e in entries:
        if e.type != "table" or e.name.startswith("sqlite_"):
            continue
        if any(e.name.startswith(v + "_") and e.name[len(v):] in SHADOW_SUFFIXES
               for v in vtabs):
            continue
        out.append(e.name)
    return out


def _generic_label(tables: list[str]) -> str:
    shown = ", ".join(tables[:_LISTED_TABLES])
    more = len(tables) - _LISTED_TABLES
    return f"an SQLite database with tables {shown}" + (f" and {more} more" if more > 0 else "")


def _column(pages: Pages, entry: _Entry, index: int) -> list[Any]:
    """Column ``index`` of every row of a small table (a ledger, a version row)."""
    if entry.rootpage <= 0:
        return []
    return [v[index] if len(v) > index else None for _r, v in pages.table_rows(entry.rootpage)]


Found = tuple[str, str, str | None]  # (kind, label, version)
Rule = Callable[[Pages, dict[str, _Entry]], Found | None]


def _ours(pages: Pages, tables: dict[str, _Entry]) -> Found | None:
    if "migrations" not in tables or "state_meta" not in tables:
        return None
    try:
        names = [n for n in _column(pages, tables["migrations"], 0) if isinstance(n, str)]
    except RawFileError:
        names = ["m001_initial"]  # a damaged ledger beside our tables: still ours
    if "m001_initial" not in names:
        return None
    return OURS, "a hermes-state store", names[-1]


def _hermes_agent(pages: Pages, tables: dict[str, _Entry]) -> Found | None:
    if not {"schema_version", "sessions", "messages"} <= set(tables):
        return None
    try:
        versions = [v for v in _column(pages, tables["schema_version"], 0) if isinstance(v, int)]
    except RawFileError:
        versions = []
    if not versions:
        return HERMES_AGENT, "Hermes Agent state.db", None
    version = max(versions)
    return HERMES_AGENT, f"Hermes Agent state.db, schema v{version}", str(version)


def _llm(pages: Pages, tables: dict[str, _Entry]) -> Found | None:
    ledger = "_llm_migrations" in tables
    new = {"threads", "turns"} <= set(tables)
    old = {"responses", "conversations"} <= set(tables)
    if not (ledger or new or old):
        return None
    version = None
    if ledger:
        try:
            names = [n for n in _column(pages, tables["_llm_migrations"], 0)
                     if isinstance(n, str)]
            version = names[-1] if names else None
        except RawFileError:
            pass
    layout = "threads/turns" if new else "responses/conversations"
    return LLM, f"llm logs.db ({layout})", version


def _agents_sdk(pages: Pages, tables: dict[str, _Entry]) -> Found | None:
    if {"agent_sessions", "agent_messages"} <= set(tables):
        return AGENTS_SDK, "OpenAI Agents SDK SQLiteSession", None
    return None


def _langgraph(pages: Pages, tables: dict[str, _Entry]) -> Found | None:
    if {"checkpoints", "writes"} <= set(tables):
        return LANGGRAPH, "LangGraph SqliteSaver", None
    return None


_RULES: tuple[Rule, ...] = (_ours, _hermes_agent, _llm, _agents_sdk, _langgraph)

__all__ = ["Identity", "identify", "KINDS", "IMPORTABLE", "OURS", "EMPTY"]


def check_before_open(path: Path, *, create: bool, home: Path | None = None,
                      profile: str | None = None) -> Identity:
    """Identify ``path`` and refuse what the store must not open.

    Ours: returned. Empty or absent: returned when ``create``, otherwise
    StoreNotFound ("no store at PATH"). Anything else: ForeignStore naming
    it and the commands that apply; nothing is created or changed."""
    from ..base import ForeignStore, StoreNotFound
    ident = identify(path)
    if ident.kind == EMPTY and not create:
        suffix = "" if ident.label == "no file" else f" ({ident.label})"
        raise StoreNotFound(f"no store at {path}{suffix}", path=str(path))
    if not ident.foreign:
        return ident
    err = ForeignStore("", path=str(path), kind=ident.kind, label=ident.label,
                       applies=ident.applies)
    actions = ident.commands(home, profile)
    err.args = (f"{path} is {ident.label}, not a hermes-state store, so hermes did not open "
                f"or change it; commands that apply: {'; '.join(reversed(actions))}",)
    raise err
