"""Every file the project writes goes through `sessiondb.base.outfile` (temp,
fsync, rename, 0600; or its whole-line append), so a crash never leaves a
torn file that blocks a rerun. A scan of the source fails on any other
write-mode open; the few other writers are listed with the reason each is
crash-safe its own way. Real kills: kill -9 mid-write of the recover report
and of a replaced output leaves no file or the previous one."""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sessiondb import SessionDB
from sessiondb.base.outfile import append_lines

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("sessiondb", "recovery", "agent", "cli")
SCRATCH = "scratch in a new private directory a rerun never reads (removed on exit, or " \
          "listed by doctor as leftover scratch)"
FOR_SQLITE = "creates the empty 0600 file SQLite then fills; SQLite's own journal and " \
             "sync make those writes crash-safe"
ALLOWED = {
    ("sessiondb/base/outfile.py", "*"): "the crash-safe path itself",
    ("sessiondb/base/paths.py", "create_private_file"): FOR_SQLITE,
    ("recovery/output/foreign_write.py", "_create_exclusive"): FOR_SQLITE,
    ("recovery/source/liveread.py", "copy_live"): FOR_SQLITE + " (backups rename it into place)",
    ("recovery/repairs/online_backup.py", "write_manifest"):
        "a backup's manifest: written under a temp name that carries the pid (so a kill "
        "leaves a file the next create recognises and removes), then fsynced and linked "
        "into place by outfile.publish",
    ("sessiondb/spool/spool_write.py", "_open_locked_for_append"):
        "the spool's append log: under a flock, fsynced per append, a failed append cut "
        "back; a torn last line (kill -9) is skipped on import (tests/reliability/spool_crash)",
    ("sessiondb/importers/spool_import.py", "_trim"): "a same-size ftruncate: frees blocks, writes no data",
    ("sessiondb/spool/spool_reserve.py", "ensure"): "preallocates the reserve: no data",
    ("agent/memory/homefiles.py", "locked"): "the lock file for flock: never holds data",
    ("sessiondb/importers/foreign_copy.py", "_copy_file"): SCRATCH,
    ("sessiondb/importers/import_spill.py", "Spill.__init__"): SCRATCH,
    ("sessiondb/importers/log_lines.py", "RecordFile.__init__"): SCRATCH,
    ("sessiondb/importers/log_prescan.py", "serve"): SCRATCH,
    ("recovery/source/snapshot.py", "_hash_file"): SCRATCH,
    ("recovery/source/headers.py", "repair_header"): "patches the header of a private copy " + SCRATCH,
    ("cli/demo.py", "damage_copy"): "the demo copies its own demo store and damages the "
                                    "copy on purpose",
    ("cli/commands/transfer.py", "*devnull"): "opens /dev/null",
}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _mode(call: ast.Call, index: int) -> str | None:
    arg = call.args[index] if len(call.args) > index else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _writes(call: ast.Call) -> str | None:
    """What kind of write this call is, or None."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
    if name == "open" and owner == "":
        mode = _mode(call, 1)
        return f"open({mode!r})" if mode and set(mode) & set("wax+") else None
    if name == "fdopen" and owner == "os":
        mode = _mode(call, 1)
        return f"os.fdopen({mode!r})" if mode and set(mode) & set("wax+") else None
    if name == "open" and owner == "os":
        flags = {n.attr for n in ast.walk(call) if isinstance(n, ast.Attribute)}
        return "os.open(" + "|".join(sorted(flags & WRITE_FLAGS)) + ")" \
            if flags & WRITE_FLAGS else None
    if name in ("write_text", "write_bytes") and owner != "homefiles":
        return f".{name}()"
    if owner == "shutil" and name.startswith("copy"):
        return f"shutil.{name}()"
    return None


def file_writes(root: Path) -> list[tuple[str, str, int, str]]:
    """(file, function, line, kind) for each write-mode open under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()

        def visit(node: ast.AST, where: str) -> None:
            for child in ast.iter_child_nodes(node):
                inner = where
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    inner = f"{where}.{child.name}" if where else child.name
                if isinstance(child, ast.Call) and (kind := _writes(child)):
                    out.append((rel, where, child.lineno, kind))
                visit(child, inner)
        visit(ast.parse(path.read_text(), str(path)), "")
    return out


def unlisted_in(pkg: str) -> list[str]:
    out = []
    for rel, func, line, kind in file_writes(ROOT / pkg):
        key = f"{pkg}/{rel}"
        text = (ROOT / pkg / rel).read_text().splitlines()[line - 1]
        if (key, "*") in ALLOWED or (key, func) in ALLOWED or (
                (key, "*devnull") in ALLOWED and "devnull" in text):
            continue
        out.append(f"{rel}:{line} in {func or '<module>'}: {kind}")
    return out


def test_every_write_goes_through_outfile_or_is_listed_with_a_reason() -> None:
    bad = [f"{pkg}/{b}" for pkg in PACKAGES for b in unlisted_in(pkg)]
    assert not bad, "write these through sessiondb.base.outfile (private_output / append_lines), " \
        "or list them in ALLOWED with why they are crash-safe:\n" + "\n".join(bad)


