"""`hermes demo`: a scripted tour that runs the real commands on a fresh home.

Each step prints the command a user would type and then runs exactly that
command through the CLI. The model is the local scripted one (offline).
The only step that is not a hermes command is the one that damages a
*copy* of the store on purpose, so recovery has something to do.
"""
from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Callable

import apsw
import click

from sessiondb import SessionDB
from sessiondb.base import one

HISTORY_SESSION = "demo-history"
TOPICS = ("SQLite write-ahead logging", "checkpoint starvation", "FTS5 tokenizers",
          "page cache sizing", "busy timeouts", "vacuum and freelists")


def seed_history(home: Path, messages: int = 600) -> None:
    """An older session with enough text that it spans many pages."""
    with SessionDB.open(home) as db:
        db.create_session(HISTORY_SESSION, source="demo", title="Notes on running SQLite")
        batch = [{"role": "user" if i % 2 == 0 else "assistant",
                  "content": f"Note {i}: about {TOPICS[i % len(TOPICS)]}, "
                             + "the details that matter in production. " * 3}
                 for i in range(messages)]
        db.append_messages(HISTORY_SESSION, batch)


def damage_copy(store: Path, target_dir: Path) -> tuple[Path, int]:
    """Copy the (closed, checkpointed) store and overwrite one `messages` leaf
    page of the copy with junk. Returns the copy and the page number."""
    target_dir.mkdir(mode=0o700, exist_ok=True)
    copy = target_dir / "state.db"
    shutil.copyfile(store, copy)
    copy.chmod(0o600)
    conn = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        page_size = one(conn.execute("PRAGMA page_size"))[0]
        leaves = [r[0] for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf' "
            "ORDER BY pageno")]
    finally:
        conn.close()
    page = leaves[len(leaves) // 2]
    with open(copy, "r+b") as f:
        f.seek((page - 1) * page_size + 8)  # keep the page type byte; smash cells
        f.write(b"\xa5" * (page_size - 8))
    return copy, page


def newest_chat_session(home: Path) -> str:
    """The session the demo's chat step just created."""
    with SessionDB.open(home) as db:
        return db.list_sessions(source="cli", limit=1)[0].id


class Tour:
    """Prints and runs the demo's steps through the real CLI."""

    def __init__(self, home: Path, invoke: Callable[[list[str]], int]) -> None:
        self.home, self.invoke = home, invoke
        self.step = 0

    def say(self, text: str) -> None:
        self.step += 1
        click.secho(f"\n== {self.step}. {text}", bold=True)

    def run(self, *args: str) -> int:
        argv = ["--home", str(self.home), *args]
        click.secho("$ " + shlex.join(["hermes", *argv]), fg="cyan")
        code = self.invoke(argv)
        if code:
            click.echo(f"(exit {code})")
        return code


def run_tour(home: Path, invoke: Callable[[list[str]], int]) -> None:
    """The whole scripted conversation, search, damage, recovery and doctor."""
    tour = Tour(home, invoke)
    seed_history(home)
    tour.say("Chat with the offline scripted model; every message is stored as it happens")
    tour.run("chat", "--offline", "-q", "I keep my notes about SQLite here; remember that.")
    tour.say("After the turn a background review looked back at it and saved a memory "
             "(the [review] line above); its tokens are billed to the session, apart "
             "from the turn's")
    tour.run("memory", "show")
    tour.run("sessions", "show", newest_chat_session(home), "--usage")
    tour.say("Ask the agent to search past sessions (it calls the session_search tool)")
    tour.run("chat", "--offline", "-q", "search checkpoint starvation")
    tour.say("Search the store yourself")
    tour.run("sessions", "search", "FTS5 tokenizers", "--limit", "3")
    tour.run("sessions", "list")
    store = home / "state.db"
    copy, page = damage_copy(store, home / "damaged")
    tour.say(f"Damage a COPY of the store on purpose (page {page} of {copy} overwritten)")
    tour.say("Inspect the damaged copy without touching it")
    tour.run("sessions", "recover", "--source", str(copy), "--inspect-only")
    tour.say("Recover every readable message into a new, verified file")
    tour.run("sessions", "recover", "--source", str(copy), "--output",
             str(home / "recovered.db"), "--allow-partial")
    tour.say("Check the healthy store")
    tour.run("doctor")
    click.echo(f"\nDone. Everything above lives in {home}; try: hermes --home {home} "
               "sessions show " + HISTORY_SESSION)
