"""Doctor that scales: sampled default checks past a size, --full with progress, sizes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.doctor import doctor_scale
from hstate_recovery.doctor.run import run_doctor
from sessiondb import SessionDB
from sessiondb.maintenance import lifecycle as maintenance
from tests.helpers.search_damage import junk_fts_blocks, junk_pages
from tests.helpers.stores import fill_home, sha


def doctor_json(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(cli, ["doctor", "--json", *args])
    return res.exit_code, json.loads(res.output)


def ids(doc: dict) -> dict[str, dict]:
    return {f["id"]: f for f in doc["findings"]}


@pytest.fixture
def sampled(monkeypatch):
    """Every store counts as large: the default doctor samples."""
    monkeypatch.setattr(doctor_scale, "SMALL_STORE_BYTES", 0)


def test_large_store_default_is_sampled_read_only_and_copies_nothing(hermes_home, sampled):
    path = fill_home(hermes_home, n=400)
    before = sha(path)
    code, doc = doctor_json()
    assert code == 0, doc
    found = ids(doc)
    assert "quick_check" not in found and found["structure_sample"]["severity"] == "ok"
    assert "doctor --full" in found["structure_sample"]["message"]
    assert found["search_index"]["severity"] == "ok" and "sampled" in found["search_index"]["message"]
    assert found["schema"]["severity"] == "ok" and found["fts_stale"]["severity"] == "ok"
    assert sha(path) == before
    assert not list(hermes_home.glob(".hermes-scratch-*"))


def test_sampled_reads_find_damaged_table_pages(hermes_home, sampled):
    path = fill_home(hermes_home, n=400)
    junk_pages(path, "messages")
    code, doc = doctor_json()
    assert code == 4
    finding = ids(doc)["structure_sample"]
    assert finding["severity"] == "error" and "--output" in finding["fix"]


def test_sampled_probes_find_a_damaged_search_index(hermes_home, sampled):
    path = fill_home(hermes_home, n=400)
    assert junk_fts_blocks(path) > 0
    code, doc = doctor_json()
    assert code == 3
    finding = ids(doc)["search_index"]
    assert finding["fix_available"] and "sessions repair" in finding["fix"]


def test_full_reports_phases_and_an_estimate(hermes_home, sampled):
    fill_home(hermes_home)
    notes: list[str] = []
    findings = run_doctor(hermes_home, full=True, progress=notes.append)
    assert notes[0].startswith("doctor --full: checking") and " s" in notes[0]
    assert any("integrity_check" in n for n in notes) and any("private copy" in n for n in notes)
    assert notes[-1].startswith("done in")
    assert {f.check for f in findings} >= {"integrity_check", "search_index", "size"}


def test_size_section_with_advice_in_json(hermes_home):
    fill_home(hermes_home, n=50)
    with SessionDB.open(hermes_home) as db:
        db.create_session("big", source="t")
        db.append_messages("big", [{"role": "user", "content": "z" * 3000} for _ in range(300)])
        maintenance.prune(db.core, maintenance.PruneFilter(larger_than=100_000))
    code, doc = doctor_json()
    size = doc["size"]
    assert size == ids(doc)["size"]["data"]
    assert size["method"] == "dbstat" and size["by_name"]["messages"] > 0
    assert size["freelist_share"] > 0.2 and size["search_index_bytes"] > 0
    assert size["file_bytes"] == (hermes_home / "state.db").stat().st_size
    assert size["advice"][0]["command"].endswith("sessions optimize")
    assert ids(doc)["size"]["fix"].endswith("sessions optimize")


def test_size_budget_says_when_dbstat_was_cut_short(hermes_home, monkeypatch):
    fill_home(hermes_home)
    monkeypatch.setattr(doctor_scale, "SIZE_BUDGET_S", 0.0)
    code, doc = doctor_json()
    assert doc["size"]["by_name"] is None and "budget" in doc["size"]["method"]
    code, doc = doctor_json("--full")  # --full has no budget
    assert doc["size"]["method"] == "dbstat"


def test_human_output_has_the_size_row(hermes_home):
    fill_home(hermes_home)
    res = CliRunner().invoke(cli, ["doctor"])
    assert any(line.split()[:2] == ["ok", "size"] for line in res.output.splitlines())
