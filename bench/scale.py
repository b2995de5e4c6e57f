"""Scale benchmark: a realistic store of N messages, and what costs what on it.

    python bench/scale.py [--messages 100000] [--long 100000] [--sqlite3 PATH]
                          [--skip-recover] [--only PARTS] [--json OUT] [--work DIR]

Builds, in one run (each measurement is its own process, so its peak RSS is
its own; wall times are one run each):

1. a hermes JSONL export of N messages (bench/scale_data.py: 200 B - 4 KB
   text, a tool call and its result every fifth turn, a 1 MB tool output
   every 25,000 messages), and the time `sessions export` of the imported
   store takes (the peer of the import);
2. `sessions import` of it into a fresh home: msg/s overall, and split into
   the rows (checked, committed, searchable through the exact tail) and the
   search index catch-up the import drives after them in short batches;
3. `doctor` (default) and `doctor --full`;
4. `recover --inspect-only` (the CLI, its quick_check stopped after 20 s,
   and in-process without that deadline, by phase) beside `PRAGMA
   quick_check` on the same file;
5. `sessions show` (JSON, default page) and the API's `get_messages`
   (tail 500) of a separate store holding one session of --long messages;
6. prune half of the sessions (the older half) + `sessions optimize`: the
   bytes given back against the bytes those sessions take (the whole store
   minus a store built from the kept half alone, both optimized);
7. `recover --output` of a healthy copy beside `.recover` piped into a new
   file (when a sqlite3 shell with .recover is found), RSS and time; then the
   same pair on a copy with 1% of its pages overwritten with random bytes
   (seeded), with the messages each output holds exactly as the healthy
   store had them ("attributed": every column equal, joined by id).
   ``--only recover`` builds the store and runs only this step.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402

from bench.scale_data import write_export  # noqa: E402

HERMES = [sys.executable, "-c", "import sys; from hstate_cli.main import main; sys.exit(main())"]
MEASURE = r"""
import json, resource, subprocess, sys, time
t = time.monotonic()
done = subprocess.run(sys.argv[2], shell=True) if sys.argv[1] == "sh" else subprocess.run(sys.argv[2:])
print(json.dumps({"rc": done.returncode, "seconds": round(time.monotonic() - t, 3),
                  "rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}),
      file=sys.stderr)
"""


def measured(argv: list[str] | str, *, out: Path | None = None) -> dict[str, Any]:
    """Run a command in a fresh wrapper: its wall time and its peak RSS."""
    args = ["sh", argv] if isinstance(argv, str) else ["argv", *argv]
    with open(out or os.devnull, "w") as sink:
        done = subprocess.run([sys.executable, "-c", MEASURE, *args], cwd=ROOT, stdout=sink,
                              stderr=subprocess.PIPE, text=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


def hermes(home: Path, *args: str, out: Path | None = None) -> dict[str, Any]:
    return measured([*HERMES, "--home", str(home), *args], out=out)


def bundle_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def find_sqlite3(given: Path | None) -> Path | None:
    """A sqlite3 shell whose .recover works (it needs SQLITE_ENABLE_DBPAGE_VTAB;
    Debian's 3.40 lists the command but fails): --sqlite3, the one bench/salvage.py
    builds into bench/.build/, or the one on PATH."""
    probe_db = Path(tempfile.mkdtemp()) / "probe.db"
    conn = apsw.Connection(str(probe_db))
    conn.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
    conn.close()
    try:
        for cand in [given, ROOT / "bench" / ".build" / "sqlite3", shutil.which("sqlite3")]:
            if cand and Path(cand).exists():
                done = subprocess.run([str(cand), str(probe_db), ".recover"],
                                      capture_output=True, text=True)
                if done.returncode == 0 and "INSERT" in done.stdout and "error" not in done.stderr:
                    return Path(cand)
    finally:
        shutil.rmtree(probe_db.parent, ignore_errors=True)
    return None


def import_split(home: Path, export: Path) -> dict[str, Any]:
    """The import in-process, as the CLI runs it (no background indexer), timing
    the rows (checked, committed, searchable through the tail) apart from the
    index catch-up the import drives after them (importer._catch_up: the
    batches, or waiting for the parallel builders and copying their index in),
    and the CPU seconds of the import and of its builder processes."""
    code = ("import json, sys, time\nfrom sessiondb import SessionDB\n"
            "from sessiondb.importers import importer\n"
            "spent = {}\ncatch = importer._catch_up\n"
            "def timed(*a):\n    t = time.monotonic(); catch(*a)\n"
            "    spent['index'] = time.monotonic() - t\n"
            "importer._catch_up = timed\n"
            "t = time.monotonic()\nwith SessionDB.open(sys.argv[1], background_index=False) as db:\n"
            "    r = importer.import_export_file(db, sys.argv[2])\n"
            "import resource\ncpu = {w: round(u.ru_utime + u.ru_stime, 2) for w, u in (('self',"
            " resource.getrusage(resource.RUSAGE_SELF)), ('children',"
            " resource.getrusage(resource.RUSAGE_CHILDREN)))}\n"
            "print(json.dumps({'seconds': time.monotonic() - t, 'index_seconds': spent.get('index', 0),"
            " 'messages': r.messages_added, 'search_index': r.search_index,"
            " 'index_build': getattr(r, 'index_build', 'batches'), 'cpu_seconds': cpu}))\n")
    done = subprocess.run([sys.executable, "-c", code, str(home), str(export)], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout)


def inspect_phases(db: Path) -> dict[str, Any]:
    """`hstate_recovery.inspect` in-process with no quick_check deadline (the CLI's is
    20 s, which a loaded machine reaches at 100k), timing each phase."""
    code = ("import json, sys, time\nfrom hstate_recovery import inspect\n"
            "marks = []\nt = time.monotonic()\n"
            "r = inspect(sys.argv[1], quick_seconds=1e9,"
            " progress=lambda p: marks.append((p, time.monotonic())))\n"
            "end = time.monotonic()\nmarks.append(('end', end))\n"
            "print(json.dumps({'seconds': round(end - t, 3), 'verdict': r.verdict,"
            " 'timed_out': r.quick_check['timed_out'], 'phases': {p: round(marks[i + 1][1] - m, 3)"
            " for i, (p, m) in enumerate(marks[:-1])}}))\n")
    done = subprocess.run([sys.executable, "-c", code, str(db)], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout)


def quick_check_seconds(db: Path) -> float:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    t = time.monotonic()
    conn.execute("PRAGMA quick_check").fetchall()
    conn.close()
    return round(time.monotonic() - t, 3)


def prune_half(home: Path) -> dict[str, Any]:
    """Prune the older half of the sessions, then optimize; bytes before/after."""
    code = ("import json, sys\nfrom sessiondb import SessionDB, maintenance\n"
            "with SessionDB.open(sys.argv[1]) as db:\n"
            "    with db._read() as c:\n"
            "        times = sorted(r[0] for r in c.execute('SELECT coalesce(ended_at, updated_at) FROM sessions'))\n"
            "    cut = times[len(times) // 2]\n"
            "import time\nt = time.monotonic()\n"
            "with SessionDB.open(sys.argv[1], clock=lambda: cut) as db:\n"
            "    plan = maintenance.prune(db.core, maintenance.PruneFilter(older_than_s=0))\n"
            "    seconds = round(time.monotonic() - t, 3)\n"
            "    kept = [s.id for s in db.list_sessions(archived=None, limit=10**7)]\n"
            "print(json.dumps({'pruned': plan.deleted_sessions, 'messages': plan.deleted_messages,"
            " 'estimate': plan.bytes_estimate, 'seconds': seconds, 'kept': kept}))\n")
    done = subprocess.run([sys.executable, "-c", code, str(home)], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--long", type=int, default=100_000,
                    help="messages in the long session (0: skip that part)")
    ap.add_argument("--sqlite3", type=Path)
    ap.add_argument("--skip-recover", action="store_true")
    ap.add_argument("--work", type=Path,
                    help="directory for the stores, kept after the run; a store already built "
                         "there for the same --messages is reused (default: a temp dir, removed)")
    ap.add_argument("--json", type=Path, help="write the results here too")
    ap.add_argument("--only", default=",".join(PARTS),
                    help=f"comma-separated parts to run (default all: {','.join(PARTS)}); "
                         "the export and the import always run (``import`` on a reused "
                         "--work: the kept export is imported again)")
    a = ap.parse_args()
    a.only = set(a.only.split(","))
    if a.work:
        work = a.work
        work.mkdir(mode=0o700, parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="hermes-scale-"))
    res: dict[str, Any] = {"messages": a.messages, "long": a.long, "work": str(work)}
    try:
        run_all(a, work, res)
    finally:
        print(json.dumps(res, indent=1))
        if a.json:
            a.json.write_text(json.dumps(res, indent=1) + "\n")
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


def step(res: dict[str, Any], name: str, value: Any) -> None:
    res[name] = value
    print(f"{name}: {json.dumps(value)}", file=sys.stderr, flush=True)


PARTS = ("doctor", "inspect", "recover", "long", "reclaim")


def run_all(a: argparse.Namespace, work: Path, res: dict[str, Any]) -> None:
    res["load_average_start"] = os.getloadavg()
    home = work / "home"
    built = work / "built.json"  # written once the store is complete: a rerun reuses it
    if built.exists() and json.loads(built.read_text())["messages"] == a.messages:
        res["build"] = {**json.loads(built.read_text()), "reused": True}
        if "import" in a.only:  # the kept export imported again, into a fresh home
            reimport(work, res)
    else:
        shutil.rmtree(home, ignore_errors=True)
        build(a, work, home, res)
        built.write_text(json.dumps({k: res[k] for k in
                                     ("messages", "export_file", "import", "export_peer")}))
    db = home / "state.db"
    step(res, "store_bytes", bundle_bytes(db))
    run_parts(a, home, db, work, res)


def build(a: argparse.Namespace, work: Path, home: Path, res: dict[str, Any]) -> None:
    """The export of N messages, its import (the store every part runs on), and
    the export of that store (the import's peer)."""
    export = work / "export.jsonl"
    t = time.monotonic()
    step(res, "export_file", {**write_export(export, a.messages),
                              "generate_seconds": round(time.monotonic() - t, 3)})
    import_step(home, export, res)
    step(res, "export_peer", hermes(home, "sessions", "export", "--all", "-o",
                                    str(work / "re.jsonl")))
    (work / "re.jsonl").unlink(missing_ok=True)


def import_step(home: Path, export: Path, res: dict[str, Any]) -> None:
    load = os.getloadavg()
    split = import_split(home, export)
    step(res, "import", {**split, "msg_per_s": round(split["messages"] / split["seconds"]),
                         "rows_msg_per_s": round(split["messages"] / max(
                             split["seconds"] - split["index_seconds"], 1e-9)),
                         "load_average_before": load, "load_average": os.getloadavg()})


def reimport(work: Path, res: dict[str, Any]) -> None:
    """``--only import`` on a reused --work: the import alone, again (the
    export kept from the build, a fresh home removed after)."""
    home = work / "reimport"
    shutil.rmtree(home, ignore_errors=True)
    try:
        import_step(home, work / "export.jsonl", res)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_parts(a: argparse.Namespace, home: Path, db: Path, work: Path,
              res: dict[str, Any]) -> None:
    if "doctor" in a.only:
        step(res, "doctor_default", hermes(home, "doctor", "--json"))
        step(res, "doctor_full", hermes(home, "doctor", "--full", "--json"))
    if "inspect" in a.only:
        insp = hermes(home, "sessions", "recover", "--source", str(db), "--inspect-only",
                      "--json", out=work / "inspect.json")
        report = json.loads((work / "inspect.json").read_text())
        step(res, "inspect_only", {**insp, "verdict": report["verdict"],
                                   "quick_check": report["quick_check"],
                                   "fts": [(f["name"], f["method"], f["probes"])
                                           for f in report["fts"]],
                                   "elapsed_s": report["elapsed_s"]})
        step(res, "inspect_unbounded", inspect_phases(db))
        step(res, "quick_check_seconds", quick_check_seconds(db))
        step(res, "inspect_over_quick_check", round(
            res["inspect_unbounded"]["seconds"] / res["quick_check_seconds"], 2))
    if not a.skip_recover and "recover" in a.only:
        recover_pair(a, home, db, work, res)
    if a.long and "long" in a.only:
        long_session(a, work, res)
    if "reclaim" in a.only:
        (work / "built.json").unlink(missing_ok=True)  # the prune changes the store: never reused
        reclaim(home, db, work, res)


def recover_pair(a: argparse.Namespace, home: Path, db: Path, work: Path,
                 res: dict[str, Any]) -> None:
    step(res, "recover_output", {**hermes(home, "sessions", "recover", "--source", str(db),
                                          "--output", str(work / "recovered.db"), "--json"),
                                 "attributed": attributed(db, work / "recovered.db")})
    shutil.rmtree(work / "recovered.db", ignore_errors=True)
    for p in work.glob("recovered.db*"):
        p.unlink()
    cli = find_sqlite3(a.sqlite3)
    if cli is None:
        step(res, "dot_recover", "no sqlite3 shell with .recover found (--sqlite3 PATH)")
        return
    copy = work / "copy.db"
    shutil.copy(db, copy)
    step(res, "dot_recover", {**measured(f"'{cli}' '{copy}' .recover | '{cli}' '{work}/dot.db'"),
                              "sqlite3": str(cli)})
    copy.unlink()
    (work / "dot.db").unlink(missing_ok=True)
    damaged_pair(cli, home, db, work, res)


def damage_pages(src: Path, dst: Path, fraction: float = 0.01, seed: int = 7) -> int:
    """Copy ``src`` and overwrite ``fraction`` of its pages (never page 1) with
    random bytes; returns how many pages were hit."""
    import random
    shutil.copy(src, dst)
    conn = apsw.Connection(str(src), flags=apsw.SQLITE_OPEN_READONLY)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    pages = dst.stat().st_size // page_size
    rng = random.Random(seed)
    hit = rng.sample(range(2, pages + 1), max(1, round(pages * fraction)))
    with open(dst, "r+b") as f:
        for p in hit:
            f.seek((p - 1) * page_size)
            f.write(rng.randbytes(page_size))
    return len(hit)


def attributed(truth: Path, out: Path) -> int:
    """Messages of ``out`` equal in every column to the row with their id in ``truth``."""
    if not out.exists():
        return 0
    conn = apsw.Connection(str(truth), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.execute("ATTACH ? AS o", (str(out),))  # read-only, as the main file
        cols = [r[1] for r in conn.execute("PRAGMA main.table_info(messages)")]
        on = " AND ".join(f"s.{c} IS o.{c}" for c in cols)
        return conn.execute(f"SELECT count(*) FROM main.messages AS s JOIN o.messages AS o "
                            f"ON s.id = o.id AND {on}").fetchone()[0]
    except apsw.Error:
        return 0
    finally:
        conn.close()


def damaged_pair(cli: Path, home: Path, db: Path, work: Path, res: dict[str, Any]) -> None:
    damaged = work / "damaged.db"
    hit = damage_pages(db, damaged)
    out = work / "rec-damaged.db"
    ours = hermes(home, "sessions", "recover", "--source", str(damaged), "--output", str(out),
                  "--allow-partial", "--json")
    ours["attributed"] = attributed(db, out)
    for p in work.glob("rec-damaged.db*"):
        p.unlink()
    theirs = measured(f"'{cli}' '{damaged}' .recover | '{cli}' '{work}/dot-damaged.db'")
    theirs["attributed"] = attributed(db, work / "dot-damaged.db")
    (work / "dot-damaged.db").unlink(missing_ok=True)
    damaged.unlink()
    step(res, "damaged_1pct", {"pages_hit": hit, "recover_output": ours, "dot_recover": theirs,
                               "time_ratio": round(ours["seconds"] / theirs["seconds"], 2)})


def long_session(a: argparse.Namespace, work: Path, res: dict[str, Any]) -> None:
    export = work / "long.jsonl"
    write_export(export, a.long, seed=11, single_session=True)
    home = work / "long"
    import_split(home, export)
    export.unlink()
    sid = "20250101_000000_00000000"
    step(res, "show_long_session", hermes(home, "sessions", "show", sid, "--json"))
    code = ("import resource, sys, time\nfrom sessiondb import SessionDB\n"
            "t = time.monotonic()\nwith SessionDB.open(sys.argv[1]) as db:\n"
            "    n = len(db.get_messages(sys.argv[2], tail=500))\n"
            "print(n, round(time.monotonic() - t, 3), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n")
    out = subprocess.run([sys.executable, "-c", code, str(home), sid], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    step(res, "get_messages_tail_500", {"rows": int(out[0]), "seconds": float(out[1]),
                                        "rss_mb": int(out[2])})
    shutil.rmtree(home, ignore_errors=True)


def reclaim(home: Path, db: Path, work: Path, res: dict[str, Any]) -> None:
    before = bundle_bytes(db)
    pruned = prune_half(home)
    kept = pruned.pop("kept")
    opt = hermes(home, "sessions", "optimize", "--json", out=work / "opt.json")
    opt["report"] = json.loads((work / "opt.json").read_text())
    after = bundle_bytes(db)
    # the reference: the kept half alone, imported into a fresh store and optimized the same way
    ref_home = work / "ref"
    hermes(home, "sessions", "export", *kept, "-o", str(work / "kept.jsonl"))
    import_split(ref_home, work / "kept.jsonl")
    hermes(ref_home, "sessions", "optimize", "--json")
    ref = bundle_bytes(ref_home / "state.db")
    their = before - ref
    step(res, "prune_optimize", {"pruned": pruned, "optimize": opt, "bytes_before": before,
                                 "bytes_after": after, "kept_alone_bytes": ref,
                                 "given_back": before - after, "their_bytes": their,
                                 "share_given_back": round((before - after) / their, 3)
                                 if their > 0 else None})


if __name__ == "__main__":
    main()
