"""`hermes sessions ...`: read and manage stored sessions."""
from __future__ import annotations

from typing import Any

import click

from sessiondb import MessageState
from sessiondb.maintenance import render_text

from ..context import AppContext
from ..groups import SectionedGroup
from ..output import (emit_json, fmt_time, human_bytes, paragraph, plural, shorten, table,
                      terminal_width)
from ..params import SessionId, When

SECTIONS = {
    "Read": ("list", "show", "search", "stats"),
    "Move": ("export", "import", "migrate"),
    "Change": ("rename", "delete", "pin", "unpin", "archive", "unarchive"),
    "Maintain": ("prune", "prune-checkpoints", "optimize", "reindex", "repair", "import-spool", "install-recovered"),
}


@click.group(cls=SectionedGroup, sections=SECTIONS)
def sessions() -> None:
    """Read, search, export and manage stored sessions.

    \b
    Example:
      hermes sessions list --limit 10
    """


# --archived / --all / neither -> the archived filter of list_sessions
_ARCHIVED: dict[str | None, bool | None] = {"archived": True, "all": None}


def _which(archived: bool, every: bool) -> str | None:
    """--archived and --all exclude each other (a usage error, exit 2)."""
    if archived and every:
        raise click.UsageError("--archived (only archived sessions) and --all (archived "
                               "sessions too) exclude each other")
    return "archived" if archived else "all" if every else None


@sessions.command("list")
@click.option("--source", help="Only sessions from this source (cli, agent, ...).")
@click.option("--since", type=When(), help="Only sessions started at or after DATE "
              "(2026-01-31, 2026-01-31T14:00, or an age: 30m, 12h, 7d, 2w).")
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True)
@click.option("--archived", is_flag=True, help="Only archived sessions.")
@click.option("--all", "every", is_flag=True, help="Archived sessions too.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def list_cmd(app: AppContext, source: str | None, since: float | None, limit: int,
             archived: bool, every: bool, as_json: bool) -> None:
    """List sessions, newest first (archived ones only with --archived or --all).

    JSON: {"count": N, "sessions": [<session>, ...]}.

    \b
    Example:
      hermes sessions list --source agent --since 7d --json
    """
    which = _which(archived, every)
    with app.open_store(create=False) as db:
        found = db.list_sessions(source=source, limit=limit, since=since,
                                 archived=_ARCHIVED.get(which, False))
    if as_json:
        emit_json({"count": len(found), "sessions": [s.to_dict() for s in found]})
        return
    width = max(terminal_width() - 70, 12)
    table(((s.id, fmt_time(s.started_at), s.source, s.message_count,
            shorten(s.title or "", width)) for s in found),
          ("id", "started", "source", "messages", "title"))


SHOW_LIMIT = 500


@sessions.command("show")
@click.argument("session_id", type=SessionId())
@click.option("--archived", is_flag=True, help="Also show archived and rewound messages.")
@click.option("--limit", type=click.IntRange(1, 100000), default=SHOW_LIMIT, show_default=True,
              help="Show at most this many messages (the newest, unless --after).")
@click.option("--before", type=click.IntRange(0), metavar="POS",
              help="Only messages before this position (the page before one shown).")
@click.option("--after", type=click.IntRange(0), metavar="POS",
              help="Only messages after this position, oldest first.")
@click.option("--around", "around", type=click.IntRange(1), metavar="MSG",
              help="Only message MSG (the msg column of search) and its neighbours.")
@click.option("--context", type=click.IntRange(0, 1000), default=3, show_default=True,
              help="With --around: how many messages before and after MSG.")
