"""Every Python snippet in the README runs as printed, in a fresh home with
no API key (the PostgreSQL one, which needs a server, and the Agents SDK's,
which needs OpenAI's model, only compile; the agent's is run, with and without a model, by test_readme_agent.py).

Before: the review snippet used `db`, `client` and `home` it never defined.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)


def _id(code: str) -> str:
    first = next(ln for ln in code.splitlines() if ln.strip() and not ln.startswith(("from",
                                                                                      "import")))
    return re.sub(r"\W+", "_", first)[:40]


@pytest.mark.parametrize("code", snippets(), ids=_id)
def test_readme_snippet_runs(code: str, tmp_path: Path) -> None:
    # a server, or a model behind an API key: compiled, not run
    if any(needs in code for needs in ("postgresql://", "client=anthropic.Anthropic()",
                                       "Runner.run_sync(")):
        compile(code, "README.md", "exec")
        return
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                        "HERMES_STORE_URL")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, text=True,
                          capture_output=True, timeout=120,
                          env={**env, "HERMES_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_there_are_snippets() -> None:
    assert len(snippets()) >= 5
