"""Parameter types shared by commands: session ids, and dates or ages for --since/--until."""
from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import click

from sessiondb.base import InvalidInput, validate_session_id

_AGE = re.compile(r"^(\d+)([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: float | None = None) -> float:
    """Epoch seconds for ``2026-01-31``, ``2026-01-31T14:00[:SS][+01:00]``
    (local time unless an offset is given) or an age ``30m``/``12h``/``7d``/``2w``."""
    text = text.strip()
    age = _AGE.match(text)
    if age:
        return (time.time() if now is None else now) - int(age.group(1)) * _UNIT_S[age.group(2)]
    dt = datetime.fromisoformat(text)  # ValueError for anything else
    return dt.timestamp()  # a naive value is taken as local time


class When(click.ParamType):
    """A point in time given as a date, a date-time or an age."""

    name = "DATE"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_when(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a date: use 2026-01-31, 2026-01-31T14:00 "
                      "or an age such as 7d", param, ctx)


class SessionId(click.ParamType):
    """A well-formed session id (checked before the store is opened)."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        try:
            return validate_session_id(value)
        except InvalidInput as e:
            self.fail(str(e), param, ctx)
