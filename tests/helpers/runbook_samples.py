"""The runbook's sample runs, made by the current tool.

docs/state-db-recovery.md shows real runs in ``console`` blocks marked
``<!-- sample: NAME -->``. Each sample here builds the store it describes
(deterministic content, the same damage every time), runs the commands
through the real CLI, and prints what they print, with what differs from
run to run (paths, times, stamps, free space, pids) put in a fixed form.
tests/project/test_runbook_samples.py compares the document with them;
``python -m tests.helpers.runbook_samples`` rewrites the blocks.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from tests.helpers.damage import smash_middle_leaves
from tests.helpers.search_damage import junk_fts_blocks

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "state-db-recovery.md"
SHOWN_HOME = "/tmp/runbook/home"
WORDS = ("backup", "restore", "deploy", "timeout", "index", "vacuum", "lease", "spool")
_BLOCK = re.compile(r"(<!-- sample: (\w[\w-]*) -->\n```console\n)(.*?)(^```)", re.S | re.M)


def build_store(home: Path, sessions: int = 6, per_session: int = 50) -> Path:
    """The runbook's store: ``sessions`` sessions of ``per_session`` messages."""
    with SessionDB.open(home, background_index=False) as db:  # the same pages every run
        for s in range(sessions):
            sid = f"s{s}"
            db.create_session(sid, source="runbook", title=f"Session {s}")
            db.append_messages(sid, [
                {"role": "user" if i % 2 else "assistant",
                 "content": " ".join(WORDS[(i * k + s) % len(WORDS)] for k in range(1, 9))
                 + f" message {s}-{i}"} for i in range(per_session)])
            db.catch_up_index()
    return home / "state.db"


_VARYING: tuple[tuple[str, str], ...] = (
    (r"\d{8}T\d{6}-\d+-[0-9a-f]{16}", "<time>-<id>"),       # backup names
    (r"replaced-\d{8}T\d{6}-\d{6}", "replaced-<time>"),
    (r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", "<time>"),
    (r"\(pid \d+\)", "(pid <pid>)"),
    (r"in \d+\.\d+ ?s\b", "in <t> s"),
    (r"application_id -?\d+", "application_id <stamp>"),
    (r"\d+ MiB free", "<n> MiB free"),
    (r"(source_dir|work_dir) \d+(\.\d+)? \w+", r"\1 <n>"),
)


def normalise(text: str, home: Path) -> str:
    text = text.replace(str(home), SHOWN_HOME)
    for pattern, fixed in _VARYING:
        text = re.sub(pattern, fixed, text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def run(home: Path, *args: str) -> str:
    """``$ hermes ...`` and what it prints (stdout and stderr, as a terminal shows)."""
    res = CliRunner().invoke(cli, ["--home", str(home), *args])
    shown = shlex.join(["hermes", "--home", str(home), *args])
    return normalise(f"$ {shown}\n{res.output}", home)


def sample_repair(home: Path) -> str:
    db = build_store(home)
    junk_fts_blocks(db)
    return "\n".join([run(home, "sessions", "repair", "--check-only"),
                      run(home, "sessions", "repair")])


def damaged(home: Path) -> Path:
    """The two-stage run's store: two leaf pages of ``messages`` destroyed."""
    db = build_store(home)
    smash_middle_leaves(db, "messages", 2)
    return db


def sample_doctor(home: Path) -> str:
    damaged(home)
    return "\n".join([run(home, "doctor"), run(home, "sessions", "repair")])


def sample_inspect(home: Path) -> str:
    db = damaged(home)
    return run(home, "sessions", "recover", "--source", str(db), "--inspect-only")


def sample_recover(home: Path) -> str:
    db = damaged(home)
    return run(home, "sessions", "recover", "--source", str(db), "--output",
               str(home / "state.recovered.db"))


def sample_install(home: Path) -> str:
    db = damaged(home)
    CliRunner().invoke(cli, ["--home", str(home), "sessions", "recover", "--source", str(db),
                             "--output", str(home / "state.recovered.db")])
    partial = home / "state.recovered.db.partial"
    return "\n".join([run(home, "sessions", "install-recovered", str(partial)),
                      run(home, "doctor")])


SAMPLES: dict[str, Callable[[Path], str]] = {
    "repair": sample_repair, "doctor": sample_doctor, "inspect": sample_inspect,
    "recover": sample_recover, "install": sample_install}


def generate(name: str) -> str:
    """The sample ``name``, made now in a private temporary home."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "120"  # the width the samples are shown at
    work = Path(tempfile.mkdtemp(prefix="runbook-"))
    try:
        return SAMPLES[name](work / "home") + "\n"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def documented() -> dict[str, str]:
    """The samples as the runbook shows them, by name."""
    return {m.group(2): m.group(3) for m in _BLOCK.finditer(RUNBOOK.read_text())}


def rewrite() -> None:
    text = RUNBOOK.read_text()
    RUNBOOK.write_text(_BLOCK.sub(lambda m: m.group(1) + generate(m.group(2)) + m.group(4),
                                  text))


if __name__ == "__main__":
    os.environ.pop("HERMES_STORE_URL", None)
    rewrite()
    sys.exit(0)
