"""Each failure is named from what happened, not the nearest guess, through
the real CLI on real files.

Before: `recover` of a 6-byte text file reported "file: a hermes-state
store; schema from: reference"; importing a `--format json` export said
"line 1: not valid JSON"; `sessions list --archived --all` took both; a
missing import file exited 2 (docs/cli.md: 1); `doctor --fix` refused by
structural damage exited 4 with no reason; `optimize` under a holder said
the store was "busy for too long" (tests/cli/test_next_steps_walk.py).
"""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hstate_cli.main import cli
from tests.helpers.damage import smash_middle_leaves
from tests.helpers.stores import fill_home


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args))


def test_recover_names_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    res = run("sessions", "recover", "--source", str(text), "--output", str(tmp_path / "o.db"))
    assert res.exit_code == 4, res.output
    assert "file: not an SQLite database" in res.output
    assert "hermes-state store" not in res.output and "schema from: reference" not in res.output
    doc = json.loads(run("sessions", "recover", "--source", str(text), "--output",
                         str(tmp_path / "p.db"), "--json").stdout)
    assert doc["identification"]["label"] == "not an SQLite database"


def test_a_json_export_offered_to_import_says_which_format_imports(hermes_home: Path,
                                                                   tmp_path: Path) -> None:
    fill_home(hermes_home, n=5)
    out = tmp_path / "all.json"
    assert run("--home", str(hermes_home), "sessions", "export", "--all", "--format", "json",
               "-o", str(out)).exit_code == 0
    res = run("--home", str(tmp_path / "other"), "sessions", "import", str(out))
    assert res.exit_code == 1
    assert "json format" in res.output and "--format jsonl" in res.output, res.output
    assert "not valid JSON" not in res.output


def test_a_missing_import_file_exits_1(hermes_home: Path, tmp_path: Path) -> None:
    for kind in ("hermes", "hermes-agent", "llm"):
        res = run("--home", str(hermes_home), "sessions", "import", "--from", kind,
                  str(tmp_path / "nowhere.jsonl"))
        assert res.exit_code == 1, (kind, res.output)
        assert "Usage:" not in res.output


def test_archived_and_all_conflict(hermes_home: Path) -> None:
    fill_home(hermes_home, n=1)
    res = run("--home", str(hermes_home), "sessions", "list", "--archived", "--all")
    assert res.exit_code == 2 and "exclude each other" in res.output
    assert run("--home", str(hermes_home), "sessions", "list", "--all").exit_code == 0


def test_doctor_fix_refused_by_structural_damage_says_why(hermes_home: Path) -> None:
    db = fill_home(hermes_home, n=600)
    smash_middle_leaves(db, "messages")
    res = run("--home", str(hermes_home), "doctor", "--fix")
    assert res.exit_code == 1, res.output
    assert "Error: not fixed: " in res.output and "structural damage" in res.output
    doc = json.loads(run("--home", str(hermes_home), "doctor", "--fix", "--json").stdout)
    assert "structural damage" in doc["refused"]
