"""The fixed words (message states, severities, verdicts, outcomes, repair
and review statuses) are StrEnums: what they write (JSON, text, rows) is
byte-identical to the plain strings they replaced, the schema's CHECK
constraint agrees with the enum, and no doctor finding names its severity
as a bare string."""
from __future__ import annotations

import ast
import dataclasses
import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from hstate_agent.review.review_fork import ReviewStatus
from hstate_recovery import Outcome, RepairStatus, Severity, Verdict
from hstate_recovery import recover
from hstate_recovery.doctor.run import run_doctor
from sessiondb import MessageState, SessionDB

ROOT = Path(__file__).resolve().parents[3]
ENUMS = (MessageState, Severity, Verdict, Outcome, RepairStatus, ReviewStatus)


def plain(value: Any) -> Any:
    """``value`` with every enum member replaced by its plain string."""
    if isinstance(value, StrEnum):
        return str.__str__(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.__name__)
def test_a_member_writes_as_its_plain_string(enum: type[StrEnum]) -> None:
    for member in enum:
        assert type(member.value) is str and member == member.value
        assert json.dumps(member) == json.dumps(member.value)
        assert json.dumps({member: [member]}) == json.dumps({member.value: [member.value]})
        assert str(member) == f"{member}" == "%s" % member == member.value
        assert hash(member) == hash(member.value)  # a str key finds a member's entry


def test_schema_check_lists_exactly_the_message_states(hermes_home: Path) -> None:
    with SessionDB.open() as db:
        db.create_session("s", source="t")
    import apsw
    conn = apsw.Connection(str(hermes_home / "state.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()
    finally:
        conn.close()
    found = re.search(r"CHECK \(state IN \(([^)]*)\)\)", sql)
    assert found, sql
    assert [v.strip().strip("'") for v in found.group(1).split(",")] == list(MessageState)


def test_doctor_and_recover_reports_are_the_plain_strings(hermes_home: Path,
                                                          tmp_path: Path) -> None:
    with SessionDB.open() as db:
        db.create_session("s", source="t")
        db.append_messages("s", [{"role": "user", "content": "hello"}])
    findings = [f.to_dict() for f in run_doctor(hermes_home)]
    assert any(isinstance(f["severity"], Severity) for f in findings)
    assert json.dumps(findings, sort_keys=True) == json.dumps(plain(findings), sort_keys=True)
    report = recover(hermes_home / "state.db", tmp_path / "new.db").to_dict()
    assert report["outcome"] is Outcome.RECOVERED
    assert report["inspect"]["verdict"] is Verdict.HEALTHY
    assert json.dumps(report, sort_keys=True, default=str) == \
        json.dumps(plain(report), sort_keys=True, default=str)


def test_no_finding_names_its_severity_as_a_bare_string() -> None:
    bad = []
    for path in sorted((ROOT / "recovery").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" \
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, f"use Severity.X, not a string: {bad}"


def test_dataclass_fields_are_typed_with_the_enums() -> None:
    from hstate_recovery.doctor.run import Finding
    from hstate_recovery.inspection.examine import InspectReport
    from hstate_recovery.repairs.inplace import RepairReport
    from hstate_recovery.base.report import RecoveryReport
    from hstate_agent.review.review_fork import ReviewResult
    types = {(cls.__name__, f.name): f.type for cls in (Finding, InspectReport, RecoveryReport,
                                                        RepairReport, ReviewResult)
             for f in dataclasses.fields(cls)}
    assert types[("Finding", "severity")] == "Severity"
    assert types[("InspectReport", "verdict")] == types[("InspectReport", "data_verdict")] \
        == "Verdict"
    assert types[("RecoveryReport", "outcome")] == "Outcome"
    assert types[("RepairReport", "status")] == "RepairStatus"
    assert types[("ReviewResult", "status")] == "ReviewStatus"
