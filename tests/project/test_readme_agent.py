"""The README's agent example, run as written: without an API key it fails
the turn with a typed explanation (never the SDK's bare TypeError), with a
model it prints the streamed reply as one text, and `explanation` has one
type whatever failed."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anthropic

from hstate_agent import Agent, LocalModelServer, TurnFailure
from hstate_agent.localmodel.server import Reply
from sessiondb import SessionDB

ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("### The agent", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_example(home: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")}
    return subprocess.run([sys.executable, "-c", readme_example()], cwd=ROOT, text=True,
                          capture_output=True, timeout=120,
                          env={**clean, "HERMES_HOME": str(home), **env})


def test_without_an_api_key_the_example_fails_the_turn_typed(tmp_path):
    proc = run_example(tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    assert "TypeError" not in proc.stderr and "Traceback" not in proc.stderr
    assert "model_error:no_credentials" in proc.stdout
    assert "ANTHROPIC_API_KEY" in proc.stdout
    with SessionDB.open(tmp_path / "home") as db:  # nothing written, not even an empty session
        assert db.list_sessions() == []


def test_with_a_model_the_example_prints_the_streamed_reply_once(tmp_path):
    chunks = ["We decided ", "to back up ", "every night."]
    with LocalModelServer(lambda request: Reply.text("".join(chunks))) as server:
        proc = run_example(tmp_path / "home", ANTHROPIC_API_KEY="test",
                           ANTHROPIC_BASE_URL=server.base_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "We decided to back up every night.\n"


def test_explanation_is_one_type_for_model_errors(db):
    def broken(request):
        raise RuntimeError("server fell over")  # the local server answers 500
    with LocalModelServer(broken) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        result = Agent(db, client=client).run_turn("hi")
    assert result.failed and result.failure_reason.startswith("model_error:")
    assert isinstance(result.explanation, TurnFailure)
    assert result.explanation.code == result.failure_reason
    assert result.explanation.summary and result.explanation.storage is None
