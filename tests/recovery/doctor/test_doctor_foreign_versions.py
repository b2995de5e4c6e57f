"""Doctor and inspect on files of every registered format: the format's
version is checked against the versions the registry knows (ok at a known
version, a warning naming the version at a newer one, in both), and
doctor's overall verdict equals inspect's on healthy, damaged and newer
files alike (whose file it is, is information, not a problem).

Before: doctor said "worst: warn" on a healthy foreign file (its identity
finding) while inspect called it healthy, and no version was compared
with anything."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import apsw
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.schema.formats import HERMES_AGENT_NEWEST, LLM_MIGRATIONS
from tests.helpers.damage import smash_middle_leaves
from tests.helpers.foreign_dbs import (build_hermes_agent, build_langgraph, build_llm,
                                       build_openai_agents)

# format -> (builder, main table, SQL that makes the file newer than the registry
# knows, what the warning names)
FORMATS: dict[str, tuple[Callable[[Path], object], str, str, str]] = {
    "hermes-agent": (build_hermes_agent, "messages",
                     f"INSERT INTO schema_version VALUES ({HERMES_AGENT_NEWEST + 1});"
                     " ALTER TABLE messages ADD COLUMN delivery_receipt TEXT",
                     f"schema v{HERMES_AGENT_NEWEST + 1}"),
    "llm-threads": (lambda p: build_llm(p, conversations=10), "responses",
                    "INSERT INTO _llm_migrations VALUES ('m028_turn_labels', '2027-01-01')",
                    "m028_turn_labels"),
    "llm-responses": (lambda p: build_llm(p, 10, layout="responses"), "responses",
                      "INSERT INTO _llm_migrations VALUES ('m031_future', '2027-01-01')",
                      "m031_future"),
    "openai-agents": (lambda p: build_openai_agents(p, sessions=8), "agent_messages",
                      "ALTER TABLE agent_messages ADD COLUMN turn_index INTEGER",
                      "agent_messages.turn_index"),
    "langgraph": (build_langgraph, "writes",
                  "ALTER TABLE writes ADD COLUMN ttl REAL", "writes.ttl"),
}
# inspect's verdict -> the worst severity doctor gives the same file
SEVERITY = {"healthy": "ok", "fts_only": "warn", "structural": "error"}
RANK = ("ok", "info", "warn", "error")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each format built once; every test works on its own copy."""
    root = tmp_path_factory.mktemp("formats")
    out = {}
    for name, (build, *_rest) in FORMATS.items():
        out[name] = root / f"{name}.db"
        build(out[name])
    return out


def home_with(tmp_path: Path, source: Path, state: str, name: str) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    db = home / "state.db"
    shutil.copyfile(source, db)
    _build, table, newer, _named = FORMATS[name]
    if state == "newer":
        conn = apsw.Connection(str(db))
        conn.execute(newer)
        conn.close()
    if state == "damaged":
        smash_middle_leaves(db, table, 2)
    return home


def run(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, json.loads(res.stdout)


@pytest.mark.parametrize("state", ["healthy", "damaged", "newer"])
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_doctor_checks_the_version_and_agrees_with_inspect(
        tmp_path: Path, built: dict[str, Path], name: str, state: str) -> None:
    home = home_with(tmp_path, built[name], state, name)
    db = home / "state.db"
    code, doc = run("--home", str(home), "doctor", "--json")
    _code, report = run("--home", str(home), "sessions", "recover", "--source", str(db),
                        "--inspect-only", "--json")
    found = {f["id"]: f for f in doc["findings"]}
    assert found["identity"]["severity"] == "info"
    check = report["identification"]["version_check"]
    version = found["format_version"]
    assert version["message"] == check["message"]  # one check, said once for both
    if state == "newer":
        assert version["severity"] == "warn" and check["warns"]
        assert FORMATS[name][3] in version["message"]
        assert "carving uses the registry's layouts" in version["message"]
        assert report["warnings"] == [f"format version: {check['message']}"]
    else:
        assert version["severity"] == "ok" and not check["warns"], version
        assert report["warnings"] == []
    # the verdicts agree: inspect's (and its warnings) is doctor's worst
    expected = SEVERITY[report["verdict"]]
    if report["warnings"]:
        expected = max(expected, "warn", key=RANK.index)
    assert doc["worst"] in ((expected, "info") if expected == "ok" else (expected,)), (
        doc["worst"], report["verdict"], [(f["id"], f["severity"]) for f in doc["findings"]])
    assert doc["healthy"] == (report["verdict"] == "healthy" and not report["warnings"])
    assert (state == "damaged") == (report["verdict"] != "healthy")
    assert code == {"ok": 0, "info": 0, "warn": 3, "error": 4}[doc["worst"]]


def test_a_known_version_of_each_versioned_format_is_named(
        tmp_path: Path, built: dict[str, Path]) -> None:
    home = home_with(tmp_path, built["hermes-agent"], "healthy", "hermes-agent")
    out = CliRunner().invoke(cli, ["--home", str(home), "sessions", "recover", "--source",
                                   str(home / "state.db"), "--inspect-only"]).output
    assert (f"format version: schema v{HERMES_AGENT_NEWEST} is a version the registry knows"
            in out), out
    assert LLM_MIGRATIONS[-1] == "m027_turns_response_json"  # llm 0.36, the builders' llm
