"""Corruption corpus: damage stores in >= 30 ways, inspect and recover each,
and compare with ground truth. Prints one table row per class.

For every class: the inspect verdict is one allowed, the recover outcome is
one allowed, the output (when one is expected) holds exactly the expected
id -> text rows and passed verification, no output is written when none is
expected, the source bundle's bytes are unchanged, and the JSON report holds
no message text. ``carver`` marks classes whose SQL-lane result is short of
the rows still on disk: without the carver lane they are held to what the
SQL lanes reach exactly, with it (``carve`` in `hstate_recovery.LANES`) to every
row still on disk.

``python -m tests.reliability.corpus [--only NAME]``
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import apsw

import hstate_recovery
from tests.helpers.damage import bundle_hashes

from . import corpus_build
from .corpus_classes import CLASSES, RANDOM_RATES, Ctx, Expect, random_pages


@dataclass
class ClassResult:
    name: str
    verdict: str = ""
    outcome: str = ""
    truth: int = 0
    expected: int | None = None
    recovered: int | None = None
    verified: bool | None = None
    carver: bool = False
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def build_ctx(directory: Path) -> Ctx:
    return Ctx(corpus_build.build_pristine(directory / "pristine"),
               corpus_build.build_wal_bundle(directory / "wal"),
               corpus_build.build_other(directory / "other"))


# The page carver is recover's last lane ("carve") unless a run leaves it out.
CARVER = "carve" in hstate_recovery.LANES


def tighten_for_carver(exp: Expect) -> None:
    """With the carver lane every row still on an intact page comes back:
    the ground truth itself, not only what the SQL lanes could reach."""
    exp.expected = dict(exp.truth)
    exp.outcomes = frozenset({"partial", "recovered"})
    exp.verdicts = exp.verdicts | {"structural"}


def _output_texts(path: Path) -> dict[int, str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(conn.execute("SELECT id, content FROM messages").fetchall())
    finally:
        conn.close()


def _compare(r: ClassResult, exp: Expect, got: dict[int, str]) -> None:
    assert exp.expected is not None
    if got != exp.expected:
        missing = sorted(set(exp.expected) - set(got))
        extra = sorted(set(got) - set(exp.expected))
        wrong = sorted(i for i in set(got) & set(exp.expected) if got[i] != exp.expected[i])
        r.problems.append(f"rows differ: {len(missing)} missing {missing[:5]}, "
                          f"{len(extra)} extra {extra[:5]}, {len(wrong)} wrong text")


def run_class(case, ctx: Ctx, work: Path, lanes: list[str] | None = None) -> ClassResult:
    """Damage, inspect, recover (all lanes, or ``lanes``) and compare."""
    r = ClassResult(case.__name__)
    started = time.monotonic()
    exp = case(ctx, work / "src")
    source = work / "src" / "state.db"
    before = bundle_hashes(source)
    r.carver = exp.allowed is None and (set(exp.expected or {}) != set(exp.truth))
    if r.carver and (CARVER if lanes is None else "carve" in lanes):
        tighten_for_carver(exp)
    r.truth, r.expected = len(exp.truth), None if exp.expected is None else len(exp.expected)
    r.verdict = hstate_recovery.inspect(source).verdict
    (work / "out").mkdir(mode=0o700)
    report = hstate_recovery.recover(source, work / "out" / "new.db", allow_partial=True,
                              report_path=work / "out" / "report.json", lanes=lanes)
    r.outcome = report.outcome
    if r.verdict not in exp.verdicts:
        r.problems.append(f"verdict {r.verdict}, expected {sorted(exp.verdicts)}")
    if r.outcome not in exp.outcomes:
        r.problems.append(f"outcome {r.outcome}, expected {sorted(exp.outcomes)}")
    if bundle_hashes(source) != before:
        r.problems.append("the source bundle changed")
    _check_output(r, exp, report)
    text = (work / "out" / "report.json").read_text()
    if any(t in text for t in list(exp.truth.values())[:50]):
        r.problems.append("the report contains message text")
    r.seconds = round(time.monotonic() - started, 2)
    return r


def _check_output(r: ClassResult, exp: Expect, report: hstate_recovery.RecoveryReport) -> None:
    out = Path(report.output) if report.output else None
    if out is not None and out.exists():
        got = _output_texts(out)
        r.recovered = len(got)
        r.verified = bool(report.verification.get("ok"))
        if not r.verified:
            r.problems.append(f"output not verified: {report.verification}")
        if exp.expected is not None:
            _compare(r, exp, got)
        elif exp.allowed is not None and not set(got.items()) <= exp.allowed:
            r.problems.append("output holds rows that were never in either store")
        elif exp.allowed is None:
            r.problems.append("an output was written where none was expected")
    elif exp.expected:
        r.problems.append("no output written")


def run(directory: Path, only: str | None = None, seeds: int = 0) -> list[ClassResult]:
    """Every class (or ``only`` one); ``seeds`` more random-damage layouts per rate."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ctx = build_ctx(directory / "build")
    results = []
    extra = [random_pages(rate, 1000 + s, suffix=f"_seed{1000 + s}")
             for s in range(seeds) for rate in RANDOM_RATES]
    for case in CLASSES + extra:
        if only and case.__name__ != only:
            continue
        work = directory / "classes" / case.__name__
        shutil.rmtree(work, ignore_errors=True)
        results.append(run_class(case, ctx, work))
        shutil.rmtree(work, ignore_errors=True)
    return results


def table(results: list[ClassResult]) -> str:
    head = (f"{'class':34}{'verdict':15}{'outcome':16}{'truth':>6}{'expect':>7}{'got':>6}"
            f"{'verified':>9}{'carver':>7}  ok")
    lines = [head]
    for r in results:
        lines.append(f"{r.name:34}{r.verdict:15}{r.outcome:16}{r.truth:6}"
                     f"{'-' if r.expected is None else r.expected:>7}"
                     f"{'-' if r.recovered is None else r.recovered:>6}"
                     f"{'-' if r.verified is None else str(r.verified):>9}"
                     f"{'yes' if r.carver else '':>7}  {'ok' if not r.problems else 'FAIL'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seeds", type=int, default=0,
                    help="extra random-page-damage layouts per damage rate")
    args = ap.parse_args(argv)
    results = run(args.dir or Path(tempfile.mkdtemp(prefix="hermes-corpus-")), args.only,
                  args.seeds)
    print(table(results))
    for r in results:
        for p in r.problems:
            print(f"{r.name}: {p}")
    if args.json:
        print(json.dumps([vars(r) for r in results], indent=2))
    return 1 if any(r.problems for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
