"""`hermes sessions search` and `hermes sessions reindex`."""
from __future__ import annotations

import click

from sessiondb import MessageState
from sessiondb.search import MARK_CLOSE, MARK_OPEN

from ..context import AppContext
from ..groups import HermesCommand
from ..output import emit_json, fmt_time, plural, table
from ..params import When
from ..terminal import highlight


@click.command("search", cls=HermesCommand)
@click.argument("query")
@click.option("--session", "session_id", help="Only messages of this session.")
@click.option("--role", help="Only messages with this role (user, assistant, tool, ...).")
@click.option("--source", help="Only sessions from this source (cli, agent, ...).")
@click.option("--since", type=When(), help="Only messages at or after DATE (2026-01-31, 7d).")
@click.option("--until", type=When(), help="Only messages before DATE.")
@click.option("--order", type=click.Choice(["rank", "newest", "oldest"]), default="rank",
              show_default=True, help="Best matches first, or by time.")
@click.option("--archived", is_flag=True, help="Also search archived (compacted) messages.")
@click.option("--archived-sessions", is_flag=True,
              help="Also search sessions archived by `sessions archive`.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def search_cmd(app: AppContext, query: str, session_id: str | None, role: str | None,
               source: str | None, since: float | None, until: float | None, order: str,
               archived: bool, archived_sessions: bool, limit: int, as_json: bool) -> None:
    """Search message text: words and "quoted phrases", word* for prefixes.

    Punctuation is searched as text, never as query syntax. Queries of one
    or two characters, and CJK text, match substrings. Matches are bold on a
    terminal; the msg column opens a hit in place with
    `sessions show SESSION --around MSG`. A query that starts with '-'
    goes after '--': `hermes sessions search -- -v`.

    \b
    Example:
      hermes sessions search '"connection refused" postgres' --limit 5
      hermes sessions search backup --source agent --since 7d --order newest
      hermes sessions show 20260101_120000_ab12cd34 --around 1234
    """
    if not query.strip():
        raise click.BadParameter("the query is empty; give a word or a \"quoted phrase\"",
                                 param_hint="'QUERY'")
    with app.open_store(create=False) as db:
        hits = db.search(query, session_id=session_id, role=role, source=source, since=since,
                         until=until, order=order, include_archived=archived, limit=limit,
                         archived_sessions=archived_sessions)
        stale = db.search_index_stale()
    if as_json:
        emit_json({"hits": [h.to_dict() for h in hits], "index_stale": stale is not None})
        return
    if stale is not None:
        # repair, not reindex: only repair also mends damaged index pages.
        click.echo("note: the search index is damaged; results come from a bounded scan of "
                   "recent messages. Run: " + app.command("sessions", "repair"), err=True)
    if not hits:
        click.echo("no matches")
        return
    table(((h.session_id, h.message_id, fmt_time(h.timestamp),
            h.role if h.state == MessageState.ACTIVE else f"{h.role} ({h.state})",
            highlight(" ".join(h.snippet.split()), MARK_OPEN, MARK_CLOSE)) for h in hits),
          ("session", "msg", "time", "role", "match"))
    first = hits[0]
    # The command gets a line of its own and is never wrapped: it is for pasting.
    click.echo(f"{plural(len(hits), 'hit')}; open one in place:\n  " + app.command(
        "sessions", "show", first.session_id, "--around", str(first.message_id),
        *(["--archived"] if first.state != MessageState.ACTIVE else [])))


@click.command("reindex", cls=HermesCommand)
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
