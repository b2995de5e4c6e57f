"""The Agents SDK's own session tests, run against `HermesSession`.

The SDK's sdist ships its tests; the one of the installed version is fetched
from the package registry and its session tests (``tests/memory/
test_session.py``, ``test_session_limit.py``: the session API directly, and
through ``Runner.run``, ``run_sync`` and ``run_streamed`` with the SDK's
scripted model) run in a pytest of their own, with ``SQLiteSession``
replaced by `HermesSession` (sdk_shim.py). The only tests left out are
those about ``SQLiteSession``'s own insides, each named below with why; a
test the SDK adds later runs unless it is named here.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SUITE = ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")

_CONNECTIONS = "SQLiteSession's per-thread sqlite3 connections (its _connections set)"
_CORRUPT = ("rows of invalid JSON written with sqlite3 into SQLiteSession's own table; a "
            "store row is checked when written (test_hermes_session.py)")
_SDK_TABLES = ("drops or probes SQLiteSession's own tables (agent_sessions, agent_messages) "
               "with sqlite3")
_FAKE_CONNECTION = "swaps a fake sqlite3 connection into SQLiteSession's _get_connection"
#: SDK test -> why it does not apply to a store of ours.
NOT_APPLICABLE = {
    "test_sqlite_session_close_closes_worker_thread_connections": _CONNECTIONS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _CONNECTIONS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _CONNECTIONS,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _CONNECTIONS,
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _CORRUPT,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _CORRUPT,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _CORRUPT,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _CORRUPT,
    "test_sqlite_session_file_lock_is_shared_across_instances":
        "SQLiteSession's process-wide file lock table (_file_lock_counts); the store "
        "serialises writers itself",
    "test_sqlite_session_failed_add_items_releases_write_lock":
        _SDK_TABLES + "; the same failure against the store is tested in test_hermes_session.py",
    "test_sqlite_session_failed_clear_session_rolls_back": _SDK_TABLES,
    "test_sqlite_session_failed_pop_item_releases_write_lock": _SDK_TABLES,
    "test_sqlite_session_rollback_failure_evicts_connection": _FAKE_CONNECTION,
    "test_sqlite_session_close_retries_quarantined_connection": _FAKE_CONNECTION,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome":
        _FAKE_CONNECTION + "; cancellation after a write is tested in test_hermes_session.py",
}


@pytest.fixture(scope="module")
def sdk_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installed SDK version's sdist, unpacked: its ``tests`` package."""
    version = metadata.version("openai-agents")
    out = tmp_path_factory.mktemp("openai-agents-sdist")
    run = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                          "--no-binary", ":all:", "-d", str(out), f"openai-agents=={version}"],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        pytest.skip(f"the package registry is not reachable from this machine: "
                    f"{run.stderr.strip().splitlines()[-1:]}")
    (sdist,) = out.glob("openai_agents-*.tar.gz")
    root = out / "src"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/tests/" in m.name and m.isfile()]
        tar.extractall(root, members=members, filter="data")
    (top,) = root.iterdir()
    return top


def test_the_sdk_session_tests_pass_against_hermes_session(sdk_tests: Path,
                                                           tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(HERE), "HERMES_HOME": str(tmp_path / "home")}
    deselect = [arg for name in NOT_APPLICABLE for arg in ("--deselect", f"{SUITE[0]}::{name}")]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "sdk_shim",
         "-o", "asyncio_mode=auto", "-W", "ignore::DeprecationWarning", *deselect, *SUITE],
        cwd=sdk_tests, env=env, capture_output=True, text=True, timeout=600)
    summary = run.stdout.strip().splitlines()[-1:] if run.stdout.strip() else []
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in summary[0] and "failed" not in summary[0], summary
    deselected = sum(1 for _ in NOT_APPLICABLE) + 2  # the cancellation test has three cases
    assert f"{deselected} deselected" in summary[0], summary
