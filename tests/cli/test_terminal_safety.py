"""Human output a terminal can trust: every stored string reaches stdout and
stderr with its control characters spelled out, whatever the command;
JSON stays exact; files written with --output keep the exact text."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_cli.terminal import escape_controls
from sessiondb import SessionDB

# What the issue found reaching the terminal raw, and the neighbours.
OSC52 = "\x1b]52;c;cHduZWQ=\x07"       # write the clipboard
OSC0 = "\x1b]0;owned\x1b\\"           # retitle the window, ST-terminated
DCS = "\x1bP1$qm\x1b\\"               # device control string
CSI8 = "\x9b31m"                      # 8-bit CSI
LONE_ESC = "\x1b"
BIDI = "\u202eevil\u202c"            # right-to-left override
CONTROLS = ["\x07", "\x08", "\x00", "\r", "\x7f", "\x90", "\x9d", "\u2028"]
HOSTILE = (f"t{OSC52}{OSC0}{DCS}{CSI8}{LONE_ESC}{BIDI}" + "".join(CONTROLS)
           + "\x1b[2J end")
# Anything that can drive a terminal: C0 except newline and tab, DEL, C1,
# line separators, bidi controls.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def run(*args: str, **kw):
    return CliRunner().invoke(cli, list(args), **kw)


def assert_clean(text: str) -> None:
    found = RAW.findall(text)
    assert not found, f"raw control characters reached the terminal: {found!r}"


@pytest.fixture
def hostile(hermes_home: Path) -> Path:
    with SessionDB.open() as db:
        db.create_session("s1", source="cli" + CSI8, title=HOSTILE, model="m" + OSC52)
        db.append_messages("s1", [
            {"role": "user", "content": f"needle {HOSTILE}"},
            {"role": "assistant", "content": [{"type": "text", "text": f"needle {OSC0}"}],
             "tool_calls": [{"id": "c1", "function": {"name": "x" + DCS,
                                                     "arguments": OSC52}}]},
            {"role": "tool", "tool_call_id": "c1" + LONE_ESC, "content": "needle" + CSI8}])
    return hermes_home


def test_escape_spells_every_control_visibly():
    out = escape_controls(HOSTILE)
    assert_clean(out)
    assert "\\u001b]52;c;" in out and "\\u009b31m" in out and "\\u202e" in out
    assert escape_controls("line\n\ttab é 中文 🙂") == "line\n\ttab é 中文 🙂"
    # The spelling is JSON's own: decoding it gives the exact character back.
    assert json.loads('"' + escape_controls("\x9b\u2028") + '"') == "\x9b\u2028"


@pytest.mark.parametrize("args", [
    ("sessions", "list"),
    ("sessions", "show", "s1"),
    ("sessions", "show", "s1", "--archived"),
    ("sessions", "search", "needle"),
    ("sessions", "export", "s1", "--format", "markdown"),
    ("sessions", "stats"),
])
def test_read_commands_escape_stored_text(hostile, args):
    res = run(*args)
    assert res.exit_code == 0, res.output
    assert_clean(res.stdout)
    assert_clean(res.stderr)
    assert "\\u001b" in res.stdout or args[1] == "stats"


def test_snippet_cut_inside_a_sequence_is_still_escaped(hermes_home):
    # A window of text around the match starts in the middle of OSC 52.
    text = "x" * 200 + "\x1b]52;c;" + "A" * 3 + " needle " + "\x07" + "y" * 200
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        db.append_message("s1", {"role": "user", "content": text})
        hits = db.search("needle")
    assert any("\x07" in h.snippet or "\x1b" in h.snippet for h in hits)  # the library keeps it
    res = run("sessions", "search", "needle")
    assert res.exit_code == 0
    assert_clean(res.stdout)


def test_delete_prompt_escapes_the_title(hostile):
    res = run("sessions", "delete", "s1", input="n\n")
    assert res.exit_code == 1
    assert "Delete session s1" in res.stderr
    assert_clean(res.stderr)
    assert res.stderr.strip().endswith("Error: not confirmed; nothing was deleted")


def test_json_output_is_exact_and_safe_to_print(hostile):
    res = run("sessions", "list", "--json")
    assert_clean(res.stdout)
    doc = json.loads(res.stdout)
    assert doc["sessions"][0]["title"] == HOSTILE
    assert doc["sessions"][0]["source"] == "cli" + CSI8


def test_jsonl_export_to_stdout_is_exact_when_parsed(hostile):
    res = run("sessions", "export", "s1")
    assert res.exit_code == 0
    assert_clean(res.stdout)
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert lines[1]["session"]["title"] == HOSTILE
    assert lines[2]["message"]["content"] == f"needle {HOSTILE}"


def test_output_file_keeps_the_exact_text(hostile, tmp_path: Path):
    out = tmp_path / "s1.md"
    res = run("sessions", "export", "s1", "--format", "markdown", "-o", str(out))
    assert res.exit_code == 0, res.output
    text = out.read_bytes().decode("utf-8")
    assert HOSTILE in text and f"needle {OSC0}" in text


def test_error_lines_escape_argv_and_paths(hermes_home, tmp_path: Path):
    for args in (["sessions", "show", "bad" + OSC52],
                 ["sessions", "nosuch" + OSC0],
                 ["--bogus" + CSI8],
                 ["sessions", "list", "--limit", "x" + DCS],
                 ["sessions", "export", "s1", "extra" + LONE_ESC, "--all"]):
        res = run(*args)
        assert res.exit_code == 2, (args, res.output)
        assert_clean(res.stderr)
        assert "Error:" in res.stderr
    weird = tmp_path / ("home" + OSC0)
    res = run("--home", str(weird), "sessions", "show", "nosuchsession")
    assert res.exit_code == 1
    assert_clean(res.stderr)


def test_doctor_and_inspect_text_escape_paths(tmp_path: Path):
    home = tmp_path / ("h" + OSC52)
    with SessionDB.open(home) as db:
        db.create_session("s1", source="t", title=HOSTILE)
    # A file name doctor lists (rescued copies), chosen by whoever can write the home.
    (home / f"state.db.rescued-{OSC0}").write_bytes(b"")
    res = run("--home", str(home), "doctor", env={"COLUMNS": "1000"})
    assert res.exit_code in (0, 3), res.output
    assert_clean(res.stdout)
    assert "\\u001b]52" in res.stdout and "\\u001b]0;owned" in res.stdout
    res = run("sessions", "recover", "--source", str(home / "state.db"), "--inspect-only")
    assert res.exit_code == 0, res.output
    assert_clean(res.stdout)