def test_allow_list_has_no_stale_entries() -> None:
    hits = {(f"{pkg}/{rel}", func) for pkg in PACKAGES
            for rel, func, _line, _kind in file_writes(ROOT / pkg)}
    files = {f for f, _ in hits}
    stale = [k for k in ALLOWED if not (k in hits or (k[1].startswith("*") and k[0] in files))]
    assert not stale, f"ALLOWED names writers that no longer exist: {stale}"


def test_scan_finds_each_kind_of_write(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        import os, shutil
        def a(p):
            open(p, "w")
            open(p, "rb")
        def b(p):
            os.fdopen(os.open(p, os.O_WRONLY | os.O_CREAT), "wb")
        class C:
            def c(self, p):
                p.write_text("x")
                shutil.copyfile(p, p)
        """))
    assert [(f, w, k) for f, w, _l, k in file_writes(tmp_path)] == [
        ("m.py", "a", "open('w')"), ("m.py", "b", "os.fdopen('wb')"),
        ("m.py", "b", "os.open(O_CREAT|O_WRONLY)"), ("m.py", "C.c", ".write_text()"),
        ("m.py", "C.c", "shutil.copyfile()")]


# -- kill -9 mid-write --------------------------------------------------------

KILL_ON_FSYNC = """
import os, signal, sys
real = os.fsync
def fsync(fd):
    # SIGKILL ourselves when the report's bytes are written but not yet
    # durable or in place: the worst moment for a torn or half-made report.
    name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
    if sys.argv[1] in name:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(fd)
os.fsync = fsync
from hstate_recovery.salvage.pipeline import recover
recover(sys.argv[2], sys.argv[3], report_path=sys.argv[4])
"""


def _kill_during_report(source: Path, output: Path, report: Path, needle: str) -> None:
    run = subprocess.run([sys.executable, "-c", KILL_ON_FSYNC, needle, str(source),
                          str(output), str(report)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_kill_mid_report_write_leaves_no_report_and_the_rerun_works(
        hermes_home: Path, tmp_path: Path) -> None:
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        db.append_messages("s1", [{"role": "user", "content": f"m{i}"} for i in range(20)])
    source, report = hermes_home / "state.db", tmp_path / "report.json"
    # The report itself or its temp file (.report.json.*.tmp) is being synced.
    _kill_during_report(source, tmp_path / "new1.db", report, report.name)
    assert not report.exists()  # not torn, not half-synced: absent
    left = list(tmp_path.glob(f".{report.name}.*.tmp"))
    assert len(left) == 1 and oct(left[0].stat().st_mode & 0o777) == "0o600"
    from hstate_recovery.salvage.pipeline import recover
    result = recover(source, tmp_path / "new2.db", report_path=report)
    doc = json.loads(report.read_text())
    assert doc["outcome"] == result.outcome == "recovered"
    assert doc["output"] == str(tmp_path / "new2.db")
    assert oct(report.stat().st_mode & 0o777) == "0o600"


KILL_MID_WRITE = """
import os, signal, sys
from sessiondb.base.outfile import private_output
with private_output(sys.argv[1], force=True) as f:
    f.write("new half")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_kill_mid_replace_leaves_the_previous_file(tmp_path: Path) -> None:
    """What the repair ledger, memories, skills and exports with --force do."""
    target = tmp_path / "ledger.json"
    previous = '{"old": {"failures": 2, "last": 1.0}}\n'
    target.write_text(previous)
    run = subprocess.run([sys.executable, "-c", KILL_MID_WRITE, str(target)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert target.read_text() == previous
    from hstate_recovery.repairs.inplace import Ledger
    ledger = Ledger(target)
    assert ledger.record_failure("fp", "boom") == 1  # the rerun writes over it
    assert ledger.load()["fp"]["failures"] == 1 and ledger.load()["old"]["failures"] == 2
    assert oct(target.stat().st_mode & 0o777) == "0o600"


def test_append_closes_a_torn_line_before_the_next_record(tmp_path: Path) -> None:
    log = tmp_path / "unsaved.jsonl"
    log.write_text('{"role": "user"}\n{"role": "assi')  # a crash tore the last append
    append_lines(log, ['{"role": "user", "content": "next"}'])
    lines = log.read_text().splitlines()
    assert lines == ['{"role": "user"}', '{"role": "assi', '{"role": "user", "content": "next"}']
    fresh = tmp_path / "fresh.jsonl"
    append_lines(fresh, ["a", "b"])
    assert fresh.read_text() == "a\nb\n" and oct(fresh.stat().st_mode & 0o777) == "0o600"


def test_publish_moves_a_finished_file_into_place_and_never_over_another(
        tmp_path: Path) -> None:
    """The last step of backups and containment's rescued copies, which
    SQLite fills under a temp name."""
    from sessiondb.base.outfile import OutputExists, publish, temp_name
    target = tmp_path / "state-1.db"
    tmp = temp_name(target)
    tmp.write_bytes(b"copy")
    publish(tmp, target)
    assert target.read_bytes() == b"copy" and not tmp.exists()
    again = temp_name(target)
    again.write_bytes(b"other")
    with pytest.raises(OutputExists):
        publish(again, target)
    assert target.read_bytes() == b"copy" and again.read_bytes() == b"other"