@click.option("--usage", "usage_only", is_flag=True,
              help="Show the session's model usage by task and model instead of messages.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def show_cmd(app: AppContext, session_id: str, archived: bool, limit: int,
             before: int | None, after: int | None, around: int | None, context: int,
             usage_only: bool, as_json: bool) -> None:
    """Show one session and its messages (tool calls folded to one line).

    A session longer than --limit is shown one page at a time (the newest
    page first) with the options for the next page; `sessions export`
    streams a session of any length.

    JSON: {"session": <session>, "messages": [<message without markers>],
    "rows": [{"id", "uid", "position", "timestamp", "state", "kind",
    "compaction_id"}], "page": {"total", "limit", "more_before",
    "more_after", "first_position", "last_position"}} with rows[i]
    describing messages[i]; "id" is the msg column of search ("page" is
    null with --around). With --usage: {"session": <session>,
    "usage": {"rows", "by_task", "total"}} (see docs/cli.md).

    \b
    Example:
      hermes sessions show 20260101_120000_ab12cd34 --archived
      hermes sessions show 20260101_120000_ab12cd34 --before 1200 --limit 100
      hermes sessions show 20260101_120000_ab12cd34 --around 1234 --context 2
      hermes sessions show 20260101_120000_ab12cd34 --usage
    """
    if usage_only:
        return show_usage(app, session_id, as_json)
    with app.open_store(create=False) as db:
        session = db.get_session(session_id)
        if around is None:
            page = db.message_window(session_id, limit=limit, before=before, after=after,
                                     include_archived=archived)
            stored = page.rows
        else:
            page = None
            stored = db.messages_around(session_id, around, context=context,
                                        include_archived=archived)
    if as_json:
        emit_json({"session": session.to_dict(), "messages": [m.message for m in stored],
                   "rows": [{"id": m.key[1], "uid": m.uid, "position": m.key[0],
                             "timestamp": m.timestamp, "state": m.state, "kind": m.kind,
                             "compaction_id": m.compaction_id} for m in stored],
                   "page": None if page is None else _page_doc(page, limit)})
        return
    title = shorten(session.title or "(untitled)", max(terminal_width() - 30, 20))
    paragraph(f"{session.id}  {title}  [{session.source}]"
              f"  {plural(session.message_count, 'message')}")
    rows, width = [], max(terminal_width() - 48, 20)
    for m in stored:
        role = (m.message["role"] if m.state == MessageState.ACTIVE
                else f"{m.message['role']} ({m.state})")
        msg = f">{m.key[1]}" if m.key[1] == around else m.key[1]
        rows.append((msg, role, fmt_time(m.timestamp), shorten(render_text(m.message), width)))
    table(rows, ("msg", "role", "time", "text"))
    if page is not None:
        _page_note(app, session_id, page)


def _page_doc(page: Any, limit: int) -> dict[str, Any]:
    return {"total": page.total, "limit": limit, "more_before": page.more_before,
            "more_after": page.more_after,
            "first_position": page.rows[0].key[0] if page.rows else None,
            "last_position": page.rows[-1].key[0] if page.rows else None}


def _page_note(app: AppContext, session_id: str, page: Any) -> None:
    if not (page.more_before or page.more_after):
        return
    first, last = page.rows[0].key[0], page.rows[-1].key[0]
    click.echo(f"Showing {len(page.rows)} of {page.total} messages (positions {first}-{last}).")
    if page.more_before:
        click.echo("Earlier: " + app.command("sessions", "show", session_id, "--before",
                                             str(first)))
    if page.more_after:
        click.echo("Later: " + app.command("sessions", "show", session_id, "--after", str(last)))
    click.echo("All of it, streamed: " + app.command("sessions", "export", session_id))


def usage_table(rows: list[dict]) -> None:
    """Usage rows (task, model, provider, counters) as a table."""
    table(((r["task"], r["model"] or "-", r["provider"] or "-", r["api_calls"],
            r["input_tokens"], r["output_tokens"], r["cache_read_tokens"],
            r["cache_write_tokens"], "-" if r["cost_usd"] is None else f"{r['cost_usd']:.4f}")
           for r in rows),
          ("task", "model", "provider", "calls", "input", "output", "cache read",
           "cache write", "cost $"))


