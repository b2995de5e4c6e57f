"""doctor's data model: a finding (id, severity, message, fix) and the target
a check looks at (home, profile, store path, how thorough)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sessiondb.recovery_api import Cause, StorageFailure, describe, hermes_command

from ..base import Severity

SEVERITIES = tuple(Severity)  # best to worst
# Causes no command ends: the first step is a person's (then doctor again).
PERSON_STEPS = {
    Cause.DISK_FULL: "free space on the disk holding {db}",
    Cause.READONLY: "make {db} and its folder writable (file mode, chattr -i, or mount the "
                    "disk read-write)",
    Cause.LOCKED: "stop the process that holds {db} (see holders and write_lock)",
}


@dataclass(frozen=True)
class Finding:
    """One check's outcome; ``fix`` is the command or action for the operator,
    ``fixable`` says whether `doctor --fix` applies it itself."""

    check: str
    severity: Severity
    message: str
    fix: str | None = None
    fixable: bool = False
    data: dict[str, Any] | None = None  # a check's figures (the size report)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.check, "check": self.check, "severity": self.severity,
               "message": self.message, "fix": self.fix, "fix_available": self.fixable}
        if self.data is not None:
            doc["data"] = self.data
        return doc


@dataclass
class Target:
    """What the checks look at: home, profile, store path, and the copy table's commands."""

    home: Path
    profile: str | None
    pdir: Path
    db: Path
    full: bool = False
    progress: Callable[[str], None] | None = None  # told each phase of --full

    def failure(self, cause: Cause) -> StorageFailure:
        return describe(cause, db_path=self.db, home=self.home, profile=self.profile)

    def fix_text(self, cause: Cause) -> str | None:
        """The copy table's commands, minus "doctor" itself (doctor is what is
        running): a cause only a person can end starts with that step."""
        me = self.command("doctor")
        steps = [a for a in self.failure(cause).actions if a != me]
        person = PERSON_STEPS.get(cause)
        if person:
            steps = [person.format(db=self.db)] + steps + [me]
        return "; then ".join(steps) or None

    def command(self, *args: str) -> str:
        return hermes_command(self.home, self.profile, *args)
