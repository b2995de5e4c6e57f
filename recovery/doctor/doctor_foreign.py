"""doctor on another program's file (Hermes Agent's state.db, llm's logs.db,
any registered format): every check that needs none of our schema.

The file is never opened in place: its integrity, its full-text indexes and
its page accounting come from inspect's private snapshot (the same run
`recover --inspect-only` makes, sampled by default and exhaustive with
``--full``), so doctor's verdict on the file is inspect's. WAL size,
holders and deleted WAL generations are read from the file system and the
process table. The fixes are the ones that apply to such a file: recover
into a file of the same format, install that in its place, or the owning
program's own tool; never ours (no repair, reindex or migration). The
file's format version is checked against the versions the registry knows
(`format_version`: the check inspect prints, from the same snapshot).
"""
from __future__ import annotations

from typing import Any

from ..base import RecoveryError, Severity, Verdict
from ..inspection import QUICK_CHECK_SECONDS, InspectReport, inspect
from .model import Finding, Target

FULL_CHECK_SECONDS = 24 * 3600.0  # --full: no budget worth naming
# inspect's verdict on the copy -> doctor's severity for the file's integrity
SEVERITY = {Verdict.HEALTHY: Severity.OK, Verdict.FTS_ONLY: Severity.WARN,
            Verdict.STRUCTURAL: Severity.ERROR, Verdict.NOT_A_DATABASE: Severity.ERROR,
            Verdict.EMPTY: Severity.INFO, Verdict.LOCKED: Severity.WARN,
            Verdict.SOURCE_CHANGING: Severity.WARN, Verdict.UNKNOWN: Severity.WARN}


def check_foreign_store(t: Target) -> list[Finding]:
    """Integrity, full-text indexes and size of the file, from inspect's snapshot."""
    try:
        r = inspect(t.db, quick_seconds=FULL_CHECK_SECONDS if t.full else QUICK_CHECK_SECONDS,
                    fts_full=True if t.full else None)
    except RecoveryError as e:
        return [Finding("integrity", Severity.ERROR, f"could not snapshot {t.db}: {e}",
                        t.command("sessions", "recover", "--source", str(t.db),
                                  "--inspect-only"))]
    return [integrity_finding(t, r), version_finding(r), *fts_findings(r), size_finding(r)]


def version_finding(r: InspectReport) -> Finding:
    """The file's format version against the registry, as inspect found it."""
    check = r.identification.get("version_check")
    if not check:
        why = ("its schema could not be read" if not r.schema_readable else
               "it is not a registered format")
        return Finding("format_version", Severity.INFO, f"no version checked: {why}")
    severity = (Severity.WARN if check["warns"] else
                Severity.INFO if check["status"] == "unrecorded" else Severity.OK)
    return Finding("format_version", severity, check["message"])


def integrity_finding(t: Target, r: InspectReport) -> Finding:
    how = "integrity_check" if t.full else "quick_check"
    severity = SEVERITY.get(r.data_verdict, Severity.WARN)
    if severity is Severity.OK:
        return Finding("integrity", Severity.OK, f"{how} of a private snapshot reports no "
                       "damage (inspect's verdict: healthy)")
    then = ""
    if r.next_command and r.data_verdict in (Verdict.STRUCTURAL, Verdict.FTS_ONLY):
        then = (" recover writes a file in the program's own format and ends with the "
                "install-recovered command that puts it in place (stop the program that "
                "owns the file first).")
    return Finding("integrity", severity, f"inspect's verdict on a private snapshot: "
                   f"{r.data_verdict}. {r.explanation}{then}", r.next_command)


def fts_findings(r: InspectReport) -> list[Finding]:
    out = []
    for f in r.fts:
        check = "integrity-check" if f.method == "integrity-check" else f"{f.probes} probes"
        if f.integrity_ok and f.probe_ok:
            out.append(Finding("fts_index", Severity.OK, f"{f.name}: {check} and MATCH probe "
                               "pass"))
        else:
            out.append(Finding("fts_index", Severity.WARN, f"{f.name}: {check} "
                               f"{'ok' if f.integrity_ok else 'FAILED'}, probe "
                               f"{'ok' if f.probe_ok else 'FAILED'}"
                               + (f" ({f.error})" if f.error else "")
                               + "; the owning program rebuilds its own index"))
    return out


def size_finding(r: InspectReport) -> Finding:
    fields: dict[str, Any] = r.header.get("fields") or {}
    page_size = int(r.header.get("page_size") or 0)
    pages, free = int(fields.get("page_count") or 0), int(fields.get("freelist_count") or 0)
    size = int(r.header.get("file_size") or 0)
    share = free / pages if pages else 0.0
    data = {"file_bytes": size, "page_size": page_size, "page_count": pages,
            "freelist_pages": free, "freelist_share": round(share, 3)}
    return Finding("file_size", Severity.OK,
                   f"file {size / (1 << 20):.1f} MiB, {pages} pages of {page_size} bytes, "
                   f"{free} free ({share:.0%})", data=data)
