"""`hermes doctor --store-url postgresql://...`: the checks for a PostgreSQL store.

Read-only (the session is opened with ``default_transaction_read_only``):
connectivity, server version, schema version and pending migrations, the
search index (columns, GIN indexes present and valid, extensions, the
ctype pg_trgm needs for CJK), long-held locks, and replication role.
PostgreSQL has its own recovery tooling; none of SQLite's applies here.
"""
from __future__ import annotations

import shlex
from typing import Any, Callable

from sessiondb.recovery_api import (PG_SEARCH_INDEXES as INDEXES, TSV_COLUMN,
                                    pg_applied_migrations, pg_pending_migrations,
                                    pg_connect_timeout, pg_unknown_migrations, redact_url,
                                    url_label)

from ..base import Severity
from .model import Finding

#: A transaction open longer than this while holding locks is reported.
LONG_LOCK_S = 60.0
OLDEST_SUPPORTED = 130000  # server_version_num: PostgreSQL 13


def check_version(conn: Any) -> list[Finding]:
    num = int(conn.execute("SHOW server_version_num").fetchone()[0])
    text = conn.execute("SHOW server_version").fetchone()[0]
    if num < OLDEST_SUPPORTED:
        return [Finding("pg_version", Severity.ERROR, f"PostgreSQL {text} is older than 13",
                        "upgrade the server to PostgreSQL 13 or newer")]
    return [Finding("pg_version", Severity.OK, f"PostgreSQL {text}", data={"server_version_num": num})]


Command = Callable[..., str]  # a hermes command line pinned to the home and store URL


def _writing_command(command: Command) -> str:
    """What applies pending migrations: any command that opens the store to
    write does (under an advisory lock); this one writes nothing else unless
    the home has spooled messages, which belong in the store anyway."""
    return command("sessions", "import-spool")


def check_schema(conn: Any, command: Command) -> list[Finding]:
    done = pg_applied_migrations(conn)
    newer, todo = pg_unknown_migrations(conn), pg_pending_migrations(conn)
    data = {"applied": len(done), "pending": todo, "unknown": newer}
    if newer:
        return [Finding("pg_schema", Severity.ERROR, f"the database has migrations this version does "
                        f"not know ({', '.join(newer)}): a newer hermes wrote it",
                        "upgrade hermes on this host", data=data)]
    if todo:
        return [Finding("pg_schema", Severity.WARN, f"{len(todo)} pending migration(s): "
                        f"{', '.join(todo)}; any command that writes applies them (under an "
                        "advisory lock)", _writing_command(command), data=data)]
    return [Finding("pg_schema", Severity.OK, f"schema current ({done[-1] if done else 'empty'})",
                    data=data)]


def _index_state(conn: Any) -> dict[str, str]:
    rows = conn.execute(
        "SELECT c.relname, i.indisvalid AND i.indisready FROM pg_index AS i"
        " JOIN pg_class AS c ON c.oid = i.indexrelid WHERE c.relname = ANY(%s)"
        " AND c.relnamespace = current_schema()::regnamespace", (list(INDEXES),)).fetchall()
    state = {name: ("valid" if ok else "invalid") for name, ok in rows}
    return {name: state.get(name, "missing") for name in INDEXES}


def check_search_index(conn: Any, command: Command) -> list[Finding]:
    has_column = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_name = 'messages'"
        " AND column_name = %s AND table_schema = current_schema()",
        (TSV_COLUMN,)).fetchone() is not None
    state = _index_state(conn)
    bad = {n: s for n, s in state.items() if s != "valid"}
    data = {"column": has_column, "indexes": state}
    if not has_column or bad:
        what = ", ".join(f"{n} {s}" for n, s in bad.items()) or f"column {TSV_COLUMN} missing"
        if pg_pending_migrations(conn) and "invalid" not in state.values():
            return [Finding("pg_search_index", Severity.ERROR, f"search index unhealthy: {what}"
                            "; the pending migrations create it", _writing_command(command),
                            data=data)]
        return [Finding("pg_search_index", Severity.ERROR, f"search index unhealthy: {what}",
                        "REINDEX INDEX CONCURRENTLY <name> (psql) for an invalid index; a "
                        "missing one comes back with the pending migrations", data=data)]
    out = [Finding("pg_search_index", Severity.OK, "search column and both GIN indexes valid",
                   data=data)]
    ctype = conn.execute("SELECT datctype FROM pg_database WHERE datname = current_database()"
                         ).fetchone()[0]
    if "utf" not in ctype.lower():
        out.append(Finding("pg_ctype", Severity.INFO, f"database ctype {ctype}: pg_trgm extracts no "
                           "trigrams from non-ASCII letters, so CJK substring searches scan",
                           "create the database with LC_CTYPE 'C.UTF-8' (then migrate into it)"))
    return out


