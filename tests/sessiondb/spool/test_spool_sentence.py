"""The spool is mentioned only when something was spooled, and library
warnings reach the CLI's stderr as one `Warning:` line without logger names."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from tests.helpers.stores import fill_home, mark_stale
from tests.helpers.tinyfs import remount, tiny_fs  # noqa: F401 (fixture)


def test_read_commands_on_a_read_only_mount_never_mention_a_spool(tiny_fs: Path) -> None:
    home = tiny_fs / "home"
    with SessionDB.open(home) as db:
        db.create_session("s1", source="t")
        db.append_messages("s1", [{"role": "user", "content": "hi"}])
    remount(tiny_fs, "ro")
    try:
        for args in (["sessions", "list"], ["sessions", "export", "s1", "-o", "-"],
                     ["sessions", "stats"], ["doctor"],
                     ["sessions", "recover", "--source", str(home / "state.db"),
                      "--inspect-only"]):
            res = CliRunner().invoke(cli, ["--home", str(home), *args])
            assert "in the spool" not in res.output, (args, res.output)
            assert "import-spool" not in res.output, (args, res.output)
            assert "Traceback" not in res.output
    finally:
        remount(tiny_fs, "rw")


def test_inspect_of_a_damaged_file_never_mentions_a_spool(hermes_home: Path) -> None:
    db = hermes_home / "state.db"
    hermes_home.mkdir(mode=0o700)
    db.write_bytes(b"SQLite format 3\0" + b"\xff" * 4000)
    res = CliRunner().invoke(cli, ["sessions", "recover", "--source", str(db),
                                   "--inspect-only"])
    assert "spool" not in res.output.lower()
    res = CliRunner().invoke(cli, ["sessions", "list"])
    assert res.exit_code == 1 and "spool" not in res.output.lower(), res.output


def test_library_warnings_are_one_line_without_logger_names(hermes_home: Path) -> None:
    db = fill_home(hermes_home)
    mark_stale(db)  # the next open rebuilds the index and logs a warning
    res = CliRunner().invoke(cli, ["sessions", "list", "--json"])
    assert res.exit_code == 0
    assert res.stderr.splitlines() == [
        "Warning: rebuilt the stale search index on open (120 messages)"]
    assert "sessiondb" not in res.stderr and "WARNING" not in res.stderr
