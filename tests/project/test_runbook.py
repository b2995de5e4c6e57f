"""Every `hermes ...` command in the operator runbook parses with the real CLI."""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from tests.helpers.cliparse import parse_hermes

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "state-db-recovery.md"


def _block_commands(text: str) -> list[str]:
    """Command lines inside fenced blocks (``$ `` prompts and indentation
    stripped, backslash continuations joined)."""
    out: list[str] = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        pending = ""
        for raw in block.splitlines():
            line = raw.strip()
            if pending:
                pending += " " + line.rstrip("\\").strip()
            elif line.removeprefix("$ ").startswith("hermes "):
                pending = line.removeprefix("$ ").rstrip("\\").strip()
            if pending and not line.endswith("\\"):
                out.append(pending)
                pending = ""
    return out


def runbook_commands() -> list[str]:
    text = RUNBOOK.read_text()
    inline = [c for c in re.findall(r"`([^`\n]+)`", text) if c.startswith("hermes ")]
    return sorted(set(inline + _block_commands(text)))


def test_the_runbook_shows_the_commands_an_operator_needs() -> None:
    commands = runbook_commands()
    for needed in ("doctor --fix", "sessions repair", "--inspect-only", "--output",
                   "sessions import-spool", "sessions reindex", "--lane carve"):
        assert any(needed in c for c in commands), needed
    assert len(commands) >= 25


@pytest.mark.parametrize("command", runbook_commands())
def test_every_runbook_command_parses(command: str) -> None:
    contexts = parse_hermes(command)
    assert contexts[-1].command.name != "hermes"


def test_the_extractor_catches_a_bad_command(tmp_path: Path) -> None:
    with pytest.raises(click.UsageError):
        parse_hermes("hermes sessions repair --no-such-option")
    assert _block_commands("```sh\nhermes a \\\n  --b c\n$ hermes d\n```\n") == \
        ["hermes a --b c", "hermes d"]
