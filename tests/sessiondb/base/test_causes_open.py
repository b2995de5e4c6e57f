"""Causes at open: a read-only mount is `readonly` (not "not found"), an
unwritable or impossible --home is one line (no traceback)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from tests.helpers.tinyfs import remount, tiny_fs  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[3]


def test_a_read_only_mount_is_readonly_not_not_found(tiny_fs: Path) -> None:
    home = tiny_fs / "home"
    with SessionDB.open(home) as db:
        db.create_session("s1", source="t")
    remount(tiny_fs, "ro")
    try:
        res = CliRunner().invoke(cli, ["--home", str(home), "sessions", "rename", "s1", "x"])
        assert res.exit_code == 1 and "Traceback" not in res.output
        assert "cannot be written (read-only file, folder or disk)" in res.output
        assert "not found" not in res.output and "sessions list" not in res.output
        res = CliRunner().invoke(cli, ["--home", str(home), "doctor", "--json"])
        found = json.loads(res.stdout)["findings"]
        assert not any("was not found" in f["message"] for f in found)
        new = CliRunner().invoke(cli, ["--home", str(tiny_fs / "new"), "chat", "--offline",
                                       "-q", "hi"])  # a command that creates the store
        assert new.exit_code == 1 and new.exception.__class__ is SystemExit
        assert new.output.startswith(f"Error: cannot create the directory {tiny_fs / 'new'}: "
                                     "Read-only file system\n")
    finally:
        remount(tiny_fs, "rw")


@pytest.mark.parametrize("home", ["/proc", "/proc/hermes-home"])
def test_an_impossible_home_is_one_line(home: str) -> None:
    res = CliRunner().invoke(cli, ["--home", home, "chat", "--offline", "-q", "hi"])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    assert res.output.startswith("Error: cannot create ")
    assert len(res.output.strip().splitlines()) == 1  # not_found: just the line


def test_an_unwritable_home_is_one_error_without_traceback(tmp_path: Path) -> None:
    """As a user who may not write there: root without CAP_DAC_OVERRIDE."""
    home = tmp_path / "locked-home"
    home.mkdir(mode=0o555)
    cmd = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--",
           sys.executable, "-c", "from cli.main import main; main()",
           "--home", str(home), "chat", "--offline", "-q", "hi"]
    try:
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("needs setpriv to drop CAP_DAC_OVERRIDE")
    if "Operation not permitted" in res.stderr and "setpriv" in res.stderr:
        pytest.skip("this sandbox cannot drop capabilities")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    first = res.stderr.splitlines()[0]
    assert first == f"Error: cannot create {home / 'state.db'}: Permission denied"
    assert "cannot be written" in res.stderr


def test_doctor_on_an_unwritable_home_says_so_instead_of_looping(tmp_path: Path) -> None:
    home = tmp_path / "locked-home"
    home.mkdir(mode=0o555)
    cmd = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--",
           sys.executable, "-c", "from cli.main import main; main()",
           "--home", str(home), "doctor", "--json"]
    try:
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("needs setpriv to drop CAP_DAC_OVERRIDE")
    (finding,) = json.loads(res.stdout)["findings"]
    assert res.returncode == 4 and finding["severity"] == "error"
    assert "is not writable" in finding["message"]
    assert "sessions list" not in finding["fix"]
