"""Skills: ``<dir>/skills/<name>/SKILL.md``, each with a YAML-style frontmatter.

A skill file starts with ``---``, ``name: <name>`` (equal to its directory),
``description: <one line>`` and optional further ``key: value`` lines, then
``---`` and the body. Names are one safe path component. Writes are
crash-safe and locked (homefiles.py); each skill keeps its provenance (who
created or patched it, from which session, when) in ``.provenance.json``
beside SKILL.md, the newest ``PROVENANCE_KEEP`` records.
"""
from __future__ import annotations

import builtins
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SkillError
from . import homefiles
from .memory import Provenance

SKILL_FILE = "SKILL.md"
PROVENANCE_FILE = ".provenance.json"
PROVENANCE_KEEP = 50
MAX_SKILL_CHARS = 50_000
MAX_DESCRIPTION = 1024
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_KEY_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*):\s*(.*)$")


@dataclass(frozen=True)
class SkillInfo:
    name: str
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description}


def validate_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SkillError(f"invalid skill name {name!r}: 1-64 of a-z, 0-9, '-', '_', "
                         "starting with a letter or digit")
    return name


def frontmatter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the opening and closing ``---``."""
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise SkillError("a skill starts with a '---' frontmatter line")
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        raise SkillError("the skill's frontmatter has no closing '---' line") from None
    fields: dict[str, str] = {}
    for line in lines[1:end]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _KEY_RE.match(line)
        if m is None:
            raise SkillError(f"frontmatter line is not 'key: value': {line[:60]!r}")
        fields[m.group(1)] = m.group(2).strip().strip("'\"")
    return fields


def validate_skill(name: str, text: object) -> str:
    """The skill text, checked: size, frontmatter, name and description."""
    if not isinstance(text, str) or not text.strip():
        raise SkillError("skill content must be non-empty text")
    if len(text) > MAX_SKILL_CHARS:
        raise SkillError(f"a skill holds at most {MAX_SKILL_CHARS} characters, not {len(text)}")
    fields = frontmatter(text)
    if fields.get("name") != name:
        raise SkillError(f"the frontmatter must say 'name: {name}'")
    desc = fields.get("description", "")
    if not desc or len(desc) > MAX_DESCRIPTION:
        raise SkillError(f"the frontmatter needs a description of 1-{MAX_DESCRIPTION} "
                         "characters")
    return text if text.endswith("\n") else text + "\n"


class SkillStore:
    """The skill library of one home (or profile) directory."""

    def __init__(self, base: Path) -> None:
        self.dir = Path(base) / "skills"

    def path(self, name: str) -> Path:
        """The SKILL.md of ``name``; a skill directory that is a symlink is
        refused for reading and writing alike (O_NOFOLLOW guards only the
        file itself, so a linked directory would send a write elsewhere)."""
        folder = self.dir / validate_name(name)
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise SkillError(f"skills/{name} is not a directory hermes made; "
                             "it is neither read nor written")
        return folder / SKILL_FILE

    def list(self) -> list[SkillInfo]:
        out: list[SkillInfo] = []
        if not self.dir.is_dir():
            return out
        for sub in sorted(self.dir.iterdir()):
            # a symlinked skill directory or file was not written by us: skipped
            if (not _NAME_RE.match(sub.name) or sub.is_symlink() or not sub.is_dir()
                    or (sub / SKILL_FILE).is_symlink() or not (sub / SKILL_FILE).is_file()):
                continue
            try:
                desc = frontmatter(homefiles.read_text(sub / SKILL_FILE)).get("description", "")
            except SkillError:
                desc = "(unreadable frontmatter)"
            out.append(SkillInfo(sub.name, desc))
        return out

    def view(self, name: str) -> str:
        text = homefiles.read_text(self.path(name))
        if not text:
            raise SkillError(f"no skill named {name!r}")
        return text

    def provenance(self, name: str) -> builtins.list[dict[str, Any]]:
        raw = homefiles.read_text(self.path(name).parent / PROVENANCE_FILE)
        try:
            return list(json.loads(raw)) if raw.strip() else []
        except ValueError:
            return []

    def _write(self, name: str, text: str, action: str, prov: Provenance) -> None:
        path = self.path(name)
        homefiles.private_dir(path.parent)
        homefiles.clean_stale_temps(path)
        homefiles.write_text(path, text)
        records = [*self.provenance(name), {"action": action, "origin": prov.origin,
                                            "session_id": prov.session_id, "at": prov.at}]
        homefiles.write_text(path.parent / PROVENANCE_FILE,
                             json.dumps(records[-PROVENANCE_KEEP:], indent=1) + "\n")

    def create(self, name: str, content: str, prov: Provenance) -> SkillInfo:
        text = validate_skill(validate_name(name), content)
        with homefiles.locked(self.dir):
            if self.path(name).exists():
                raise SkillError(f"a skill named {name!r} exists; patch it instead")
            self._write(name, text, "create", prov)
        return SkillInfo(name, frontmatter(text)["description"])

    def patch(self, name: str, old_string: str, new_string: str, prov: Provenance) -> SkillInfo:
        """Replace the one occurrence of ``old_string``; the result is re-validated."""
        if not isinstance(old_string, str) or not old_string:
            raise SkillError("old_string must be non-empty text")
        if not isinstance(new_string, str):
            raise SkillError("new_string must be text")
        with homefiles.locked(self.dir):
            current = self.view(name)
            count = current.count(old_string)
            if count != 1:
                raise SkillError(f"old_string occurs {count} times in {name!r}; it must "
                                 "occur exactly once")
            text = validate_skill(name, current.replace(old_string, new_string, 1))
            self._write(name, text, "patch", prov)
        return SkillInfo(name, frontmatter(text)["description"])
