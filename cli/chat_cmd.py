"""`hermes chat`: talk to a model, every turn persisted in the store."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any, Iterator

import click

from .main import AppContext, cli


@contextlib.contextmanager
def model_client(offline: bool) -> Iterator[Any]:
    """The anthropic client: the real API, or the local scripted model."""
    import anthropic

    from agent.localmodel import LABEL, LocalModelServer, rule_based
    if offline:
        with LocalModelServer(rule_based) as server:
            click.echo(f"[offline: {LABEL} at {server.base_url}]", err=True)
            yield anthropic.Anthropic(base_url=server.base_url, api_key="offline",
                                      max_retries=0)
        return
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        raise click.ClickException("ANTHROPIC_API_KEY is not set; use --offline to try the "
                                   "local scripted model")
    yield anthropic.Anthropic()


def report_failure(result: Any, unsaved_to: Path | None = None) -> None:
    """The failed turn's reason and, for storage, the copy-table explanation;
    a withdrawn line is announced, and messages saved nowhere are handed to
    the user: written to ``unsaved_to`` when given, else printed."""
    click.echo(f"Error: turn failed: {result.failure_reason}", err=True)
    exp = result.explanation
    if exp is not None and hasattr(exp, "summary"):
        click.echo(exp.summary, err=True)
        for action in exp.actions:
            click.echo(f"  {action}", err=True)
    if result.withdrawn is not None:
        click.echo("[your line was not sent to the model; send it again when the store "
                   "is back]", err=True)
    if result.unsaved:
        _hand_back(result.unsaved, unsaved_to)


def _hand_back(messages: list[dict[str, Any]], unsaved_to: Path | None) -> None:
    from sessiondb import strip_markers
    clean = strip_markers(messages)
    if unsaved_to is not None:
        fd = os.open(unsaved_to, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                     0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(m, ensure_ascii=False, default=str) + "\n" for m in clean)
            f.flush()
            os.fsync(f.fileno())
        click.echo(f"[{len(clean)} unsaved message(s) written to {unsaved_to}]", err=True)
        return
    click.echo(f"[{len(clean)} message(s) saved nowhere; here they are:]", err=True)
    for m in clean:
        click.echo(f"  {m.get('role')}: {m.get('content')}", err=True)


def _check_unsaved_to(path: Path | None) -> None:
    """Refuse before any turn a target that is not a regular file we can append to."""
    if path is not None and os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise click.BadParameter(f"{path} is not a regular file", param_hint="--unsaved-to")


def run_one(agent: Any, text: str, unsaved_to: Path | None = None) -> Any:
    """One turn, streaming to stdout; Ctrl-C interrupts the turn."""
    presses = []

    def on_sigint(_sig: int, _frame: Any) -> None:
        presses.append(1)
        if len(presses) > 1:
            raise KeyboardInterrupt  # a second Ctrl-C leaves
        agent.interrupt()
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        result = agent.run_turn(text, on_text=lambda t: click.echo(t, nl=False))
    finally:
        signal.signal(signal.SIGINT, previous)
    click.echo()
    if result.interrupted:
        click.echo("[interrupted; what arrived so far is saved]", err=True)
    elif result.failed:
        report_failure(result, unsaved_to)
    return result


@cli.command()
@click.option("-q", "--query", "query", help="Run one turn with this text and exit.")
@click.option("--resume", "resume", metavar="ID", help="Continue an existing session.")
@click.option("--model", default=None, help="Model name (default: the agent's default).")
@click.option("--offline", is_flag=True,
              help="Use the local scripted model on 127.0.0.1 (no API key, not a real model).")
@click.option("--compact/--no-compact", default=None,
              help="Micro-compact old exchanges after a turn (default on; "
                   "HERMES_MICRO_COMPACT=off turns it off).")
@click.option("--unsaved-to", type=click.Path(dir_okay=False, path_type=Path),
              help="If neither the store nor its spool can take a message, append it "
                   "here (JSONL, 0600) instead of printing it.")
@click.pass_obj
def chat(app: AppContext, query: str | None, resume: str | None, model: str | None,
         offline: bool, compact: bool | None, unsaved_to: Path | None) -> None:
    """Chat with a model; every message is stored as it happens.

    Without -q, reads lines until EOF or a second Ctrl-C. Ctrl-C during a
    reply interrupts that turn. Exits 1 when a -q turn fails. A line whose
    turn failed before the model saw it is not sent again with the next one.

    \b
    Example:
      hermes chat --offline -q "hello"
      hermes chat --no-compact --resume 20260101_120000_ab12cd34
      hermes chat --resume 20260101_120000_ab12cd34
    """
    from agent import Agent, CompactionPolicy
    from agent.loop import DEFAULT_MODEL
    _check_unsaved_to(unsaved_to)
    if compact is None:
        compact = os.environ.get("HERMES_MICRO_COMPACT", "on").lower() not in ("off", "0", "no")
    with app.open_store() as db, model_client(offline) as client:
        if resume is not None:
            db.get_session(resume)  # SessionNotFound -> "Error: no session ..."
        agent = Agent(db, session_id=resume, client=client, model=model or DEFAULT_MODEL,
                      source="cli", micro_compact=CompactionPolicy() if compact else None)
        click.echo(f"[session {agent.session_id}]", err=True)
        if query is not None:
            if not run_one(agent, query, unsaved_to).completed:
                sys.exit(1)
            return
        _interactive(agent, unsaved_to)


def _interactive(agent: Any, unsaved_to: Path | None) -> None:
    while True:
        try:
            text = input("> ")
        except (EOFError, KeyboardInterrupt):
            click.echo()
            return
        if text.strip():
            try:
                run_one(agent, text, unsaved_to)
            except KeyboardInterrupt:
                return
