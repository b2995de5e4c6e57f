"""Real write failures injected by the database itself, on either backend.

SQLite: a TEMP trigger on the writer connection that RAISEs (ABORT).
PostgreSQL: a PL/pgSQL trigger that RAISEs an exception (SQLSTATE P0001).
Both make the server-side statement fail mid-transaction, so everything
after it is the store's own rollback and error handling.
"""
from __future__ import annotations

from sessiondb import StoreFace


def _is_pg(db: StoreFace) -> bool:
    return getattr(db, "backend", "sqlite") != "sqlite"


def fail_writes(db: StoreFace, table: str = "messages", *, ops: tuple[str, ...] = ("INSERT",),
                when_content: str | None = None, message: str = "injected") -> None:
    """Make ``ops`` on ``table`` fail with ``message`` (only rows whose
    content is ``when_content``, when given)."""
    with db.atomic() as conn:
        for op in ops:
            name = f"fail_{table}_{op.lower()}"
            if _is_pg(db):
                cond = "" if when_content is None else \
                    f" WHEN (NEW.content = '{when_content}')"
                conn.execute(f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                             f"$$ BEGIN RAISE EXCEPTION '{message}'; END $$")
                conn.execute(f"CREATE TRIGGER {name} BEFORE {op} ON {table} FOR EACH ROW"
                             f"{cond} EXECUTE FUNCTION {name}()")
            else:
                cond = "" if when_content is None else f" WHEN NEW.content = '{when_content}'"
                conn.execute(f"CREATE TEMP TRIGGER {name} BEFORE {op} ON main.{table}{cond}"
                             f" BEGIN SELECT RAISE(ABORT, '{message}'); END")


def heal(db: StoreFace, table: str = "messages", *, ops: tuple[str, ...] = ("INSERT",)) -> None:
    """Undo `fail_writes`."""
    with db.atomic() as conn:
        for op in ops:
            name = f"fail_{table}_{op.lower()}"
            if _is_pg(db):
                conn.execute(f"DROP TRIGGER {name} ON {table}; DROP FUNCTION {name}()")
            else:
                conn.execute(f"DROP TRIGGER temp.{name}")
