"""Resume and export guards: get_messages and `sessions show` page past a count."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_agent.persist import TurnPersistence
from hstate_cli.main import cli
from sessiondb import MARKER_KEY, SessionDB, SessionTooLong

pytestmark = pytest.mark.both_backends

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def filled(db: SessionDB, n: int, sid: str = "long") -> list[int]:
    db.create_session(sid, source="test")
    return db.append_messages(sid, [{"role": "user", "content": f"m{i}"} for i in range(n)])


def test_whole_load_past_the_limit_says_how_to_page_and_stream(db):
    filled(db, 120)
    db.load_limit = 100
    with pytest.raises(SessionTooLong) as e:
        db.get_messages("long")
    assert (e.value.rows, e.value.limit) == (120, 100)
    # pinned to the store's home (and profile), ready to paste
    assert e.value.command.endswith(" sessions export long") and e.value.command in str(e.value)
    assert e.value.command.startswith(f"hermes --home {db.home} ") or db.home is None
    assert len(db.get_messages("long", include_archived=True, tail=5)) == 5
    first = db.get_messages("long", limit=10)
    assert [m["content"] for m in first] == [f"m{i}" for i in range(10)]
    nxt = db.get_messages("long", limit=10, after=first[-1]["_db_position"])
    assert [m["content"] for m in nxt] == [f"m{i}" for i in range(10, 20)]
    before = db.get_messages("long", limit=3, before=nxt[0]["_db_position"])
    assert [m["content"] for m in before] == ["m7", "m8", "m9"]
    assert all(MARKER_KEY in m for m in before)
    db.load_limit = 1000
    assert len(db.get_messages("long")) == 120


def test_resume_of_a_too_long_session_is_summary_plus_tail(db, monkeypatch):
    ids = filled(db, 300)
    db.archive_and_compact("long", ids[:200], {"role": "user", "content": "SUMMARY",
                                               "summary": True}, supersede_previous=True)
    db.load_limit = 50
    monkeypatch.setattr("hstate_agent.persist.RESUME_TAIL", 20)
    loaded = TurnPersistence(db, "long", "h").load()
    assert [m["content"] for m in loaded] == ["SUMMARY"] + [f"m{i}" for i in range(280, 300)]
    # the summary inside the tail is not repeated
    tail = db.get_messages("long", tail=101, with_summary=True)
    assert [m["content"] for m in tail][:2] == ["SUMMARY", "m200"] and len(tail) == 101


def test_show_pages_the_newest_first_with_the_next_commands(hermes_home):
    with SessionDB.open(hermes_home) as db:
        filled(db, 120)
    res = run("sessions", "show", "long", "--limit", "50")
    assert res.exit_code == 0, res.output
    assert "Showing 50 of 120 messages (positions 71-120)." in res.stdout
    pinned = f"hermes --home {hermes_home}"
    assert f"Earlier: {pinned} sessions show long --before 71" in res.stdout
    assert f"All of it, streamed: {pinned} sessions export long" in res.stdout
    doc = json.loads(run("sessions", "show", "long", "--limit", "50", "--before", "71",
                         "--json").stdout)
    assert [r["position"] for r in doc["rows"]] == list(range(21, 71))
    assert doc["page"] == {"total": 120, "limit": 50, "more_before": True, "more_after": True,
                           "first_position": 21, "last_position": 70}
    doc = json.loads(run("sessions", "show", "long", "--after", "100", "--json").stdout)
    assert [m["content"] for m in doc["messages"]] == [f"m{i}" for i in range(100, 120)]
    assert doc["page"]["more_after"] is False
    small = run("sessions", "show", "long", "--limit", "500")
    assert "Showing" not in small.stdout and "m0" in small.stdout


SHOW = ("import resource, sys\nfrom hstate_cli.main import cli\n"
        "try:\n    cli(sys.argv[1:], standalone_mode=False)\nfinally:\n"
        "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")


def _peak_kb(home: Path, *args: str) -> int:
    done = subprocess.run([sys.executable, "-c", SHOW, "--home", str(home), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stderr.strip().splitlines()[-1])


def test_show_and_export_of_a_long_session_run_in_bounded_memory(tmp_path):
    text = "x" * 1000
    for name, n in (("small", 2_000), ("large", 20_000)):
        with SessionDB.open(tmp_path / name) as db:
            db.create_session("s", source="test")
            for k in range(0, n, 2000):
                db.append_messages("s", [{"role": "user", "content": f"{i} {text}"}
                                         for i in range(k, k + 2000)])
    show = {name: _peak_kb(tmp_path / name, "sessions", "show", "s", "--json")
            for name in ("small", "large")}
    # 20 MB of text more in the session; a whole load would add far more than this
    assert show["large"] - show["small"] < 8 * 1024, show
    export = {name: _peak_kb(tmp_path / name, "sessions", "export", "s", "-o",
                             str(tmp_path / f"{name}.jsonl")) for name in ("small", "large")}
    assert export["large"] - export["small"] < 8 * 1024, export
