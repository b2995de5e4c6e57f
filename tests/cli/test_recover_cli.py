"""`hermes sessions recover`: the usage contract and the exit codes."""
from __future__ import annotations

import json
import shlex
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from tests.helpers import damage


def run(*args: str):
    return CliRunner().invoke(cli, ["sessions", "recover", *args])


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    truth = damage.build_store(src / "state.db", sessions=2, per_session=60)
    return truth.path


@pytest.fixture
def work(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


USAGE_CASES = {
    "neither": (lambda s, t: [], "Error: give --output NEW to recover, or --inspect-only"),
    "both": (lambda s, t: ["--inspect-only", "--output", str(t / "n.db")],
             "Error: --inspect-only and --output exclude each other"),
    "output-is-source": (lambda s, t: ["--output", str(s)],
                         "Error: --output must not be the source or one of its sidecars ({s})"),
    "output-is-source-wal": (lambda s, t: ["--output", f"{s}-wal"],
                             "Error: --output must not be the source or one of its sidecars "
                             "({s}-wal)"),
    "output-exists": (lambda s, t: ["--output", str(t / "exists.db")],
                      "Error: {t}/exists.db already exists; refusing to overwrite"),
    "output-sidecar-exists": (lambda s, t: ["--output", str(t / "side.db")],
                              "Error: {t}/side.db-wal already exists; refusing to overwrite"),
    "report-exists": (lambda s, t: ["--output", str(t / "n.db"), "--report",
                                    str(t / "exists.db")],
                      "Error: report {t}/exists.db already exists; refusing to overwrite"),
    "output-dir-missing": (lambda s, t: ["--output", str(t / "nodir" / "n.db")],
                           "Error: the directory of --output ({t}/nodir) does not exist"),
    "report-dir-missing": (lambda s, t: ["--output", str(t / "n.db"), "--report",
                                         str(t / "nodir" / "r.json")],
                           "Error: the directory of --report ({t}/nodir) does not exist"),
    "report-is-output": (lambda s, t: ["--output", str(t / "n.db"), "--report",
                                       str(t / "n.db.partial")],
                         "Error: --report must not be the output or one of its sidecars"),
    "report-with-inspect": (lambda s, t: ["--inspect-only", "--report", str(t / "r.json")],
                            "Error: --report, --allow-partial, --lane, --template and "
                            "--include-freelist only apply with --output"),
    "freelist-with-inspect": (lambda s, t: ["--inspect-only", "--include-freelist"],
                              "Error: --report, --allow-partial, --lane, --template and "
                              "--include-freelist only apply with --output"),
    "template-missing": (lambda s, t: ["--output", str(t / "n.db"), "--template",
                                       str(t / "none.db")],
                         "Error: template {t}/none.db does not exist or is not a file"),
    "template-is-source": (lambda s, t: ["--output", str(t / "n.db"), "--template", str(s)],
                           "Error: --template must be another file than the source"),
}


@pytest.mark.parametrize("case", list(USAGE_CASES))
def test_usage_errors_exit_2_before_copying(case, source, work, tmp_path):
    (tmp_path / "exists.db").write_bytes(b"keep")
    (tmp_path / "side.db-wal").write_bytes(b"keep")
    args, message = USAGE_CASES[case]
    before = damage.bundle_hashes(source)
    res = run("--source", str(source), "--work-dir", str(work), *args(source, tmp_path))
    assert res.exit_code == 2, res.output
    assert last_line(res.output) == message.format(s=source, t=tmp_path)
    assert list(work.iterdir()) == []
    assert not (tmp_path / "n.db").exists() and not (tmp_path / "r.json").exists()
    assert (tmp_path / "exists.db").read_bytes() == b"keep"
    assert damage.bundle_hashes(source) == before


def test_work_dir_that_is_not_a_directory(source, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    res = run("--source", str(source), "--inspect-only", "--work-dir", str(f))
    assert res.exit_code == 2
    assert last_line(res.output) == f"Error: work dir {f} is not a directory"


def test_missing_source(tmp_path):
    res = run("--source", str(tmp_path / "nope.db"), "--inspect-only")
    assert res.exit_code == 2
    assert last_line(res.output) == \
        f"Error: source {tmp_path}/nope.db does not exist or is not a file"


def test_healthy_inspect_and_recover_exit_0(source, tmp_path):
    res = run("--source", str(source), "--inspect-only")
    assert res.exit_code == 0
    assert "verdict: healthy" in res.output
    assert last_line(res.output) == "next: no command to run"
    report = tmp_path / "r.json"
    res = run("--source", str(source), "--output", str(tmp_path / "n.db"), "--report",
              str(report))
    assert res.exit_code == 0, res.output
    assert "outcome: recovered" in res.output
    assert stat.S_IMODE(os.stat(report).st_mode) == 0o600
    doc = json.loads(report.read_text())
    assert doc["tables"]["messages"]["copied"] == 120 and doc["exit_code"] == 0
    assert "lorem ipsum" not in report.read_text()


def test_damaged_exit_3_json(source, tmp_path):
    tree = damage.TableTree(source, "messages")
    damage.smash_page(source, tree.middle_leaf())
    res = run("--source", str(source), "--inspect-only", "--json")
    assert res.exit_code == 3
    doc = json.loads(res.output)
    assert doc["verdict"] == "structural"
    assert doc["next_command"].startswith(
        f"hermes --home {source.parent} sessions recover --source {source} --output")
    res = run("--source", str(source), "--output", str(tmp_path / "n.db"), "--json")
    assert res.exit_code == 3
    doc = json.loads(res.output)
    assert doc["outcome"] == "partial" and doc["output"] == f"{tmp_path}/n.db.partial"
    assert doc["tables"]["messages"]["copied"] == len(tree.reachable({tree.middle_leaf()}))


def test_not_recoverable_exit_4(tmp_path):
    source = tmp_path / "state.db"
    source.write_bytes(b"\x00" * 4096)
    res = run("--source", str(source), "--inspect-only")
    assert res.exit_code == 4 and "verdict: empty" in res.output
    res = run("--source", str(source), "--output", str(tmp_path / "n.db"))
    assert res.exit_code == 4
    assert "outcome: not_recoverable; output: none written" in res.output
    assert not (tmp_path / "n.db").exists()


def test_lane_option_limits_lanes(source, tmp_path):
    res = run("--source", str(source), "--output", str(tmp_path / "n.db"), "--lane", "rows",
              "--json")
    assert res.exit_code == 0
    assert json.loads(res.output)["lanes_run"] == ["rows"]
    res = run("--source", str(source), "--output", str(tmp_path / "m.db"), "--lane", "nope")
    assert res.exit_code == 2


@pytest.mark.parametrize("hurt,first,command,then", [
    ("leaf", 3, ["sessions", "recover"], 3),
    ("fts_stale", 3, ["sessions", "repair"], 0),
], ids=["structural", "fts_only"])
def test_the_next_command_inspect_prints_runs(source, hurt, first, command, then):
    if hurt == "leaf":
        damage.smash_page(source, damage.TableTree(source, "messages").middle_leaf())
    else:
        damage.sql(source, "INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
    res = run("--source", str(source), "--inspect-only")
    assert res.exit_code == first
    args = shlex.split(last_line(res.output).removeprefix("next: "))
    assert args[:3] == ["hermes", "--home", str(source.parent)] and args[3:5] == command
    res = CliRunner().invoke(cli, args[1:])
    assert res.exit_code == then, res.output
    if hurt == "leaf":
        assert Path(f"{source.with_name('state.recovered.db')}.partial").exists()
    else:  # the index was rebuilt in place: the store inspects healthy now
        assert run("--source", str(source), "--inspect-only").exit_code == 0


def test_page1_zeroed_inspect_estimates_and_carve_recovers(source, tmp_path):
    damage.write_at(source, 0, b"\x00" * damage.PAGE_SIZE)
    res = run("--source", str(source), "--inspect-only")
    assert res.exit_code == 3 and "verdict: structural" in res.output
    line = next(x for x in res.output.splitlines() if x.startswith("carving estimate: "))
    assert line.startswith("carving estimate: messages 120, migrations ")
    # state_meta: sqlite_version, generation, fts_watermark
    assert ", sessions 2, state_meta 3; 0 cells unattributed (schema page unreadable: " \
        "found by shape)" in line
    res = run("--source", str(source), "--output", str(tmp_path / "n.db"), "--lane", "carve",
              "--json")
    assert res.exit_code == 3, res.output
    doc = json.loads(res.output)
    assert doc["lanes_run"] == ["carve"] and doc["verification"]["ok"] is True
    assert doc["tables"]["messages"]["lanes"] == {"carve": 120}
    assert doc["tables"]["messages"]["carved"] == {"orphan": 120}


def test_include_freelist_reaches_the_carve_lane(source, tmp_path):
    from sessiondb import SessionDB
    with SessionDB(source) as db:
        gone = db.list_sessions(limit=1)[0].id
        db.delete_session(gone)
    res = run("--source", str(source), "--output", str(tmp_path / "n.db"), "--lane", "carve",
              "--include-freelist", "--json")
    doc = json.loads(res.output)
    freed = doc["tables"]["messages"]["carved"].get("freelist", 0)
    assert freed > 0 and doc["placeholders"] == [gone]
    assert damage.sql(Path(doc["output"]), "SELECT count(*) FROM recovery_marked_rows") == [
        (freed,)]


ADVICE_PLACES = [
    # (source, home and profile its commands are pinned to, or None: unpinned)
    (Path("/srv/h/state.db"), (Path("/srv/h"), None)),
    (Path("/srv/h/profiles/work/state.db"), (Path("/srv/h"), "work")),
    (Path("/tmp/my copy/old.db"), None),
]


@pytest.mark.parametrize("source,place", ADVICE_PLACES, ids=["home", "profile", "other-name"])
def test_advice_comes_from_the_copy_table(source, place):
    """Damage verdicts are worded by sessiondb.base.explain and name one of its
    entry's actions; every emitted command parses with the real CLI."""
    from hstate_recovery.inspection.examine import FROM_TABLE, OWN_WORDS, VERDICTS, advice
    from sessiondb.base.explain import describe
    from tests.helpers.cliparse import parse_hermes
    assert set(FROM_TABLE) | set(OWN_WORDS) == set(VERDICTS)
    home, profile = place or (None, None)
    for verdict in VERDICTS:
        text, command = advice(verdict, source)
        if command is not None:
            parse_hermes(command)
            assert shlex.split(command)[1:3] == (["--home", str(home)] if home else
                                                 ["sessions", "recover"])
            assert ("--profile" in command) == (profile is not None)
        if verdict in FROM_TABLE:
            failure = describe(FROM_TABLE[verdict][0], db_path=source, home=home,
                               profile=profile)
            assert text == failure.summary
            if verdict == "fts_only" and place is None:  # reindex cannot reach this file
                assert command == describe("corrupt", db_path=source).actions[1]
            elif verdict == "locked" and place is None:  # doctor cannot reach this file
                assert command is None
            else:
                assert command in failure.actions
    assert shlex.split(advice("structural", source)[1])[-1] == str(
        source.parent / "state.recovered.db")
