"""recover's progress line: a bar on a terminal, nothing when piped."""
from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from hstate_cli.phase_progress import PhaseBar, line
from tests.helpers import damage

ROOT = Path(__file__).resolve().parents[2]
HERMES = [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())"]


def test_line_has_a_bar_when_the_total_is_known():
    assert line("verifying: counts", 1, 4) == \
        "verifying: counts [######------------------]  25% 1/4"
    assert line("copying messages", 12000, 0) == "copying messages: 12,000"


def test_redraws_are_throttled_and_the_line_is_blanked():
    now = [0.0]
    out = io.StringIO()
    bar = PhaseBar(out, clock=lambda: now[0])
    bar("copying messages", 100, 0)
    bar("copying messages", 200, 0)  # within 0.1 s: not drawn
    now[0] = 0.5
    bar("verifying: fts", 3, 5)
    bar("verifying: fts", 5, 5)  # a finished phase is always drawn
    bar.done()
    text = out.getvalue()
    assert "200" not in text and text.count("\r") == 3 and text.endswith("\n")
    assert "\rverifying: fts [" in text


def _recover(source: Path, output: Path, tty: bool) -> tuple[int, str, str]:
    args = [*HERMES, "sessions", "recover", "--source", str(source), "--output", str(output),
            "--json"]
    if not tty:
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
        return done.returncode, done.stdout, done.stderr
    main, side = pty.openpty()
    try:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=side, text=True)
        os.close(side)
        side = -1
        err = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal's other end closed
                break
            if not chunk:
                break
            err += chunk
        out = proc.stdout.read() if proc.stdout else ""
        return proc.wait(), out, err.decode(errors="replace")
    finally:
        os.close(main)
        if side != -1:
            os.close(side)


@pytest.mark.parametrize("sound", [True, False])
def test_a_terminal_sees_the_phases_and_a_pipe_sees_nothing(tmp_path, sound):
    src = damage.build_store(tmp_path / "state.db", sessions=2, per_session=30).path
    if not sound:  # a counter the row-by-row copy recounts: not copied page for page
        conn = apsw.Connection(str(src))
        conn.execute("UPDATE sessions SET message_count = message_count + 1")
        conn.close()
    rc, out, err = _recover(src, tmp_path / "tty.db", tty=True)
    assert rc == 0 and json.loads(out)["outcome"] == "recovered"
    phases = ("page copy done", "verifying [") if sound else (
        "backup lane done", "building the search index", "verifying [")
    for phase in ("snapshot (bytes)",) + phases:
        assert phase in err, (phase, err)
    rc, out, err = _recover(src, tmp_path / "pipe.db", tty=False)
    assert rc == 0 and json.loads(out)["outcome"] == "recovered"
    assert "\r" not in err and "verifying" not in err
