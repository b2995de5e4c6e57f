"""`hermes sessions search` and `hermes sessions reindex`."""
from __future__ import annotations

import click

from .main import AppContext
from .output import emit_json, fmt_time, shorten, table, terminal_width
from .params import When
from .sessions_cmd import sessions


@sessions.command("search")
@click.argument("query")
@click.option("--session", "session_id", help="Only messages of this session.")
@click.option("--role", help="Only messages with this role (user, assistant, tool, ...).")
@click.option("--source", help="Only sessions from this source (cli, agent, ...).")
@click.option("--since", type=When(), help="Only messages at or after DATE (2026-01-31, 7d).")
@click.option("--until", type=When(), help="Only messages before DATE.")
@click.option("--order", type=click.Choice(["rank", "newest", "oldest"]), default="rank",
              show_default=True, help="Best matches first, or by time.")
@click.option("--archived", is_flag=True, help="Also search archived (compacted) messages.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def search_cmd(app: AppContext, query: str, session_id: str | None, role: str | None,
               source: str | None, since: float | None, until: float | None, order: str,
               archived: bool, limit: int, as_json: bool) -> None:
    """Search message text: words and "quoted phrases", word* for prefixes.

    Punctuation is searched as text, never as query syntax. Queries of one
    or two characters, and CJK text, match substrings.

    \b
    Example:
      hermes sessions search '"connection refused" postgres' --limit 5
      hermes sessions search backup --source agent --since 7d --order newest
    """
    with app.open_store(create=False) as db:
        hits = db.search(query, session_id=session_id, role=role, source=source, since=since,
                         until=until, order=order, include_archived=archived, limit=limit)
        stale = db.search_index_stale()
    if as_json:
        emit_json({"hits": [h.to_dict() for h in hits], "index_stale": stale is not None})
        return
    if stale is not None:
        click.echo("note: the search index is damaged; results come from a bounded scan of "
                   "recent messages. Run: hermes sessions reindex", err=True)
    if not hits:
        click.echo("no matches")
        return
    width = max(terminal_width() - 60, 20)
    table(((h.session_id, fmt_time(h.timestamp),
            h.role if h.state == "active" else f"{h.role} ({h.state})",
            shorten(h.snippet, width)) for h in hits), ("session", "time", "role", "match"))


@sessions.command("reindex")
@click.option("--force", is_flag=True,
              help="Rebuild even where other holders cannot be detected (no /proc/locks).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def reindex_cmd(app: AppContext, force: bool, as_json: bool) -> None:
    """Rebuild the search indexes from the stored messages.

    Refuses while another process has the store open.

    \b
    Example:
      hermes sessions reindex --json
    """
    with app.open_store(create=False) as db:
        # Opening a stale store with no other holder has just rebuilt it.
        stats = db.search_rebuilt_on_open or db.rebuild_search_index(force=force)
    if as_json:
        emit_json(stats)
        return
    click.echo(f"search index rebuilt: {stats['messages']} messages in {stats['seconds']:.1f}s")
