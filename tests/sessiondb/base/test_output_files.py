"""Output files that are not what they seem: --force replaces only regular
files; devices, FIFOs, sockets, directories and symlinks are refused with a
typed error and left as they were; stdout is `-o -`; one session named twice
is exported once; counts read as English."""
from __future__ import annotations

import json
import os
import re
import socket
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.base.outfile import OutputNotRegular, check_output, private_output


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def filled(hermes_home: Path) -> Path:
    with SessionDB.open() as db:
        db.create_session("s1", source="t", title="one")
        db.append_message("s1", {"role": "user", "content": "hello"})
        db.create_session("s2", source="t")
        db.append_messages("s2", [{"role": "user", "content": "a"},
                                  {"role": "assistant", "content": "b"}])
    return hermes_home


def _make(kind: str, path: Path, tmp_path: Path) -> object:
    """Create a non-regular node; returns what must still be true afterwards."""
    if kind == "fifo":
        os.mkfifo(path)
        return stat.S_ISFIFO
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
        return stat.S_ISSOCK
    if kind == "directory":
        path.mkdir()
        (path / "inside").write_text("keep")
        return stat.S_ISDIR
    (tmp_path / "victim").write_text("keep")
    path.symlink_to(tmp_path / "victim")
    return stat.S_ISLNK


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "symlink"])
@pytest.mark.parametrize("force", [False, True])
def test_force_never_replaces_a_node_that_is_not_a_regular_file(filled, tmp_path, kind, force):
    target = tmp_path / "out"
    still = _make(kind, target, tmp_path)
    res = run("sessions", "export", "s1", "-o", str(target), *(["--force"] if force else []))
    if kind == "directory":  # click's own path check answers first, as a usage error
        assert res.exit_code == 2 and "is a directory" in res.stderr, res.output
    else:
        assert res.exit_code == 1, res.output
        assert "not a regular file" in res.stderr and "-o -" in res.stderr
    assert still(os.lstat(target).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out", "home", *(["victim"] if kind == "symlink" else [])])  # no temp file left
    if kind == "symlink":
        assert (tmp_path / "victim").read_text() == "keep"


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_force_refuses_a_device(filled, device):
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist on this machine")
    before = os.lstat(device)
    res = run("sessions", "export", "s1", "-o", device, "--force")
    assert res.exit_code == 1
    assert res.stderr.startswith(f"Error: {device} is a character device, not a regular file")
    after = os.lstat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_the_library_refuses_a_directory_too(tmp_path):
    with pytest.raises(OutputNotRegular) as caught:
        check_output(tmp_path, force=True)
    assert caught.value.kind == "directory"


def test_a_node_appearing_during_the_export_is_not_replaced(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(OutputNotRegular) as caught:
        with private_output(target, force=True) as f:
            f.write("data")
            os.mkfifo(target)  # appears after the early check, before the rename
    assert caught.value.kind == "FIFO"
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_force_still_replaces_a_regular_file(filled, tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_text("old")
    res = run("sessions", "export", "s1", "-o", str(target), "--force")
    assert res.exit_code == 0, res.output
    assert json.loads(target.read_text().splitlines()[1])["session"]["id"] == "s1"
    check_output(tmp_path / "absent", force=False)  # a missing target is fine


def test_dash_is_stdout(filled, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run("sessions", "export", "s1", "-o", "-")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.splitlines()[1])["session"]["id"] == "s1"
    assert not (tmp_path / "-").exists()
    res = run("sessions", "export", "s1", "-o", "-", "--json")
    assert res.exit_code == 2
    assert "--json cannot share stdout with the export (-o -)" in res.stderr


def test_a_session_named_twice_is_exported_once(filled, tmp_path):
    res = run("sessions", "export", "s1", "s2", "s1")
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["session"]["id"] for r in lines if r["type"] == "session"] == ["s1", "s2"]
    assert lines[-1] == {"type": "end", "sessions": 2, "messages": 3}
    out = tmp_path / "one.jsonl"
    res = run("sessions", "export", "s1", "s1", "-o", str(out))
    assert res.stdout == f"Exported 1 session (1 message) to {out}.\n"
    res = run("sessions", "export", "s2", "-o", str(tmp_path / "two.jsonl"))
    assert res.stdout.startswith("Exported 1 session (2 messages) to ")


def test_doctor_counts_read_as_english(filled):
    res = CliRunner().invoke(cli, ["doctor"])
    last = res.stdout.strip().splitlines()[-1]
    assert " checks: " in last and not re.search(r"(?<!\d)1 checks", last)  # 21 checks is fine
    from hstate_cli.commands.doctor import summary_line
    from hstate_recovery.doctor.run import Finding
    assert summary_line([Finding("x", "ok", "fine")]).startswith("1 check: 1 ok, 0 info")
