"""`hermes chat`: talk to a model, every turn persisted in the store."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any, Iterator

import click

from ..context import AppContext
from ..groups import HermesCommand
from ..output import shorten


@contextlib.contextmanager
def model_client(offline: bool) -> Iterator[Any]:
    """The anthropic client: the real API, or the local scripted model."""
    import anthropic

    from hstate_agent.localmodel import LABEL, LocalModelServer, rule_based
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
        from sessiondb.base import append_lines
        append_lines(unsaved_to, (json.dumps(m, ensure_ascii=False, default=str) for m in clean))
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


@click.command(cls=HermesCommand)
@click.option("-q", "--query", "query", help="Run one turn with this text and exit.")
@click.option("--resume", "resume", metavar="ID", help="Continue an existing session.")
@click.option("--model", default=None, help="Model name (default: the agent's default).")
@click.option("--offline", is_flag=True,
              help="Use the local scripted model on 127.0.0.1 (no API key, not a real model).")
@click.option("--compact/--no-compact", default=None,
              help="Micro-compact old exchanges after a turn (default on; "
                   "HERMES_MICRO_COMPACT=off turns it off).")
@click.option("--no-review", is_flag=True,
              help="No background memory/skill review after turns (also HERMES_REVIEW=off "
                   "or [review] enabled = false in <home>/config.toml); /refine still works.")
@click.option("--no-memory-inject", is_flag=True,
              help="Leave saved memories and the skill list out of the system prompt "
                   "(also HERMES_MEMORY_INJECT=off or [memory] inject = false).")
@click.option("--unsaved-to", type=click.Path(dir_okay=False, path_type=Path),
              help="If neither the store nor its spool can take a message, append it "
                   "here (JSONL, 0600) instead of printing it.")
@click.pass_obj
def chat(app: AppContext, query: str | None, resume: str | None, model: str | None,
         offline: bool, compact: bool | None, no_review: bool,
         no_memory_inject: bool, unsaved_to: Path | None) -> None:
    """Chat with a model; every message is stored as it happens.

    Without -q, reads lines until EOF or a second Ctrl-C. Ctrl-C during a
    reply interrupts that turn (and a review in flight). After a completed
    turn a background review may save memories or skills; "/refine [focus]"
    runs one now. With -q the review runs before exit. Exits 1 when a -q
    turn fails. A line whose turn failed before the model saw it is not
    sent again with the next one.

    \b
    Example:
      hermes chat --offline -q "hello"
      hermes chat --no-compact --resume 20260101_120000_ab12cd34
      hermes chat --no-review --resume 20260101_120000_ab12cd34
    """
    from hstate_agent import (DEFAULT_MODEL, Agent, CompactionPolicy, MemoryConfig,
                              load_memory_config)
    from hstate_agent.review import load_review_config
    _check_unsaved_to(unsaved_to)
    if compact is None:
        compact = os.environ.get("HERMES_MICRO_COMPACT", "on").lower() not in ("off", "0", "no")
    review = load_review_config(app.home)
    if no_review:
        review = dataclasses.replace(review, enabled=False)
    with app.open_store() as db, model_client(offline) as client:
        if resume is not None:
            db.get_session(resume)  # SessionNotFound -> "Error: no session ..."
        agent = Agent(db, session_id=resume, client=client, model=model or DEFAULT_MODEL,
                      source="cli", micro_compact=CompactionPolicy() if compact else None,
                      review=review, on_review=show_review,
                      memory=MemoryConfig(inject=False) if no_memory_inject
                      else load_memory_config(app.home))
        click.echo(f"[session {agent.session_id}]", err=True)
        pending_notice(agent.home)
        if query is not None:
            result = run_one(agent, query, unsaved_to)
            agent.reviewer.wait(REVIEW_EXIT_WAIT_S)  # a one-shot keeps what its review saves
            if not result.completed:
                sys.exit(1)
            return
        _interactive(agent, unsaved_to)


REVIEW_EXIT_WAIT_S = 60.0


def pending_notice(base: Any) -> None:
    """Say when reviews left memory changes waiting for the user."""
    from hstate_agent import AgentError
    from hstate_agent.memory import MemoryStore
    from hstate_agent.memory import PendingChanges
    try:
        count = len(PendingChanges(MemoryStore(base)).list())
    except AgentError as e:
        click.echo(f"[memory: {shorten(str(e), 200)}]", err=True)
        return
    if count:
        click.echo(f"[{count} memory change(s) proposed by a review wait for you: "
                   "hermes memory pending]", err=True)


def show_review(text: str) -> None:
    """A review's summary lines, on stderr (they are not the model's answer)."""
    for line in text.splitlines():
        click.echo(shorten(line, 300), err=True)


def refine(agent: Any, focus: str) -> None:
    """/refine [focus]: one review now, in the foreground; Ctrl-C stops it."""
    previous = signal.signal(signal.SIGINT, lambda _s, _f: agent.interrupt())
    try:
        result = agent.refine(focus or None)
    finally:
        signal.signal(signal.SIGINT, previous)
    if not result.actions:
        click.echo(f"[review] nothing saved ({result.status})", err=True)


def _interactive(agent: Any, unsaved_to: Path | None) -> None:
    while True:
        try:
            text = input("> ")
        except EOFError:
            click.echo()
            agent.reviewer.wait(REVIEW_EXIT_WAIT_S)
            return
        except KeyboardInterrupt:
            click.echo()
            agent.interrupt()  # reaches a review in flight too
            return
        command, _, rest = text.strip().partition(" ")
        try:
            if command == "/refine":
                refine(agent, rest)
            elif text.strip():
                run_one(agent, text, unsaved_to)
        except KeyboardInterrupt:
            agent.interrupt()
            return
