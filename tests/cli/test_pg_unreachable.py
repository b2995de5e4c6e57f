"""A PostgreSQL server that cannot be reached is reported as that, by every
command that talks to one (migrate included), within the connect timeout.

Before: any command against a closed port took 10.3 s to fail, and
`sessions migrate --to URL` said the local disk "may be failing" and sent
the operator to `recover --inspect-only`.
"""
from __future__ import annotations

import shlex
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import hstate_agent  # noqa: F401 (imported here: the time measured is the connection's)
from hstate_cli.main import cli
from sessiondb.pg import connect_timeout
from tests.helpers.stores import fill_home


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("args", [
    ("--store-url", "{url}", "sessions", "list"),
    ("--store-url", "{url}", "chat", "--offline", "-q", "hello"),
    ("sessions", "migrate", "--to", "{url}"),
    ("--store-url", "{url}", "doctor"),
], ids=["list", "chat", "migrate", "doctor"])
def test_an_unreachable_server_is_a_connection_error_within_seconds(
        hermes_home: Path, args: tuple[str, ...]) -> None:
    fill_home(hermes_home, n=3)
    url = f"postgresql://u@127.0.0.1:{closed_port()}/db"
    started = time.monotonic()
    res = CliRunner().invoke(cli, ["--home", str(hermes_home),
                                   *(a.format(url=url) for a in args)])
    assert time.monotonic() - started <= 3.0
    assert res.exit_code in (1, 4), res.output
    out = res.output.lower()
    assert "connect" in out and "disk" not in out and "inspect-only" not in out, res.output
    for line in res.output.splitlines():  # a printed command names this server, port too
        if line.startswith("Next: "):
            assert url in shlex.split(line[6:])


def test_the_connect_timeout_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://u@db.example/x"
    assert connect_timeout(url) == 3
    monkeypatch.setenv("HERMES_PG_CONNECT_TIMEOUT", "7")
    assert connect_timeout(url) == 7
    assert connect_timeout(url + "?connect_timeout=2") == 2  # the URL's own wins
