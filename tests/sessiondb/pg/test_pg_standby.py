"""A real streaming standby of the test server (pg_basebackup, standby.signal,
same machine, unix sockets): `hermes doctor --store-url` reports its role,
reads work, and a write fails as ``readonly`` (SQLSTATE 25006) with the
messages spooled, while the primary's commits keep arriving."""
from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB, StoreReadOnly
from sessiondb.importers.spool_import import spool_dir_for


def test_standby_role_reads_and_readonly_writes(pg_server, pg_databases, hermes_home) -> None:
    url = pg_databases.create()
    primary = SessionDB.open(url=url)
    sid = primary.create_session("s", source="t")
    primary.append_message(sid, {"role": "user", "content": "stored"})
    standby_server = pg_server.standby()
    try:
        standby_url = standby_server.url(url.split("?")[0].rsplit("/", 1)[1])
        res = CliRunner().invoke(cli, ["--store-url", standby_url, "doctor", "--json"])
        assert "Traceback" not in res.output
        found = {f["check"]: f for f in json.loads(res.output)["findings"]}
        assert found["pg_replication"]["severity"] == "warn"
        assert found["pg_replication"]["data"] == {"role": "standby"}
        assert found["pg_connect"]["severity"] == "ok"

        standby = SessionDB.open(url=standby_url)
        try:
            assert [m["content"] for m in standby.get_messages(sid)] == ["stored"]
            with pytest.raises(StoreReadOnly) as info:
                standby.append_message(sid, {"role": "user", "content": "refused"})
            assert (info.value.cause.value, info.value.sqlstate) == ("readonly", "25006")
            lines = (spool_dir_for(standby.path) / f"{sid}.jsonl").read_text().splitlines()
            assert [json.loads(line)["message"]["content"] for line in lines
                    if json.loads(line).get("kind") == "message"] == ["refused"]
            primary.append_message(sid, {"role": "user", "content": "streamed"})
            deadline = time.monotonic() + 30
            while len(standby.get_messages(sid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # replay is asynchronous: wait for it, bounded
            assert [m["content"] for m in standby.get_messages(sid)] == ["stored", "streamed"]
        finally:
            standby.close()
        assert [m["content"] for m in primary.get_messages(sid)] == ["stored", "streamed"]
    finally:
        standby_server.destroy()
        primary.close()
