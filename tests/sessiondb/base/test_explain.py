"""The copy table: codes, summaries and commands; the CLI and doctor use it."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import Cause
from sessiondb.base.explain import all_causes, describe
from tests.helpers.cliparse import parse_hermes

PLACES = [
    # (home, profile, db path): plain, a profile, and paths that need quoting.
    (Path("/srv/hermes"), None, Path("/srv/hermes/state.db")),
    (Path("/srv/hermes"), "work", Path("/srv/hermes/profiles/work/state.db")),
    (Path("/tmp/my home"), "a.b-c", Path("/tmp/my home/profiles/a.b-c/state.db")),
]


def every_failure():
    for home, profile, db in PLACES:
        for cause in all_causes():
            yield describe(cause, db_path=db, home=home, profile=profile), home, profile, db


def test_every_cause_has_an_entry_and_a_stable_code() -> None:
    assert set(all_causes()) == set(Cause)
    codes = {describe(c, db_path="/x/state.db").code for c in Cause}
    assert codes == {f"storage_{c.value}" for c in Cause}
    for failure, *_ in every_failure():
        assert failure.summary.endswith(".") and "\n" not in failure.summary


def test_every_emitted_command_parses() -> None:
    """Runs each command through the real click parser: a command the copy
    table names that the CLI lacks (or spells differently) fails here."""
    problems = []
    for failure, *_ in every_failure():
        for action in failure.actions:
            try:
                parse_hermes(action)
            except click.UsageError as e:
                problems.append(f"{failure.cause.value}: {action}: {e}")
    assert problems == []


def test_commands_are_pinned_to_home_profile_and_path() -> None:
    for failure, home, profile, db in every_failure():
        for action in failure.actions:
            words = shlex.split(action)
            assert words[:3] == ["hermes", "--home", str(home)]
            if profile:
                assert words[3:5] == ["--profile", profile]
            else:
                assert "--profile" not in words
            if "--source" in words:
                assert words[words.index("--source") + 1] == str(db)
            if "--output" in words:
                out = Path(words[words.index("--output") + 1])
                assert out.parent == db.parent and out != db


def test_guidance_never_suggests_dangerous_steps() -> None:
    for failure, *_ in every_failure():
        text = " ".join((failure.summary,) + failure.actions).lower()
        for action in failure.actions:
            assert shlex.split(action)[0] == "hermes"  # never a raw sqlite3 shell
        assert not re.search(r"\bsqlite3\b", text)
        assert not re.search(r"\b(rm|del|delete|remove|unlink)\b", text)
        if failure.cause is not Cause.DISK_FULL:
            assert not re.search(r"\bfree\b|disk space", text), failure.cause
    corrupt = describe(Cause.CORRUPT, db_path="/h/state.db", home="/h",
                       spooled_to="/h/spool/s.jsonl")
    assert any("--inspect-only" in a for a in corrupt.actions)
    assert any("import-spool" in a for a in corrupt.actions)
    fts = describe(Cause.FTS_INDEX, db_path="/h/state.db", home="/h")
    assert any(a.endswith("sessions repair") for a in fts.actions)
    assert not any("recover" in a for a in fts.actions)  # derived data: no salvage


def test_cli_prints_summary_and_first_action(hermes_home: Path) -> None:
    hermes_home.mkdir(mode=0o700)
    db = hermes_home / "state.db"
    db.write_bytes(b"not a database" * 500)
    res = CliRunner().invoke(cli, ["sessions", "list"])
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert lines[0].startswith("Error: ") and "file is not a database" in lines[0]
    expected = describe(Cause.CORRUPT, db_path=db, home=hermes_home)
    assert lines[1:] == [expected.summary, f"Next: {expected.actions[0]}"]
    assert db.read_bytes() == b"not a database" * 500


def test_cli_bad_input_stays_one_line(hermes_home: Path) -> None:
    from sessiondb import SessionDB
    SessionDB.open(hermes_home).close()
    res = CliRunner().invoke(cli, ["sessions", "show", "nope"])
    assert res.exit_code == 1
    assert res.output.strip() == "Error: no session 'nope'"


def test_doctor_fix_comes_from_the_table(hermes_home: Path) -> None:
    hermes_home.mkdir(mode=0o700)
    (hermes_home / "profiles" / "p1").mkdir(parents=True, mode=0o700)
    db = hermes_home / "profiles" / "p1" / "state.db"
    db.write_bytes(b"garbage" * 1000)
    res = CliRunner().invoke(cli, ["--profile", "p1", "doctor", "--json"])
    assert res.exit_code == 4
    finding = next(f for f in json.loads(res.output)["findings"] if f["id"] == "open")
    expected = describe(Cause.CORRUPT, db_path=db, home=hermes_home, profile="p1")
    assert finding["fix"] == "; then ".join(expected.actions)
    assert expected.summary in finding["message"]


@pytest.mark.parametrize("cause", [Cause.NOT_FOUND, Cause.INVALID_INPUT])
def test_user_errors_have_no_repair_commands(cause: Cause) -> None:
    failure = describe(cause, db_path="/h/state.db", home="/h")
    assert not any("recover" in a or "import-spool" in a for a in failure.actions)


def test_runbook_table_matches_the_copy_table() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "state-db-recovery.md").read_text()
    for cause in Cause:
        failure = describe(cause, db_path="DB", home="H")
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{cause.value}` |"))
        assert f"`{failure.code}`" in row and failure.summary in row
        for action in describe(cause, db_path="H/state.db", home="H").actions:
            assert action.replace("--source H/state.db", "--source DB") in row


def test_errors_carry_no_next_step_of_their_own() -> None:
    """Next steps come only from the copy table, pinned to the home: errors
    have no `hint` (an unpinned command the CLI never showed)."""
    from hstate_recovery.base.errors import RecoveryError
    from sessiondb import StorageError
    with pytest.raises(TypeError):
        StorageError("x", hint="hermes sessions reindex")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        RecoveryError("x", hint="hermes doctor")  # type: ignore[call-arg]
