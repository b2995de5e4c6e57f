"""Memory and skill files: format, caps, validation, crash safety, two processes."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from hstate_agent import silence
from hstate_agent.errors import MemoryEditError, MemoryFull, SkillError
from hstate_agent.memory.memory import MemoryStore, Provenance, parse
from hstate_agent.memory.memory_pending import PendingChanges
from hstate_agent.memory.memory_tools import HomeTools
from hstate_agent.review.review_config import ReviewConfig, load_review_config
from hstate_agent.silence import silenced
from hstate_agent.memory.skills import SkillStore

ROOT = Path(__file__).resolve().parents[2]
SKILL = "---\nname: demo\ndescription: A demo skill\n---\nStep one.\n"


def test_entries_carry_provenance_and_round_trip(tmp_path):
    store = MemoryStore(tmp_path)
    store.add("memory", "First note.", Provenance("assistant_tool", "s1"))
    store.add("memory", "Second\nnote on two lines.", Provenance("background_review", "s2"))
    store.add("memory", "First note.", Provenance("assistant_tool", "s3"))  # not repeated
    entries = store.entries("memory")
    assert [(e.text, e.origin, e.session_id) for e in entries] == [
        ("First note.", "assistant_tool", "s1"),
        ("Second\nnote on two lines.", "background_review", "s2")]
    assert parse((tmp_path / "memories" / "MEMORY.md").read_text()) == entries
    store.replace("memory", "Second", "Replaced.", Provenance("user"))
    store.remove("memory", "First", Provenance("user"))
    assert [(e.text, e.origin) for e in store.entries("memory")] == [("Replaced.", "user")]


def test_hand_written_text_becomes_an_entry(tmp_path):
    path = tmp_path / "memories" / "USER.md"
    path.parent.mkdir()
    path.write_text("The user is called Ana.\n")
    assert [(e.text, e.origin) for e in MemoryStore(tmp_path).entries("user")] == [
        ("The user is called Ana.", "user")]


def test_bad_edits_are_typed_errors_and_change_nothing(tmp_path):
    store = MemoryStore(tmp_path, caps={"memory": 40})
    store.add("memory", "alpha one", Provenance("user"))
    store.add("memory", "alpha two", Provenance("user"))
    before = (tmp_path / "memories" / "MEMORY.md").read_bytes()
    with pytest.raises(MemoryEditError, match="2 entries contain"):
        store.replace("memory", "alpha", "x", Provenance("user"))
    with pytest.raises(MemoryEditError, match="no entry contains"):
        store.remove("memory", "beta", Provenance("user"))
    with pytest.raises(MemoryEditError, match="entry header"):
        store.add("memory", "<!-- entry 00000000 origin=user session= at=x -->", Provenance("user"))
    with pytest.raises(MemoryFull) as full:
        store.add("memory", "a much longer note that overflows", Provenance("user"))
    assert (full.value.cap, full.value.used) == (40, 51)
    with pytest.raises(MemoryEditError, match="unknown memory target"):
        store.add("secrets", "x", Provenance("user"))
    with pytest.raises(MemoryEditError, match="unknown write origin"):
        Provenance("someone")
    assert (tmp_path / "memories" / "MEMORY.md").read_bytes() == before


def test_stale_temp_files_are_cleaned_and_writes_are_private(tmp_path):
    store = MemoryStore(tmp_path)
    store.add("memory", "one", Provenance("user"))
    stale = tmp_path / "memories" / ".MEMORY.md.abcdef.tmp"
    stale.write_text("half a write")
    store.add("memory", "two", Provenance("user"))
    assert not stale.exists()
    for p in (tmp_path / "memories").iterdir():
        assert p.stat().st_mode & 0o777 == 0o600, p
    assert (tmp_path / "memories").stat().st_mode & 0o777 == 0o700


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from hstate_agent.memory.memory import MemoryStore, Provenance
    store = MemoryStore(Path(sys.argv[1]), caps={{"memory": 100000}})
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()
    for i in range(int(sys.argv[3])):
        store.add("memory", f"{{sys.argv[2]}} entry {{i}}", Provenance("assistant_tool", sys.argv[2]))
""")


def test_two_processes_writing_memory_at_once_lose_no_entry(tmp_path):
    code = WRITER.format(root=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), name, "40"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for name in ("p1", "p2")]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    for p in procs:  # start both at once
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        p.stdin.close()
        assert p.wait(60) == 0
    texts = {e.text for e in MemoryStore(tmp_path).entries("memory")}
    assert texts == {f"{n} entry {i}" for n in ("p1", "p2") for i in range(40)}


