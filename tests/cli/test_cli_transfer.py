"""`hermes sessions export/import` through the real CLI: outputs, errors, exit codes."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.maintenance.export import session_messages


def run(*args: str, **kw):
    return CliRunner().invoke(cli, list(args), **kw)


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


@pytest.fixture
def filled(hermes_home):
    with SessionDB.open() as db:
        db.create_session("s1", source="agent", title="Trip planning")
        db.append_messages("s1", [
            {"role": "user", "content": "Where to go?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "Lisbon"},
        ])
        db.create_session("s2", source="cli")
        db.append_messages("s2", [{"role": "user", "content": f"n{i}"} for i in range(700)])
    return hermes_home


def state_of(home: Path) -> dict:
    with SessionDB.open(home) as db:
        return {s.id: (s.to_dict(), [(m.uid, m.timestamp, m.state, m.message)
                                     for m in session_messages(db.core, s.id)])
                for s in db.session_page(limit=100)}


def test_export_import_round_trip_through_the_cli(filled, tmp_path):
    out = tmp_path / "backup.jsonl"
    res = run("sessions", "export", "--all", "-o", str(out), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"format": "jsonl", "sessions": 2, "messages": 703,
                                      "output": str(out)}
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    fresh = tmp_path / "fresh"
    dry = run("--home", str(fresh), "sessions", "import", str(out), "--dry-run", "--json")
    assert (dry.exit_code, dry.stderr) == (1, f"Error: no store at {fresh / 'state.db'}\n")
    assert not fresh.exists()  # a dry run is a reading command: it creates nothing
    res = run("--home", str(fresh), "sessions", "import", str(out), "--json")
    doc = json.loads(res.stdout)
    assert {k: doc[k] for k in ("dry_run", "sessions_created", "messages_added",
                                "messages_skipped")} == \
        {"dry_run": False, "sessions_created": 2, "messages_added": 703, "messages_skipped": 0}
    assert state_of(fresh) == state_of(filled)
    again = json.loads(run("--home", str(fresh), "sessions", "import", str(out),
                           "--json").stdout)
    assert (again["messages_added"], again["messages_skipped"]) == (0, 703)
    assert state_of(fresh) == state_of(filled)


def test_export_to_stdout_in_each_format(filled):
    jsonl = run("sessions", "export", "s1")
    assert jsonl.exit_code == 0
    kinds = [json.loads(x)["type"] for x in jsonl.stdout.splitlines()]
    assert kinds == ["header", "session", "message", "message", "message", "end"]
    doc = json.loads(run("sessions", "export", "s1", "s2", "--format", "json").stdout)
    assert [s["session"]["id"] for s in doc["sessions"]] == ["s1", "s2"]
    md = run("sessions", "export", "s1", "--format", "markdown").stdout
    assert md.startswith("# Trip planning") and "tool call `search`" in md


def test_existing_output_needs_force(filled, tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text("precious")
    res = run("sessions", "export", "--all", "-o", str(out))
    assert res.exit_code == 1
    assert res.stderr == f"Error: {out} already exists; pass --force to replace it\n"
    assert out.read_text() == "precious"
    res = run("sessions", "export", "--all", "-o", str(out), "--force")
    assert res.exit_code == 0
    assert out.read_text().startswith('{"exported_at"')
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "o.jsonl"]


def test_unwritable_output_is_one_line_error(filled, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    res = run("sessions", "export", "--all", "-o", str(blocker / "out.jsonl"))
    assert res.exit_code == 1
    assert res.stderr == f"Error: cannot write {blocker}/out.jsonl: Not a directory\n"
    assert res.stdout == ""
    assert blocker.read_text() == "x"


def test_unknown_session_in_export_writes_nothing(filled, tmp_path):
    out = tmp_path / "o.jsonl"
    res = run("sessions", "export", "s1", "nope", "-o", str(out))
    assert res.exit_code == 1
    assert res.stderr == "Error: no session 'nope'\n"
    assert not out.exists()


@pytest.mark.parametrize("args, error", [
    (("sessions", "export"), "Error: name one or more session IDs, or pass --all (not both)"),
    (("sessions", "export", "s1", "--all"),
     "Error: name one or more session IDs, or pass --all (not both)"),
    (("sessions", "export", "--all", "--json"),
     "Error: --json needs --output (without it the export itself goes to stdout)"),
    (("sessions", "export", "--all", "--force"),
     "Error: --force needs --output (without it the export itself goes to stdout)"),
    (("sessions", "export", "--all", "--format", "xml"),
     "Error: Invalid value for '--format': 'xml' is not one of 'jsonl', 'json', 'markdown'."),
    (("sessions", "export", "--all", "--bogus"), "Error: No such option '--bogus'."),
    # a missing import file is an unreadable import file: exit 1 (docs/cli.md),
    # tests/cli/test_causes_named.py
    (("sessions", "import", "x", "--from", "chatgpt"),
     "Error: Invalid value for '--from': 'chatgpt' is not one of 'claude-code', 'codex', "
     "'hermes', 'hermes-agent', 'llm'."),
    (("sessions", "export", "bad/../id"),
     "Error: Invalid value for '[ID]...': invalid session id 'bad/../id': 1-128 characters "
     "from letters, digits and . _ : @ + = -, starting with a letter or digit, without '..'"),
])
def test_usage_errors_exit_2_with_exact_line(filled, args, error):
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert last_line(res.stderr) == error
    assert res.stdout == ""


def test_import_of_a_truncated_file_changes_nothing(filled, tmp_path):
    out = tmp_path / "b.jsonl"
    run("sessions", "export", "--all", "-o", str(out))
    lines = out.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:300]) + "\n")
    fresh = tmp_path / "fresh"
    res = run("--home", str(fresh), "sessions", "import", str(cut))
    assert res.exit_code == 1
    assert res.stderr == ("Error: the file ends without its end record (truncated?); "
                          "nothing was imported\n")
    assert state_of(fresh) == {}


def test_import_of_a_malformed_line_names_it(filled, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "format": "hermes-export", "version": 1}\n[1, 2]\n')
    res = run("sessions", "import", str(bad))
    assert res.exit_code == 1
    assert res.stderr == "Error: line 2: each line must be a JSON object with a 'type'\n"


def test_import_from_llm_through_the_cli(hermes_home, tmp_path):
    from tests.sessiondb.maintenance.test_export_llm import make_logs
    logs = tmp_path / "logs.db"
    make_logs(logs).close()
    res = run("sessions", "import", "--from", "llm", str(logs), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["source_format"], doc["sessions_created"], doc["messages_added"]) == \
        ("llm", 3, 10)
    human = run("sessions", "import", "--from", "llm", str(logs), "--dry-run")
    assert human.exit_code == 0
    assert "already present" in human.stdout and "Dry run: nothing was written." in human.stdout


def _hermes(args: list[str], home: Path, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, HERMES_HOME=str(home))
    return subprocess.run([sys.executable, "-c", "from cli.main import main; main()", *args],
                          capture_output=True, env=env, cwd=Path(__file__).resolve().parents[2],
                          **kw)


def test_piped_output_has_no_progress_bar_or_ansi_codes(filled, tmp_path):
    out = tmp_path / "p.jsonl"
    done = _hermes(["sessions", "export", "--all", "-o", str(out)], filled)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    assert done.stdout == f"Exported 2 sessions (703 messages) to {out}.\n".encode()
    imported = _hermes(["sessions", "import", str(out)], tmp_path / "fresh")
    assert imported.returncode == 0
    assert imported.stderr == b""
    assert b"\x1b" not in imported.stdout and b"\r" not in imported.stdout
    listing = _hermes(["sessions", "list"], filled)
    assert b"\x1b" not in listing.stdout and listing.stderr == b""


def test_terminal_gets_a_progress_bar_on_stderr(filled, tmp_path):
    import pty
    primary, secondary = pty.openpty()
    try:
        out = tmp_path / "t.jsonl"
        done = _hermes(["sessions", "export", "--all", "-o", str(out)], filled,
                       stdin=subprocess.DEVNULL)
        assert done.returncode == 0
        env = dict(os.environ, HERMES_HOME=str(filled))
        proc = subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", "sessions", "export",
             "--all", "-o", str(tmp_path / "t2.jsonl")],
            stdout=subprocess.PIPE, stderr=secondary, env=env,
            cwd=Path(__file__).resolve().parents[2])
        os.close(secondary)
        secondary = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO once the child's end is closed
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if secondary != -1:
            os.close(secondary)
        os.close(primary)
    assert proc.returncode == 0
    assert b"exporting" in drawn and b"100%" in drawn
    assert b"exporting" not in proc.stdout


def test_export_into_a_closed_pipe_is_one_error_line(hermes_home):
    with SessionDB.open() as db:
        db.create_session("wide", source="t")
        db.append_messages("wide", [{"role": "user", "content": "z" * 1000}
                                    for _ in range(400)])
    env = dict(os.environ, HERMES_HOME=str(hermes_home))
    proc = subprocess.Popen([sys.executable, "-c", "from cli.main import main; main()",
                             "sessions", "export", "--all"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout.read(100).startswith(b'{"exported_at"')
    proc.stdout.close()  # like `| head -c 100`
    err = proc.stderr.read()
    assert proc.wait() == 1
    assert err == b"Error: stdout was closed before the export finished\n"


def test_profile_is_honoured_by_export_and_import(hermes_home, tmp_path):
    with SessionDB.open(profile="work") as db:
        db.create_session("w1", source="t")
        db.append_message("w1", {"role": "user", "content": "work only"})
    out = tmp_path / "w.jsonl"
    res = run("sessions", "export", "--all", "-o", str(out), "--json")  # default profile
    assert (res.exit_code, res.stderr) == (1, f"Error: no store at {hermes_home / 'state.db'}\n")
    assert not out.exists() and not (hermes_home / "state.db").exists()
    res = run("--profile", "work", "sessions", "export", "--all", "-o", str(out), "--force")
    assert res.stdout == f"Exported 1 session (1 message) to {out}.\n"
    res = run("--profile", "copy", "sessions", "import", str(out), "--json")
    assert json.loads(res.stdout)["messages_added"] == 1
    assert state_of(hermes_home / "profiles" / "copy") == \
        state_of(hermes_home / "profiles" / "work")
