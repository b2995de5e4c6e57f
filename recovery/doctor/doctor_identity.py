"""Doctor's identification check: whose file is the store path?

Runs first among the store checks. On a file of ours it reports one ok
finding and the other checks run as before. On another program's file
(see `sessiondb.sqlitefile.identity`) doctor runs only checks that read nothing of the
file's contents and suggest nothing that changes it: no migrations, no
`repair`, no `reindex`, no chmod. The finding names the file's kind and the
commands that do apply (inspect, recover, import), from the copy table.
"""
from __future__ import annotations

from sessiondb.recovery_api import Cause, Identity, StorageError, identify

from ..base import Severity
from .model import Finding, Target


def identity_of(t: Target) -> Identity | None:
    """The store file's identity; None when it cannot be read (other checks say why)."""
    try:
        return identify(t.db)
    except StorageError:
        return None


def check_identity(t: Target) -> list[Finding]:
    try:
        ident = identify(t.db)
    except StorageError as e:
        return [Finding("identity", Severity.ERROR, str(e), t.fix_text(Cause.CORRUPT))]
    if ident.foreign:
        return [foreign_finding(t, ident)]
    version = f" ({ident.version})" if ident.version else ""
    return [Finding("identity", Severity.OK, f"{t.db} is {ident.label}{version}")]


def foreign_finding(t: Target, ident: Identity) -> Finding:
    actions = ident.commands(t.home, t.profile)
    if ident.kind in ("hermes-agent", "llm"):
        actions = actions[-1:] + actions[:-1]  # the import first: it is what a user wants
    # informational: whose file it is is no problem in itself (the checks that
    # follow say whether anything is wrong with it), so doctor's verdict on a
    # healthy file of another program is inspect's: healthy
    return Finding("identity", Severity.INFO,
                   f"{t.db} is {ident.label}, not a hermes-state store; hermes never "
                   f"changes it (no migrations, repair or reindex apply)",
                   "; or ".join(actions))
