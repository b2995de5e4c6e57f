"""The model's tools over memories and skills: memory, skill_manage,
skills_list, skill_view.

Each write carries the write origin (``assistant_tool`` for the live
agent, ``background_review`` / ``refine_review`` for a review fork) and
the session id. With ``stage_edits`` (an unattended review) a replace or
remove of memory is staged for the user instead of applied. A successful
write returns a ``done`` line ("Memory updated", "Skill 'x' patched") that
a review's summary collects.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import MemoryEditError, SkillError
from ..tools import Tool
from .memory import MemoryStore, Provenance, TARGETS
from .memory_pending import PendingChanges
from .skills import SkillStore

WRITE_TOOLS = ("memory", "skill_manage")
READ_TOOLS = ("skills_list", "skill_view")

MEMORY_SCHEMA = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "replace", "remove"]},
        "target": {"type": "string", "enum": list(TARGETS),
                   "description": "memory: your notes; user: what you know about the user."},
        "content": {"type": "string", "description": "The entry (add, replace)."},
        "old_text": {"type": "string",
                     "description": "A unique part of the entry to replace or remove."},
    },
    "required": ["action", "target"],
}
SKILL_SCHEMA = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["list", "view", "create", "patch"]},
        "name": {"type": "string", "description": "Skill name: a-z, 0-9, '-', '_'."},
        "content": {"type": "string",
                    "description": "create: the whole SKILL.md with frontmatter "
                                   "(---, name: NAME, description: ..., ---)."},
        "old_string": {"type": "string", "description": "patch: text occurring once."},
        "new_string": {"type": "string", "description": "patch: its replacement."},
    },
    "required": ["action"],
}
VIEW_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}},
               "required": ["name"]}
LIST_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
_LABEL = {"memory": "Memory", "user": "User profile"}


class HomeTools:
    """Memory and skill tools bound to one directory, origin and session."""

    def __init__(self, base: Path, origin: str, session_id: str, *,
                 stage_edits: bool = False) -> None:
        self.memories, self.skills = MemoryStore(base), SkillStore(base)
        self.pending = PendingChanges(self.memories)
        self.origin, self.session_id, self.stage_edits = origin, session_id, stage_edits

    def _prov(self) -> Provenance:
        return Provenance(self.origin, self.session_id)

    def memory(self, action: str, target: str, content: str | None = None,
               old_text: str | None = None) -> dict[str, Any]:
        label = _LABEL.get(target, target)
        if action == "add":
            entry = self.memories.add(target, content or "", self._prov())
            return {"ok": True, "entry": entry.id, "done": f"{label} updated",
                    "used": f"{self.memories.used(target)}/{self.memories.caps[target]} chars"}
        if action not in ("replace", "remove"):
            raise MemoryEditError(f"unknown memory action {action!r}: add, replace or remove")
        if self.stage_edits:
            change = self.pending.stage(action, target, old_text or "", content or "",
                                        self._prov())
            return {"ok": True, "staged": change.id,
                    "done": f"{label} {action} staged (hermes memory pending)"}
        if action == "replace":
            entry = self.memories.replace(target, old_text or "", content or "", self._prov())
        else:
            entry = self.memories.remove(target, old_text or "", self._prov())
        return {"ok": True, "entry": entry.id, "done": f"{label} updated"}

    def skill_manage(self, action: str, name: str | None = None, content: str | None = None,
                     old_string: str | None = None,
                     new_string: str | None = None) -> dict[str, Any] | str:
        if action == "list":
            return self.skills_list()
        if action == "view":
            return self.skill_view(name or "")
        if action == "create":
            info = self.skills.create(name or "", content or "", self._prov())
            return {"ok": True, "done": f"Skill '{info.name}' created"}
        if action == "patch":
            info = self.skills.patch(name or "", old_string or "", new_string or "",
                                     self._prov())
            return {"ok": True, "done": f"Skill '{info.name}' patched"}
        raise SkillError(f"unknown skill action {action!r}: list, view, create or patch")

    def skills_list(self) -> dict[str, Any]:
        return {"skills": [s.to_dict() for s in self.skills.list()]}

    def skill_view(self, name: str) -> str:
        return self.skills.view(name)

    def tools(self) -> list[Tool]:
        return [Tool("memory", "Save, replace or remove a durable note (memory) or a fact "
                     "about the user (user).", MEMORY_SCHEMA, self.memory),
                Tool("skill_manage", "List, view, create or patch skills (reusable "
                     "procedures).", SKILL_SCHEMA, self.skill_manage),
                Tool("skills_list", "List the skills in the library.", LIST_SCHEMA,
                     self.skills_list),
                Tool("skill_view", "Read one skill's SKILL.md.", VIEW_SCHEMA, self.skill_view)]