def test_skill_validation(tmp_path):
    skills = SkillStore(tmp_path)
    prov = Provenance("assistant_tool", "s1")
    for name, content, message in [
            ("Bad Name", SKILL, "invalid skill name"), ("../x", SKILL, "invalid skill name"),
            ("demo", "no frontmatter", "starts with"),
            ("demo", "---\nname: demo\n", "no closing"),
            ("demo", SKILL.replace("name: demo", "name: other"), "must say"),
            ("demo", SKILL.replace("description: A demo skill", "description:"), "description"),
            ("demo", "---\nname: demo\ndescription: d\nnot a pair\n---\n", "key: value")]:
        with pytest.raises(SkillError, match=message):
            skills.create(name, content, prov)
    assert not (tmp_path / "skills" / "demo").exists()
    skills.create("demo", SKILL, prov)
    with pytest.raises(SkillError, match="exists"):
        skills.create("demo", SKILL, prov)
    with pytest.raises(SkillError, match="occurs 0 times"):
        skills.patch("demo", "Step two", "x", prov)
    with pytest.raises(SkillError, match="must say"):  # a patch that breaks the frontmatter
        skills.patch("demo", "name: demo", "name: other", prov)
    skills.patch("demo", "Step one.", "Step one, then two.", Provenance("background_review",
                                                                       "s2"))
    assert "then two" in skills.view("demo")
    assert [p["action"] for p in skills.provenance("demo")] == ["create", "patch"]
    assert [s.to_dict() for s in skills.list()] == [{"name": "demo",
                                                     "description": "A demo skill"}]


def test_tools_report_done_lines_and_errors(tmp_path):
    tools = {t.name: t for t in HomeTools(tmp_path, "assistant_tool", "s1").tools()}
    assert set(tools) == {"memory", "skill_manage", "skills_list", "skill_view"}
    out = tools["memory"].fn(action="add", target="memory", content="x")
    assert out["done"] == "Memory updated" and out["used"] == "1/2200 chars"
    out = tools["skill_manage"].fn(action="create", name="demo", content=SKILL)
    assert out["done"] == "Skill 'demo' created"
    assert tools["skill_view"].fn(name="demo") == SKILL
    with pytest.raises(SkillError):
        tools["skill_manage"].fn(action="delete", name="demo")


def test_pending_apply_reports_changes_that_no_longer_apply(tmp_path):
    store = MemoryStore(tmp_path)
    store.add("memory", "keep me", Provenance("user"))
    pending = PendingChanges(store)
    change = pending.stage("remove", "memory", "gone already", "",
                           Provenance("background_review", "s"))
    assert pending.apply() == [{"id": change.id, "action": "remove", "applied": False,
                                "error": "no entry contains 'gone already'"}]
    assert pending.list() == [] and [e.text for e in store.entries("memory")] == ["keep me"]
    with pytest.raises(MemoryEditError, match="only replace and remove"):
        pending.stage("add", "memory", "x", "y", Provenance("background_review"))
    with pytest.raises(MemoryEditError, match="no pending change"):
        pending.discard(["deadbeef"])


def test_review_config(tmp_path, caplog):
    assert load_review_config(tmp_path, env={}) == ReviewConfig()
    (tmp_path / "config.toml").write_text(
        "[review]\nenabled = false\nmax_steps = 4\nmax_input_tokens = 0\nsummary = 'verbose'\n")
    assert load_review_config(tmp_path, env={}) == ReviewConfig(False, 4, 0, "verbose")
    (tmp_path / "config.toml").write_text("[review]\nenabled = true\n")
    assert not load_review_config(tmp_path, env={"HERMES_REVIEW": "off"}).enabled
    (tmp_path / "config.toml").write_text("[review\nenabled = ")
    assert load_review_config(tmp_path, env={}).enabled
    assert "review stays on" in caplog.text
    (tmp_path / "config.toml").write_text("[review]\nmax_steps = 'many'\nsummary = 'loud'\n")
    assert load_review_config(tmp_path, env={}) == ReviewConfig()


def test_silencing_is_for_one_thread_only(capsys):
    inside = threading.Event()
    leave = threading.Event()

    def fork() -> None:
        with silenced():
            print("from the fork")
            inside.set()
            leave.wait(5)
    t = threading.Thread(target=fork)
    t.start()
    assert inside.wait(5)
    print("from the live turn")  # while the fork is silenced
    leave.set()
    t.join()
    out = capsys.readouterr().out
    assert "from the live turn" in out and "from the fork" not in out
    assert not isinstance(sys.stdout, silence._Proxy)  # the original stream is back