def check_locks(conn: Any) -> list[Finding]:
    rows = conn.execute(
        "SELECT a.pid, extract(epoch FROM now() - a.xact_start), a.state,"
        " bool_or(NOT l.granted) FROM pg_stat_activity AS a JOIN pg_locks AS l ON l.pid = a.pid"
        " WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"
        " AND a.xact_start IS NOT NULL GROUP BY 1, 2, 3"
        " HAVING extract(epoch FROM now() - a.xact_start) > %s OR bool_or(NOT l.granted)",
        (LONG_LOCK_S,)).fetchall()
    if not rows:
        return [Finding("pg_locks", Severity.OK, f"no lock held longer than {LONG_LOCK_S:g}s, "
                        "none waited on")]
    held = [{"pid": pid, "seconds": round(float(age), 1), "state": state, "waiting": waiting}
            for pid, age, state, waiting in rows]
    pids = ", ".join(str(h["pid"]) for h in held)
    return [Finding("pg_locks", Severity.WARN, f"{len(held)} session(s) hold locks long or wait "
                    f"(pids {pids}): writers from other hosts queue behind them",
                    "inspect with SELECT * FROM pg_stat_activity WHERE pid IN (...); end a "
                    "stuck one with SELECT pg_terminate_backend(pid)", data={"sessions": held})]


def check_role(conn: Any) -> list[Finding]:
    if conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
        return [Finding("pg_replication", Severity.WARN, "this server is a standby (in recovery): "
                        "searches work, every write fails as readonly",
                        "point --store-url at the primary", data={"role": "standby"})]
    return [Finding("pg_replication", Severity.OK, "primary (accepts writes)", data={"role": "primary"})]


PG_CHECKS: tuple[Callable[..., list[Finding]], ...] = (
    check_version, check_schema, check_search_index, check_locks, check_role)
NEEDS_COMMAND = (check_schema, check_search_index)  # their fixes are hermes commands


def _plain_command(*args: str) -> str:
    return shlex.join(["hermes", *args])


def run_pg_doctor(url: str, command: Command | None = None) -> list[Finding]:
    """Every PostgreSQL check; a server that cannot be reached is one error.
    ``command`` makes the hermes command lines the fixes name, pinned to the
    home and this store URL (the CLI's own)."""
    import psycopg
    label = url_label(url)
    command = command or (lambda *args: _plain_command("--store-url", redact_url(url), *args))
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=pg_connect_timeout(url),
                               options="-c default_transaction_read_only=on")
    except psycopg.OperationalError as e:
        first = (str(e).strip().splitlines() or ["connection failed"])[0]
        return [Finding("pg_connect", Severity.ERROR, f"cannot connect to {label}: {first}",
                        "check that the server runs and the URL, user and database are right "
                        f"(psql {shlex.quote(redact_url(url))})")]
    out = [Finding("pg_connect", Severity.OK, f"connected to {label}")]
    with conn:
        for check in PG_CHECKS:
            try:
                out += check(conn, command) if check in NEEDS_COMMAND else check(conn)
            except psycopg.Error as e:
                out.append(Finding(check.__name__.replace("check_", "pg_"), Severity.ERROR,
                                   f"the check failed: {e.sqlstate} "
                                   f"{e.diag.message_primary or type(e).__name__}"))
    return out
