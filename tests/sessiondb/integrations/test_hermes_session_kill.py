"""kill -9 in the middle of HermesSession.add_items loses nothing acknowledged."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from sessiondb.integrations.openai_agents import HermesSession

ROOT = Path(__file__).resolve().parents[3]


def _kill_after(path: Path, tag: str, acks: int) -> int:
    """Run the appending process until it acknowledged ``acks`` batches, then
    SIGKILL it (it is writing the next one by then); the last batch acknowledged."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.agents_workers",
                             str(path), "victim", tag], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    acked = -1
    try:
        for line in proc.stdout:
            acked = int(line)
            if acked + 1 >= acks:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    return acked


def test_kill_minus_nine_mid_add_items_loses_nothing_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    acked = {"r0": _kill_after(path, "r0", 30)}
    session = HermesSession("victim", path)  # and the store takes writes again
    asyncio.run(session.add_items([{"role": "user", "content": "after the kill"}]))
    labels = [item["content"].split(" ")[0] for item in asyncio.run(session.get_items())]
    session.close()
    assert labels[-1] == "after"
    for tag, last in acked.items():
        assert last + 1 >= 30
        mine = [label for label in labels if label.startswith(tag + ".")]
        stored = len(mine) // 3
        assert len(mine) % 3 == 0  # a batch is whole or absent
        assert stored in (last + 1, last + 2)  # every acknowledged one; maybe the one in flight
        assert mine == [f"{tag}.{n}.{k}" for n in range(stored) for k in range(3)]
