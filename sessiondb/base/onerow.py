"""The one row of a query that always yields one, typed for the checker.

apsw types ``Cursor.fetchone()`` as ``Any | None``: it cannot know that an
aggregate (``count(*)``, ``max()``), a PRAGMA or a lookup the caller has
just made sure of returns a row. ``one()`` says so to the type checker
only; at run time it is exactly ``fetchone()`` (a missing row still fails
where it is unpacked or indexed, as before).
"""
from __future__ import annotations

from typing import Any, cast

import apsw


def one(cursor: apsw.Cursor) -> tuple[Any, ...]:
    """``cursor.fetchone()`` for a query that yields a row."""
    return cast("tuple[Any, ...]", cursor.fetchone())
