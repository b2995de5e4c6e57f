"""Follow every `Next:` literally, through the real CLI, on a real store in the
state each cause describes, until the store is healthy or the step is one
only a person can take (stop the holder, free space, make it writable).
A step that fails without saying what to do, or that comes back to a
command already run on an unchanged home, fails the test.

Before: locked -> `recover --inspect-only` -> the same inspect (a loop);
search pages destroyed -> `reindex` -> "cannot be rebuilt in place" (an
error); a rescued copy -> doctor "recover from it" -> inspect "nothing to
do"; a `.partial` result with no next step; doctor pointing to a document
`pip install .` does not ship.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import Cause, SessionDB
from sessiondb.base.explain import all_causes, describe
from tests.helpers.damage import smash_middle_leaves
from tests.helpers.search_damage import junk_pages
from tests.helpers.stores import fill_home, held_by_another_process, raw_sql
from tests.helpers.tinyfs import cannot_mount, fill, mount_tmpfs, remount, unmount

ROOT = Path(__file__).resolve().parents[2]
MAX_STEPS = 10
_NEXT = re.compile(r"^(?:Next|next): (hermes .+)$", re.M)


@dataclass
class Walk:
    steps: list[str] = field(default_factory=list)
    ended: str = ""  # "healthy" or "person: <step>"


def _home_state(home: Path) -> str:
    """Names, sizes and contents' hash of every file under the home."""
    h = hashlib.sha256()
    for p in sorted(home.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(f"{p.relative_to(home)}:{p.stat().st_size}".encode())
            if p.stat().st_size < 4 << 20:
                h.update(p.read_bytes())
    return h.hexdigest()


def _doctor_step(home: Path, out: str) -> tuple[str | None, str]:
    """From doctor's JSON: (next hermes command, or None with how it ended)."""
    doc = json.loads(out)
    if doc["worst"] in ("ok", "info"):
        return None, "healthy"
    rank = ("warn", "error")
    worst = [f for f in doc["findings"] if f["severity"] == doc["worst"] and f["fix"]]
    assert worst, f"doctor's worst finding has no fix: {doc['findings']}"
    worst.sort(key=lambda f: rank.index(f["severity"]), reverse=True)
    first = worst[0]["fix"].split("; then ")[0].strip()
    if first.startswith("hermes "):
        return first, ""
    return None, f"person: {first}"


def walk(home: Path, first: str, profile: str | None = None) -> Walk:
    """Run ``first`` and every command it leads to; see the module doc. A step
    that ends without a next one is followed by doctor (of ``profile``)."""
    result, seen, command = Walk(), set(), first
    for _ in range(MAX_STEPS):
        args = shlex.split(command)
        assert args[0] == "hermes", command
        is_doctor = "doctor" in args and "--json" not in args
        run_args = args[1:] + (["--json"] if is_doctor else [])
        key = (command, _home_state(home))
        assert key not in seen, f"loop: {command} again on an unchanged home: {result.steps}"
        seen.add(key)
        result.steps.append(command)
        res = CliRunner().invoke(cli, run_args)
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            raise AssertionError(f"{command} crashed: {res.exception!r}\n{res.output}")
        assert res.exit_code != 2, f"{command} was called wrongly:\n{res.output}"
        assert "Traceback" not in res.output
        if is_doctor:
            nxt, ended = _doctor_step(home, res.stdout)
        else:
            found = _NEXT.findall(res.output)
            nxt, ended = (found[-1], "") if found else (None, "")
            if nxt is None and res.exit_code == 0:
                nxt = shlex.join(["hermes", "--home", str(home),
                                  *(["--profile", profile] if profile else []), "doctor"])
            elif nxt is None:
                raise AssertionError(f"dead end: {command} failed with no next step:\n"
                                     f"{res.output}")
        if nxt is None:
            result.ended = ended
            return result
        command = nxt
    raise AssertionError(f"no end after {MAX_STEPS} steps: {result.steps}")


def cli_error_next(home: Path, *args: str) -> str:
    """Run a command that fails; return its `Next:` command (the walk's start)."""
    res = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert res.exit_code == 1, res.output
    found = _NEXT.findall(res.output)
    assert found, f"no Next: line in\n{res.output}"
    return found[-1]


def table_first(cause: Cause, home: Path) -> str:
    return describe(cause, db_path=home / "state.db", home=home).actions[0]


# -- one builder per cause: the store in that state, and the walk's first step --

@pytest.fixture(params=["2M"])
def small_fs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    where = tmp_path / "fs"
    if not mount_tmpfs(where, request.param):
        cannot_mount()
    try:
        yield where
    finally:
        unmount(where)


def test_corrupt_walks_to_a_healthy_installed_store(hermes_home: Path) -> None:
    db = fill_home(hermes_home, n=600)
    smash_middle_leaves(db, "messages")
    w = walk(hermes_home, cli_error_next(hermes_home, "sessions", "show", "shared"))
    assert w.ended == "healthy", w
    assert any("install-recovered" in s for s in w.steps), w.steps


def test_fts_btree_damage_walks_to_a_healthy_store(hermes_home: Path) -> None:
    db = fill_home(hermes_home)
    junk_pages(db, "messages_fts_data")
    w = walk(hermes_home, cli_error_next(hermes_home, "sessions", "reindex"))
    assert w.ended == "healthy" and "sessions repair" in w.steps[0], w


def test_locked_ends_at_stopping_the_holder(hermes_home: Path) -> None:
    db = fill_home(hermes_home)
    with held_by_another_process(db) as pid:
        w = walk(hermes_home, table_first(Cause.LOCKED, hermes_home))
    assert w.ended.startswith(f"person: stop process {pid}"), w


def test_reindex_refused_ends_at_stopping_the_holder(hermes_home: Path) -> None:
    """A reindex under another holder says so (not "locked", not an inspect
    of a store that is fine) and doctor names the process to stop."""
    db = fill_home(hermes_home)
    with held_by_another_process(db) as pid:
        res = CliRunner().invoke(cli, ["--home", str(hermes_home), "sessions", "reindex"])
        assert res.exit_code == 1, res.output
        assert "Another process holds the session database" in res.output
        assert "recover" not in res.output and "busy" not in res.output
        w = walk(hermes_home, cli_error_next(hermes_home, "sessions", "reindex"))
    assert w.steps[0] == shlex.join(["hermes", "--home", str(hermes_home), "doctor"])
    assert w.ended.startswith(f"person: stop process {pid}"), w


def test_optimize_refused_by_a_holder_says_so_and_ends_at_stopping_it(
        hermes_home: Path) -> None:
    """A holder's refusal is named as one (not a store "busy for too long")."""
    db = fill_home(hermes_home)
    with held_by_another_process(db) as pid:
        res = CliRunner().invoke(cli, ["--home", str(hermes_home), "sessions", "optimize"])
        assert res.exit_code == 1, res.output
        assert "Another process holds the session database" in res.output
        assert "busy for too long" not in res.output
        w = walk(hermes_home, cli_error_next(hermes_home, "sessions", "optimize"))
    assert w.ended.startswith(f"person: stop process {pid}"), w


def test_disk_full_ends_at_freeing_space(small_fs: Path) -> None:
    home = small_fs / "home"
    with SessionDB.open(home) as db:
        db.create_session("shared", source="t")
    fill(small_fs)
    w = walk(home, cli_error_next(home, "sessions", "rename", "shared", "x"))
    assert w.ended.startswith("person: free space"), w


@pytest.mark.parametrize("small_fs", ["64M"], indirect=True)  # free_disk stays ok
def test_readonly_ends_at_making_it_writable(small_fs: Path) -> None:
    home = small_fs / "home"
    with SessionDB.open(home) as db:
        db.create_session("shared", source="t")
    remount(small_fs, "ro")
    try:
        w = walk(home, cli_error_next(home, "sessions", "rename", "shared", "x"))
    finally:
        remount(small_fs, "rw")
    assert w.ended.startswith("person: make "), w


def test_replaced_by_a_deleted_wal_ends_at_copying_it_out(hermes_home: Path) -> None:
    hermes_home.mkdir(mode=0o700)
    db = hermes_home / "state.db"
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.walkeeper", str(db), "20"],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.unlink(f"{db}-wal")
        w = walk(hermes_home, shlex.join(["hermes", "--home", str(hermes_home), "doctor"]))
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert w.ended.startswith("person: mkdir -m 700") and f"/proc/{proc.pid}/fd/" in w.ended


def test_unknown_schema_ends_at_upgrading(hermes_home: Path) -> None:
    db = fill_home(hermes_home)
    raw_sql(db, "INSERT INTO migrations(name, applied_at) VALUES ('m999_future', 0)")
    w = walk(hermes_home, cli_error_next(hermes_home, "sessions", "list"))
    assert w.ended.startswith("person: pip install -U"), w


def test_a_rescued_copy_walks_to_a_healthy_store(hermes_home: Path) -> None:
    db = fill_home(hermes_home)
    rescued = hermes_home / "state.db.rescued-20260101T000000"
    rescued.write_bytes(db.read_bytes())
    rescued.chmod(0o600)
    w = walk(hermes_home, shlex.join(["hermes", "--home", str(hermes_home), "doctor"]))
    assert w.ended == "healthy" and any("install-recovered" in s for s in w.steps), w


BUILT_ON_A_HEALTHY_STORE = (Cause.IO_ERROR, Cause.REPLACED, Cause.LEASE_LOST,
                            Cause.NOT_FOUND)


@pytest.mark.parametrize("cause", BUILT_ON_A_HEALTHY_STORE, ids=lambda c: c.value)
def test_table_steps_after_a_transient_failure_reach_a_healthy_store(
        hermes_home: Path, cause: Cause) -> None:
    """Causes a one-shot command cannot produce on disk (a transient I/O error,
    a file swapped under a live handle, a lease taken over, a mistyped id):
    the store itself is healthy afterwards, so every step must lead there."""
    fill_home(hermes_home)
    w = walk(hermes_home, table_first(cause, hermes_home))
    assert w.ended == "healthy", w


def test_a_foreign_file_steps_end_with_nothing_to_run(hermes_home: Path) -> None:
    """Another program's file is never ours to make healthy: its steps inspect
    it and recover it in its own schema, and then say there is nothing to run
    (not "install" a file that is not a store of ours)."""
    import apsw
    hermes_home.mkdir(mode=0o700)
    db = hermes_home / "state.db"
    conn = apsw.Connection(str(db))
    conn.execute("CREATE TABLE notes(x); INSERT INTO notes VALUES (1)")
    conn.close()
    before = db.read_bytes()
    failure = describe(Cause.FOREIGN, db_path=db, home=hermes_home)
    for command in failure.actions:
        res = CliRunner().invoke(cli, shlex.split(command)[1:])
        assert res.exit_code == 0, (command, res.output)
        assert res.output.strip().splitlines()[-1] == "next: no command to run"
    assert db.read_bytes() == before


def test_every_cause_with_commands_is_walked() -> None:
    walked = {Cause.CORRUPT, Cause.FTS_INDEX, Cause.LOCKED, Cause.REBUILD_REFUSED, Cause.HELD,
              Cause.DISK_FULL, Cause.READONLY,
              Cause.REPLACED, Cause.UNKNOWN, Cause.FOREIGN, *BUILT_ON_A_HEALTHY_STORE}
    with_commands = {c for c in all_causes() if describe(c, db_path="/h/state.db",
                                                         home="/h").actions}
    assert with_commands <= walked


# -- the states an operator meets on the way: index damage, a spool, a `.partial`
# result, a profile; every command printed is run in the state that printed it --

def doctor_first(home: Path, *profile: str) -> str:
    return shlex.join(["hermes", "--home", str(home), *profile, "doctor"])


def test_index_page_damage_walks_from_search_to_a_healthy_store(hermes_home: Path) -> None:
    """The search answers (exit 0) and its note names the step; doctor's fix is
    the same step; both end healthy."""
    db = fill_home(hermes_home, n=600)
    junk_pages(db, "messages_fts_data")
    res = CliRunner().invoke(cli, ["--home", str(hermes_home), "sessions", "search", "alpha"])
    assert res.exit_code == 0, res.output
    step = res.output.split("Run: ", 1)[1].splitlines()[0]
    w = walk(hermes_home, step)
    assert w.ended == "healthy" and w.steps[0].endswith("sessions repair"), w


def test_structural_damage_with_a_spool_walks_to_an_installed_store(hermes_home: Path) -> None:
    """The chat turn's line is spooled; the walk recovers, installs (which
    imports the spool) and ends healthy with the line in the store."""
    db = fill_home(hermes_home, n=600)
    smash_middle_leaves(db, "messages")
    chat = CliRunner().invoke(cli, ["--home", str(hermes_home), "doctor"])
    assert chat.exit_code == 4
    chat = CliRunner().invoke(cli, ["--home", str(hermes_home), "chat", "--offline", "-q",
                                    "kept line"])
    assert chat.exit_code == 1 and list((hermes_home / "spool").glob("*.jsonl")), chat.output
    w = walk(hermes_home, doctor_first(hermes_home))
    assert w.ended == "healthy", w
    assert not list((hermes_home / "spool").glob("*.jsonl"))
    with SessionDB.open(hermes_home) as store:
        assert any(h.snippet for h in store.search("kept line"))


def test_a_partial_result_beside_the_store_walks_on(hermes_home: Path) -> None:
    """An earlier recover left `state.recovered.db.partial`: the recover doctor
    and inspect print writes to a name that is still free."""
    db = fill_home(hermes_home, n=600)
    smash_middle_leaves(db, "messages")
    (hermes_home / "state.recovered.db.partial").write_bytes(b"an earlier, partial result")
    w = walk(hermes_home, doctor_first(hermes_home))
    assert w.ended == "healthy", w
    assert any("state.recovered-2.db" in s for s in w.steps), w.steps


def test_a_profile_is_kept_in_every_step(hermes_home: Path) -> None:
    with SessionDB.open(hermes_home, "work") as store:
        store.create_session("shared", source="test")
        store.append_messages("shared", [{"role": "user", "content": f"line {i}"}
                                         for i in range(600)])
    smash_middle_leaves(hermes_home / "profiles" / "work" / "state.db", "messages")
    first = cli_error_next(hermes_home, "--profile", "work", "sessions", "show", "shared")
    w = walk(hermes_home, first, profile="work")
    assert w.ended == "healthy", w
    assert all(shlex.split(s)[3:5] == ["--profile", "work"] for s in w.steps), w.steps
    assert any("install-recovered" in s for s in w.steps), w.steps


def test_doctor_prints_every_fix_whole_below_the_table(hermes_home: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """However narrow the terminal, each command is on a line of its own, as
    doctor --json has it (the table only refers to it)."""
    db = fill_home(hermes_home, n=600)
    smash_middle_leaves(db, "messages")
    monkeypatch.setenv("COLUMNS", "60")
    doc = json.loads(CliRunner().invoke(cli, ["--home", str(hermes_home), "doctor",
                                              "--json"]).stdout)
    out = CliRunner().invoke(cli, ["--home", str(hermes_home), "doctor"]).output
    printed = [ln.split(") ", 1)[1] if ln.startswith("(") else ln.split("then: ", 1)[1]
               for ln in out.splitlines() if re.match(r"^(\(\d+\) |    then: )", ln)]
    for f in doc["findings"]:
        for step in (f["fix"] or "").split("; then "):
            if step:
                assert step in printed, (step, out)
    assert all(len(shlex.split(p)) > 1 for p in printed)


def test_invoked_as_hermes_state_the_commands_say_so(hermes_home: Path) -> None:
    """Beside Hermes Agent (whose script is `hermes`) a printed `hermes ...`
    would run the other program: the commands use the name we were run by."""
    db = fill_home(hermes_home, n=600)
    smash_middle_leaves(db, "messages")
    script = Path(sys.executable).with_name("hermes-state")
    res = subprocess.run([str(script), "--home", str(hermes_home), "sessions", "show",
                          "shared"], capture_output=True, text=True, timeout=120)
    nexts = [ln for ln in res.stderr.splitlines() if ln.startswith("Next: ")]
    assert nexts and all(ln.startswith("Next: hermes-state --home ") for ln in nexts), res.stderr


# -- PostgreSQL: every command printed while the store is a PostgreSQL URL runs,
# in the state that printed it, and carries that URL --

_PRINTED = re.compile(r"(?:^|\s)(hermes --home \S.*?)\s*$", re.M)


def printed_commands(output: str) -> list[str]:
    """Every hermes command line an output prints (Next:, Run:, Earlier:, a
    hint on its own line, doctor's fixes below its table)."""
    return _PRINTED.findall(output)


def run_every_printed(home: Path, url: str, *args: str) -> list[str]:
    """Run ``args`` against the store at ``url``, then every command it printed;
    returns them. None may be a usage error, and each names this store."""
    res = CliRunner().invoke(cli, ["--home", str(home), "--store-url", url, *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    commands = printed_commands(res.output)
    for command in commands:
        words = shlex.split(command)
        assert words[words.index("--store-url") + 1] == url, command
        out = CliRunner().invoke(cli, words[1:])
        assert out.exit_code != 2, f"{command} was called wrongly:\n{out.output}"
        assert out.exception is None or isinstance(out.exception, SystemExit), out.output
    return commands


def pg_doctor_first(home: Path, url: str) -> str:
    return shlex.join(["hermes", "--home", str(home), "--store-url", url, "doctor"])


def test_pg_healthy_store_prints_commands_that_run_there(hermes_home: Path,
                                                         pg_databases) -> None:  # type: ignore[no-untyped-def]
    url = pg_databases.create()
    with SessionDB.open(url=url) as store:
        store.create_session("long", source="test")
        store.append_messages("long", [{"role": "user", "content": f"alpha line {i}"}
                                       for i in range(120)])
        store.create_session("old", source="old")
    seen = []
    for args in (("doctor",), ("sessions", "list"), ("sessions", "show", "long", "--limit", "50"),
                 ("sessions", "search", "alpha"), ("sessions", "prune", "--source", "old"),
                 ("sessions", "optimize"), ("chat", "--offline", "-q", "hello")):
        seen += run_every_printed(hermes_home, url, *args)
    assert any("--before" in c for c in seen) and any("--around" in c for c in seen), seen
    assert any(c.endswith(" export long") for c in seen), seen
    for sqlite_file_only in ("prune", "optimize"):  # said plainly, not an unexpected error
        res = CliRunner().invoke(cli, ["--home", str(hermes_home), "--store-url", url,
                                       "sessions", sqlite_file_only])
        assert res.exit_code == 1 and "PostgreSQL" in res.output, res.output
        assert "unexpected" not in res.output and "no store at" not in res.output
    assert walk(hermes_home, pg_doctor_first(hermes_home, url)).ended == "healthy"


@pytest.mark.parametrize("state", ["pending", "empty"])
def test_pg_store_needing_migrations_walks_to_healthy(hermes_home: Path, pg_databases,  # type: ignore[no-untyped-def]
                                                      state: str) -> None:
    import psycopg
    url = pg_databases.create(schema=state != "empty")
    if state == "pending":
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DELETE FROM migrations WHERE name = 'p015_nul_text'")
    w = walk(hermes_home, pg_doctor_first(hermes_home, url))
    assert w.ended == "healthy" and "sessions import-spool" in w.steps[1], w
    assert shlex.split(w.steps[1])[3:5] == ["--store-url", url], w


def test_pg_newer_schema_ends_at_upgrading(hermes_home: Path, pg_databases) -> None:  # type: ignore[no-untyped-def]
    import psycopg
    url = pg_databases.create()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO migrations(name, applied_at) VALUES ('p999_future', 0)")
    (first,) = run_every_printed(hermes_home, url, "sessions", "list")
    w = walk(hermes_home, first)
    assert w.ended == "person: upgrade hermes on this host", w


def test_pg_unreachable_server_ends_at_checking_it(hermes_home: Path) -> None:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"postgresql://u@127.0.0.1:{s.getsockname()[1]}/db"
    for args in (("sessions", "list"), ("chat", "--offline", "-q", "hello"), ("doctor",)):
        run_every_printed(hermes_home, url, *args)
    w = walk(hermes_home, pg_doctor_first(hermes_home, url))
    assert w.ended.startswith("person: check that the server runs") and url in w.ended, w
