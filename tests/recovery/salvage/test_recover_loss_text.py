"""The recover report's loss lines always state the totals: a truncated file
lost many rowid ranges and the text showed five of them with no count."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from click.testing import CliRunner

from hstate_cli.demo import seed_history
from hstate_cli.main import cli
from hstate_recovery.salvage.pipeline import ranges_text


def test_ranges_text_states_the_total():
    assert ranges_text([[10, 15]]) == "1 rowid range could not be read: 10-15"
    many = [[i * 10, i * 10 + 2] for i in range(1, 63)] + [[700, 700]]
    text = ranges_text(many)
    assert text.startswith("63 rowid ranges (187 rowids in all) could not be read: "
                           "10-12, 20-22, 30-32, 40-42, 50-52 and 58 more")
    assert "rowids in all" not in ranges_text([[5, 2**63 - 1], [1, 2], [3, 3], [4, 4],
                                                [6, 6], [7, 7]])


def test_truncated_file_recover_reports_every_range_count(tmp_path: Path):
    home = tmp_path / "h"
    seed_history(home, messages=3000)
    store = home / "state.db"
    # The search index is written after the commit, so its pages follow the
    # table's in this file and a cut at two thirds would lose index pages only.
    # Truncate inside the table instead, and zero every third leaf before the
    # cut: many rowid ranges are lost, as in the truncated files of the field.
    import apsw
    conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    leaves = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = 'messages'"
                                         " AND pagetype = 'leaf' ORDER BY pageno")]
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    cut = leaves[len(leaves) * 2 // 3]
    with open(store, "r+b") as f:
        for page in leaves[1:len(leaves) * 2 // 3:3]:
            f.seek((page - 1) * page_size)
            f.write(bytes(page_size))
    os.truncate(store, cut * page_size)
    report = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["sessions", "recover", "--source", str(store), "--output",
                                   str(tmp_path / "out.db"), "--report", str(report),
                                   "--allow-partial"])
    assert res.exit_code == 3, res.output
    ranges = json.loads(report.read_text())["tables"]["messages"]["skipped_ranges"]
    assert len(ranges) > 5
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("loss: table messages"))
    match = re.search(r"(\d+) rowid ranges \((\d+) rowids in all\) could not be read", line)
    assert match, line
    assert int(match.group(1)) == len(ranges)
    assert int(match.group(2)) == sum(hi - lo + 1 for lo, hi in ranges)
    assert f"and {len(ranges) - 5} more" in line
