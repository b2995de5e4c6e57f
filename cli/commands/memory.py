"""`hermes memory ...` and `hermes skills ...`: what reviews and the agent saved."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from ..context import AppContext
from ..output import emit_json, shorten, table, terminal_width


def _base(app: AppContext) -> Path:
    from sessiondb.base import profile_dir
    return profile_dir(app.home, app.profile)


def _printable(line: str) -> str:
    """A line of a model-written file without control characters (a terminal
    must never receive escape sequences from it); tabs and indentation stay."""
    return "".join(c if c == "\t" or c.isprintable() else "\ufffd" for c in line)


def _call(fn: Callable[[], Any]) -> Any:
    """Run a library call; its typed errors become one `Error:` line (exit 1)."""
    from hstate_agent import AgentError
    try:
        return fn()
    except AgentError as e:
        raise click.ClickException(" ".join(str(e).split())) from e


@click.group()
def memory() -> None:
    """Show memories (MEMORY.md, USER.md) and apply or discard staged changes.

    \b
    Example:
      hermes memory show
      hermes memory pending
    """


@memory.command("show")
@click.option("--target", type=click.Choice(["memory", "user", "all"]), default="all",
              show_default=True, help="Which file: memory (notes), user (profile).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def show_cmd(app: AppContext, target: str, as_json: bool) -> None:
    """List memory entries with their provenance (origin, session, time).

    JSON: {"entries": [{"target", "id", "text", "origin", "session_id", "at"}],
    "used": {"memory": N, "user": N}, "caps": {...}}.

    \b
    Example:
      hermes memory show --target user --json
    """
    from hstate_agent.memory import TARGETS, MemoryStore
    store = MemoryStore(_base(app))
    targets = list(TARGETS) if target == "all" else [target]
    entries = _call(lambda: [dict(e.to_dict(), target=t) for t in targets
                             for e in store.entries(t)])
    if as_json:
        emit_json({"entries": entries, "caps": {t: store.caps[t] for t in targets},
                   "used": {t: sum(len(e["text"]) for e in entries if e["target"] == t)
                            for t in targets}})
        return
    if not entries:
        click.echo("No memories saved.")
        return
    width = max(terminal_width() - 60, 20)
    table(((e["target"], e["id"], e["origin"], e["at"], shorten(e["text"], width))
           for e in entries), ("target", "id", "origin", "at", "text"))


@memory.command("pending")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def pending_cmd(app: AppContext, as_json: bool) -> None:
    """Replaces and removes an unattended review proposed, waiting for you.

    JSON: {"count": N, "changes": [{"id", "action", "target", "old_text",
    "content", "origin", "session_id", "at"}]}.

    \b
    Example:
      hermes memory pending
      hermes memory apply --all
    """
    from hstate_agent.memory import MemoryStore
    from hstate_agent.memory import PendingChanges
    changes = _call(lambda: PendingChanges(MemoryStore(_base(app))).list())
    if as_json:
        emit_json({"count": len(changes), "changes": [c.to_dict() for c in changes]})
        return
    if not changes:
        click.echo("No pending memory changes.")
        return
    width = max((terminal_width() - 40) // 2, 16)
    table(((c.id, c.action, c.target, shorten(c.old_text, width), shorten(c.content, width))
           for c in changes), ("id", "action", "target", "old text", "new text"))
    click.echo("Apply with: hermes memory apply ID... (or --all); drop with: "
               "hermes memory discard ID...")


def _choose(ids: tuple[str, ...], every: bool) -> list[str] | None:
    if bool(ids) == every:
        raise click.UsageError("name the changes to take (IDs) or pass --all, not both")
    return None if every else list(ids)


@memory.command("apply")
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Apply every pending change.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def apply_cmd(app: AppContext, ids: tuple[str, ...], every: bool, as_json: bool) -> None:
    """Apply staged memory changes (they leave the pending file).

    A change whose entry is gone or no longer unique is reported, not applied.
    Exit 1 when any change could not be applied.
    JSON: {"results": [{"id", "action", "applied", "error"}]}.

    \b
    Example:
      hermes memory apply 3f2a1b0c
    """
    from hstate_agent.memory import MemoryStore
    from hstate_agent.memory import PendingChanges
    chosen = _choose(ids, every)
    results = _call(lambda: PendingChanges(MemoryStore(_base(app))).apply(chosen))
    if as_json:
        emit_json({"results": results})
    else:
        for r in results:
            click.echo(f"{r['id']} {r['action']}: " +
                       ("applied" if r["applied"] else f"not applied ({r['error']})"))
    if any(not r["applied"] for r in results):
        raise SystemExit(1)


@memory.command("discard")
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Discard every pending change.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def discard_cmd(app: AppContext, ids: tuple[str, ...], every: bool, as_json: bool) -> None:
    """Drop staged memory changes without applying them.

    JSON: {"discarded": [ID, ...]}.

    \b
    Example:
      hermes memory discard --all
    """
    from hstate_agent.memory import MemoryStore
    from hstate_agent.memory import PendingChanges
    chosen = _choose(ids, every)
    dropped = _call(lambda: PendingChanges(MemoryStore(_base(app))).discard(chosen))
    if as_json:
        emit_json({"discarded": [c.id for c in dropped]})
    else:
        click.echo(f"Discarded {len(dropped)} pending change(s).")


@click.group()
def skills() -> None:
    """List and read the skill library (<home>/skills/NAME/SKILL.md).

    \b
    Example:
      hermes skills list
    """


@skills.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def skills_list_cmd(app: AppContext, as_json: bool) -> None:
    """List skills with their descriptions.

    JSON: {"count": N, "skills": [{"name", "description"}]}.

    \b
    Example:
      hermes skills list --json
    """
    from hstate_agent.memory import SkillStore
    found = _call(lambda: SkillStore(_base(app)).list())
    if as_json:
        emit_json({"count": len(found), "skills": [s.to_dict() for s in found]})
        return
    if not found:
        click.echo("No skills saved.")
        return
    table(((s.name, shorten(s.description, max(terminal_width() - 30, 20))) for s in found),
          ("name", "description"))


@skills.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def skills_show_cmd(app: AppContext, name: str, as_json: bool) -> None:
    """Print one skill's SKILL.md and who wrote it.

    JSON: {"name", "text", "provenance": [{"action", "origin", "session_id", "at"}]}.

    \b
    Example:
      hermes skills show sqlite-wal-checks
    """
    from hstate_agent.memory import SkillStore
    store = SkillStore(_base(app))
    text = _call(lambda: store.view(name))
    prov = _call(lambda: store.provenance(name))
    if as_json:
        emit_json({"name": name, "text": text, "provenance": prov})
        return
    for line in text.splitlines():
        click.echo(_printable(line))
    for p in prov:
        click.echo(f"[{p['action']} by {p['origin']} in {p['session_id'] or '-'} at {p['at']}]",
                   err=True)