def show_usage(app: AppContext, session_id: str, as_json: bool) -> None:
    """`sessions show --usage`: the session's usage ledger."""
    from sessiondb.rows import summary
    with app.open_store(create=False) as db:
        session = db.get_session(session_id)
        doc = summary(db.session_usage(session_id))
    if as_json:
        emit_json({"session": session.to_dict(), "usage": doc})
        return
    click.echo(f"{session.id}  {shorten(session.title or '(untitled)', 60)}  "
               f"[{session.source}]  usage by task and model")
    if not doc["rows"]:
        click.echo("No model usage recorded.")
        return
    usage_table(doc["rows"])
    total = doc["total"]
    click.echo(f"total: {total['api_calls']} calls, {total['input_tokens']} input and "
               f"{total['output_tokens']} output tokens")


@sessions.command("rename")
@click.argument("session_id", type=SessionId())
@click.argument("title")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def rename_cmd(app: AppContext, session_id: str, title: str, as_json: bool) -> None:
    """Set a session's title.

    JSON: {"id": ID, "title": TITLE}.

    \b
    Example:
      hermes sessions rename 20260101_120000_ab12cd34 "Trip planning"
    """
    title = title.strip()
    if not title:
        raise click.BadParameter("the title must not be empty", param_hint="TITLE")
    with app.open_store(create=False) as db:
        db.set_title(session_id, title)
    if as_json:
        emit_json({"id": session_id, "title": title})
    else:
        click.echo(f"Renamed {session_id} to {title!r}.")


@sessions.command("delete")
@click.argument("session_id", type=SessionId())
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def delete_cmd(app: AppContext, session_id: str, yes: bool, as_json: bool) -> None:
    """Delete a session and all its messages (asks first unless --yes).

    This cannot be undone; export the session first to keep a copy.
    JSON: {"deleted": ID, "messages": N}.

    \b
    Example:
      hermes sessions export 20260101_120000_ab12cd34 -o keep.jsonl
      hermes sessions delete 20260101_120000_ab12cd34 --yes
    """
    with app.open_store(create=False) as db:
        session = db.get_session(session_id)
        if not yes:
            question = (f"Delete session {session.id} ({session.title or 'untitled'}, "
                        f"{plural(session.message_count, 'message')})?")
            try:
                confirmed = click.confirm(question, default=False, err=True)
            except click.Abort:
                confirmed = False
            if not confirmed:
                raise click.ClickException("not confirmed; nothing was deleted")
        removed = db.delete_session(session_id)
    if as_json:
        emit_json({"deleted": session_id, "messages": removed})
    else:
        click.echo(f"Deleted session {session_id} and its {plural(removed, 'message')}.")


def _storage_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """A SQLite file's sizes and pages, or a PostgreSQL database's size."""
    if doc["files"] is None:
        server = doc["postgresql"]
        return [("database size", human_bytes(server["database_bytes"])),
                ("server", f"PostgreSQL {server['server_version']}")]
    pages = doc["pages"]
    return [("database file", human_bytes(doc["files"]["db"])),
            ("WAL file", human_bytes(doc["files"]["wal"])),
            ("pages", f"{pages['page_count']} x {pages['page_size']} B, "
                      f"{pages['freelist_count']} free")]


@sessions.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def stats_cmd(app: AppContext, as_json: bool) -> None:
    """Count sessions and messages and measure the store's files.

    The full-text index size comes from SQLite's dbstat table ("method").
    Keys are documented in docs/cli.md.

    \b
    Example:
      hermes --profile work sessions stats --json
    """
    with app.open_store(create=False) as db:
        doc = db.store_stats()
    if as_json:
        emit_json(doc)
        return
    fts = doc["fts"]
    fts_size = ("no index" if fts["method"] == "none" else
                f"{human_bytes(fts['bytes'])} ({fts['method']})")
    by_state = ", ".join(f"{k} {v}" for k, v in doc["messages_by_state"].items()) or "none"
    table([("store", doc["path"]), ("sessions", doc["sessions"]),
           ("messages", f"{doc['messages']} ({by_state})"), *_storage_rows(doc),
           ("full-text index", fts_size)], ("", ""))
    if doc["usage"]["rows"]:
        click.echo("\nModel usage by task and model:")
        usage_table(doc["usage"]["rows"])
