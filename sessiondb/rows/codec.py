"""Message codec: validate a chat message dict and map it to a row and back.

A message round-trips exactly: `content` lives in its own column (text, or
JSON for block lists), a few fields are copied into typed columns for
queries, and every other key is kept verbatim in `meta`. Keys that start
with ``_db_`` are the store's own bookkeeping (markers) and are never stored.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from typing import Any, NamedTuple

from ..base import InvalidInput, InvalidMessage

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
PRIVATE_PREFIX = "_db_"
MARKER_KEY = "_db_persisted"
UID_KEY = "_db_uid"
# Keys with typed columns; they are stored there *and* left in meta except
# tool_calls, which can be large and lives only in its column.
_COLUMN_COPIES = ("tool_call_id", "finish_reason")

# Limits on what is accepted, so that whatever is stored can be read back by
# any reader (docs/reliability.md, "Hostile input"):
# - times from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z, the range of
#   datetime and of ISO 8601 (1e300 was accepted once and then every reader
#   that formats a time crashed with OverflowError);
MIN_TIME, MAX_TIME = -62135596800.0, 253402300799.0
# - JSON nested at most this deep (json.loads recurses: a 10,000-deep value
#   raised RecursionError, and a deep value written near the recursion limit
#   could not be read by a caller already deep in its stack);
MAX_DEPTH = 100
# - integers of at most 4,300 decimal digits: Python refuses to convert
#   more to or from text by default, so a process that raised its own limit
#   could store numbers no other process can read;
MAX_INT_DIGITS = 4300
_TOO_BIG = 10 ** MAX_INT_DIGITS
# - typed integer columns (token_count) within SQLite's signed 64 bits.
MAX_COLUMN_INT = 2**63 - 1


def time_in_range(value: Any) -> bool:
    """A finite number of epoch seconds within [MIN_TIME, MAX_TIME]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return MIN_TIME <= value <= MAX_TIME  # False for NaN; no float() of a huge int


TIME_RANGE_TEXT = "epoch seconds between 0001-01-01 and 9999-12-31 UTC"


def checked_time(value: Any, what: str) -> float:
    """``value`` as a float if it is a time we can store and read back."""
    if not time_in_range(value):
        raise InvalidInput(f"{what} must be {TIME_RANGE_TEXT}, not {value!r:.40}")
    return float(value)


class Persisted(NamedTuple):
    """The marker a stored dict carries: its row id and content fingerprint."""

    id: int
    fingerprint: str


class EncodedMessage(NamedTuple):
    """A validated message ready to insert (immutable; ``_replace`` for a
    changed copy). A NamedTuple, not a frozen dataclass: it is built once
    per appended message and a frozen dataclass costs ~1 us more to build."""

    uid: str
    role: str
    content_kind: str
    content: str | None
    tool_calls: str | None
    tool_call_id: str | None
    tool_name: str | None
    finish_reason: str | None
    timestamp: float
    token_count: int | None
    meta: str
    fingerprint: str
    tool_call_total: int


def new_uid() -> str:
    """128 random bits as 32 hex digits (uuid4's shape without its ~2 us of
    object building, which showed on the append path)."""
    return os.urandom(16).hex()


def new_uids(n: int) -> list[str]:
    """``n`` uids from one ``os.urandom`` call. Each call releases the GIL
    for its syscall, and while the indexer thread waits for the GIL it takes
    it there: with one call per message a batch of 100 handed the GIL over
    up to 100 times (cProfile: ~20 us per call under load, against ~1 us)."""
    pool = os.urandom(16 * n).hex()
    return [pool[i:i + 32] for i in range(0, 32 * n, 32)]


def strip_markers(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``messages`` without the store's ``_db_*`` keys, for the wire."""
    return [public_fields(m) for m in messages]


def public_fields(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if not (isinstance(k, str) and k.startswith(PRIVATE_PREFIX))}


def _check_text(value: str, field: str, index: int | None) -> None:
    if value.isascii():  # O(1) in CPython (a flag on the string): always encodable
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidMessage(
            f"message field {field!r} contains a lone surrogate at offset {e.start}; "
            "it cannot be stored as UTF-8", field=field, index=index) from None


# One encoder for every call: json.dumps with options builds a new one each time.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_SCALARS = (str, int, float, bool, type(None))


def _flat(value: Any) -> bool:
    """A dict of string keys to plain scalars: JSON gives it back exactly."""
    return (type(value) is dict
            and all(type(k) is str and type(v) in _SCALARS for k, v in value.items()))


def _too_big(value: Any, field: str, index: int | None) -> InvalidMessage:
    return InvalidMessage(f"message field {field!r} holds an integer of more than "
                          f"{MAX_INT_DIGITS:,} digits", field=field, index=index)


def check_shape(value: Any, field: str, index: int | None) -> None:
    """No deeper than MAX_DEPTH, no integer longer than MAX_INT_DIGITS: what
    every reader can parse back. Iterative, so a hostile depth cannot
    exhaust the stack here either; it walks containers, not characters."""
    kind = type(value)
    if kind is not dict and kind is not list and kind is not tuple:
        if isinstance(value, int) and not -_TOO_BIG < value < _TOO_BIG:
            raise _too_big(value, field, index)
        return
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth > MAX_DEPTH:
            raise InvalidMessage(f"message field {field!r} is nested more than "
                                 f"{MAX_DEPTH} levels deep", field=field, index=index)
        for child in (item.values() if type(item) is dict else item):
            kind = type(child)
            if kind is dict or kind is list or kind is tuple:
                push((child, depth + 1))
            elif kind is int and not -_TOO_BIG < child < _TOO_BIG:
                raise _too_big(child, field, index)
            elif kind is not str and isinstance(child, int) and not isinstance(child, bool) \
                    and not -_TOO_BIG < child < _TOO_BIG:  # int subclasses (IntEnum)
                raise _too_big(child, field, index)


def _int_text_unlimited() -> bool:
    """Whether this process lets int<->str go past the default 4,300 digits
    (then the encoder no longer refuses what default readers cannot parse)."""
    limit = sys.get_int_max_str_digits()
    return limit == 0 or limit > 4300


def _dumps(value: Any, field: str, index: int | None) -> str:
    flat = _flat(value)
    if not flat or _int_text_unlimited():  # a flat dict is one level deep
        check_shape(value, field, index)
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidMessage(f"message field {field!r} is not JSON-serializable: {e}",
                             field=field, index=index) from None
    _check_text(text, field, index)
    if not flat and json.loads(text) != value:
        raise InvalidMessage(f"message field {field!r} would not round-trip through JSON "
                             "(tuples, non-string keys?)", field=field, index=index)
    return text


def _content(message: dict[str, Any], index: int | None) -> tuple[str, str | None]:
    if "content" not in message:
        return "absent", None
    value = message["content"]
    if value is None:
        return "null", None
    if isinstance(value, str):
        _check_text(value, "content", index)
        return "text", value
    if isinstance(value, list):
        return "json", _dumps(value, "content", index)
    raise InvalidMessage(f"message field 'content' must be a string, a list of blocks or "
                         f"None, not {type(value).__name__}", field="content", index=index)


def _optional_str(message: dict[str, Any], key: str, index: int | None) -> str | None:
    value = message.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidMessage(f"message field {key!r} must be a string", field=key, index=index)
    return value


def _timestamp(message: dict[str, Any], index: int | None) -> float:
    value = message.get("timestamp")
    if value is None:
        return time.time()
    if not time_in_range(value):
        raise InvalidMessage(f"message field 'timestamp' must be a finite number of "
                             f"{TIME_RANGE_TEXT}", field="timestamp", index=index)
    return float(value)


def _token_count(message: dict[str, Any], index: int | None) -> int | None:
    value = message.get("token_count")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not (
            -MAX_COLUMN_INT <= value <= MAX_COLUMN_INT):
        raise InvalidMessage("message field 'token_count' must be an integer of at most "
                             "64 bits", field="token_count", index=index)
    return value


def _tool_calls(message: dict[str, Any], index: int | None) -> tuple[str | None, int]:
    value = message.get("tool_calls")
    if value is None:
        return None, 0
    if not isinstance(value, list):
        raise InvalidMessage("message field 'tool_calls' must be a list", field="tool_calls",
                             index=index)
    return _dumps(value, "tool_calls", index), len(value)


def encode(message: Any, *, index: int | None = None, uid: str | None = None) -> EncodedMessage:
    """Validate ``message`` and encode it; raises InvalidMessage naming the field."""
    if not isinstance(message, dict):
        raise InvalidMessage(f"a message must be a dict, not {type(message).__name__}",
                             index=index)
    rest = {}  # the keys kept verbatim in meta (tool_calls removed below)
    for key, value in message.items():
        if not isinstance(key, str):
            raise InvalidMessage(f"message keys must be strings, not {key!r}", index=index)
        if not key.isascii():  # (the call only for keys that could fail: hot path)
            _check_text(key, key, index)
        if key != "role" and key != "content" and not key.startswith(PRIVATE_PREFIX):
            rest[key] = value
    get = message.get
    role = get("role")
    if role is None:
        raise InvalidMessage("message has no 'role'", field="role", index=index)
    if not isinstance(role, str) or role not in ROLES:  # a list role is unhashable
        raise InvalidMessage(f"unknown role {role!r}; expected one of {sorted(ROLES)}",
                             field="role", index=index)
    # Absent optional fields (the common case) are settled here without a call;
    # the checks run in the same order, so the first bad field is still named.
    timestamp = time.time() if get("timestamp") is None else _timestamp(message, index)
    token_count = None if get("token_count") is None else _token_count(message, index)
    tool_call_id, tool_name, finish_reason = get("tool_call_id"), get("name"), get("finish_reason")
    if tool_call_id is not None and type(tool_call_id) is not str:
        tool_call_id = _optional_str(message, "tool_call_id", index)
    if tool_name is not None and type(tool_name) is not str:
        tool_name = _optional_str(message, "name", index)
    if finish_reason is not None and type(finish_reason) is not str:
        finish_reason = _optional_str(message, "finish_reason", index)
    value = get("content")
    kind: str
    content: str | None
    if type(value) is str and "content" in message:  # the common case, as _content does it
        kind, content = "text", value
        if not value.isascii():
            _check_text(value, "content", index)
    else:
        kind, content = _content(message, index)
    tool_calls, total = (None, 0) if get("tool_calls") is None else _tool_calls(message, index)
    if tool_calls is not None:
        del rest["tool_calls"]
    meta = _dumps_fields(rest, index) if rest else "{}"
    return EncodedMessage(
        uid or _given_uid(message, index) or new_uid(), role, kind, content, tool_calls,
        tool_call_id, tool_name, finish_reason, timestamp, token_count, meta,
        fingerprint_of(role, kind, content, tool_calls, meta), total)


def _given_uid(message: dict[str, Any], index: int | None) -> str | None:
    """The dict's own ``_db_uid``, which must be text (it is bound as a key)."""
    value = message.get(UID_KEY)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidMessage(f"message field {UID_KEY!r} must be a string", field=UID_KEY,
                             index=index)
    _check_text(value, UID_KEY, index)
    return value


_QUOTE = json.encoder.encode_basestring  # what _ENCODER writes for a str (ensure_ascii off)


def _ascii_str_fields(fields: dict[str, Any]) -> str | None:
    """The JSON _ENCODER writes for a dict of ASCII str keys to ASCII str
    values (e.g. ``{"finish_reason": "stop"}``), built directly: the
    encoder's Python layers cost more than the text. None otherwise."""
    parts = []
    for k, v in fields.items():
        if type(k) is not str or type(v) is not str or not (k.isascii() and v.isascii()):
            return None
        parts.append(_QUOTE(k) + ":" + _QUOTE(v))
    return "{" + ",".join(parts) + "}"


def _dumps_fields(fields: dict[str, Any], index: int | None) -> str:
    """JSON of the remaining keys; on failure, name the key that failed."""
    if not fields:
        return "{}"  # the common case (role + content only): skip the round trip
    text = _ascii_str_fields(fields)
    if text is not None:
        return text
    try:
        return _dumps(fields, "meta", index)
    except InvalidMessage:
        for key, value in fields.items():
            _dumps(value, key, index)
        raise


def _chunk(text: str) -> bytes:
    data = text.encode("utf-8")
    return len(data).to_bytes(8, "little") + data


_NO_TEXT = bytes(8)  # the chunk of "" (and of a None part)
# Roles, content kinds and the empty meta recur in nearly every message.
_FIXED = {t: _chunk(t) for t in (*ROLES, "text", "json", "null", "absent", "{}")}


def fingerprint_of(role: str, kind: str, content: str | None, tool_calls: str | None,
                   meta: str) -> str:
    """A short hash of everything that makes a message what it is: each part
    as its UTF-8 length (8 bytes, little-endian) and bytes, in this order."""
    fixed = _FIXED.get
    data = content.encode("utf-8") if content else b""
    h = hashlib.blake2b(b"".join((fixed(role) or _chunk(role), fixed(kind) or _chunk(kind),
                                  len(data).to_bytes(8, "little"))), digest_size=12)
    h.update(data)  # content apart: a long text is hashed without another copy
    h.update(b"".join((_chunk(tool_calls) if tool_calls else _NO_TEXT,
                       fixed(meta) or _chunk(meta))))
    return h.hexdigest()


def decode(role: str, content_kind: str, content: str | None, tool_calls: str | None,
           meta: str, finish_reason: str | None = None) -> dict[str, Any]:
    """The message dict a row stores (without markers). ``finish_reason`` is
    the row's column: a compact row (m010) keeps it only there when it was
    the last key of meta, and it goes back in that place. ``role`` and
    ``meta`` may be in their coded forms (m012, `role_key`, `stored_meta`)."""
    message: dict[str, Any] = {"role": ROLE_NAMES.get(role, role)}  # a coded row (m012)
    if content_kind == "text":
        message["content"] = content
    elif content_kind == "json":
        message["content"] = json.loads(content or "null")
    elif content_kind == "null":
        message["content"] = None
    if meta and meta != "{}":  # most rows have no extra keys ('' since m012): no parse
        message.update(json.loads(meta))
    if finish_reason is not None and "finish_reason" not in message:
        message["finish_reason"] = finish_reason
    if tool_calls is not None:
        message["tool_calls"] = json.loads(tool_calls)
    return message


# -- the stored form of a row (m010, docs/row-format.md) ---------------------
#
# EncodedMessage holds the logical values (what the PostgreSQL backend stores
# as they are, and what the fingerprint hashes); a SQLite row stores three of
# them compactly. Rows written before m010 hold text and stay readable: the
# readers below take both forms.

def uid_key(uid: str) -> bytes | str:
    """A uid as stored: 32 lowercase hex digits (every generated uid) as its
    16 bytes, anything else as the text itself. The map is one-to-one, so
    the (session_id, uid) unique index still means "one row per uid"."""
    if len(uid) == 32:
        try:
            raw = bytes.fromhex(uid)
        except ValueError:
            return uid
        if len(raw) == 16 and raw.hex() == uid:  # (fromhex takes upper case and spaces)
            return raw
    return uid


def uid_text(value: Any) -> Any:
    """A stored uid (or fingerprint) back as its text; text passes through."""
    return value.hex() if type(value) is bytes else value


def fingerprint_key(fingerprint: str) -> bytes | str:
    """A fingerprint as stored: its 12 bytes (text if it is not lowercase hex)."""
    try:
        raw = bytes.fromhex(fingerprint)
    except ValueError:
        return fingerprint
    return raw if raw.hex() == fingerprint else fingerprint


fingerprint_text = uid_text


def _finish_tail(finish_reason: str) -> str:
    return '"finish_reason":' + _QUOTE(finish_reason) + "}"


def stored_meta(meta: str, finish_reason: str | None) -> str:
    """``meta`` as a compact row stores it: without its last key when that
    key is ``finish_reason`` holding the column's value (the column already
    has it; `decode` puts it back in the same place). Matching the encoder's
    exact text of that last member is enough: the final ``}`` closes the
    object, so the string before it is the last member's value. An empty
    object is stored as ``''`` (m012): logical meta is never empty text."""
    if finish_reason is None:
        return "" if meta == "{}" else meta
    tail = _finish_tail(finish_reason)
    if not meta.endswith(tail):
        return "" if meta == "{}" else meta
    head = meta[:-len(tail)]
    if head == "{":
        return ""
    if head.endswith(","):
        return head[:-1] + "}"
    return meta


def logical_meta(meta: str, finish_reason: str | None) -> str:
    """The meta text a stored row stands for (what the fingerprint hashes):
    `stored_meta` undone. Parses the JSON: for checks, not the hot path."""
    if meta == "":
        meta = "{}"
    if finish_reason is None:
        return meta
    try:
        fields = json.loads(meta)
    except (TypeError, ValueError):
        return meta
    if not isinstance(fields, dict) or "finish_reason" in fields:
        return meta
    return ("{" if meta == "{}" else meta[:-1] + ",") + _finish_tail(finish_reason)


# -- coded fields (m012, docs/row-format.md) ----------------------------------
#
# Role and kind are stored as short codes in SQLite rows, one-to-one with
# their logical values; readers give back the logical value. The role set
# is closed (ROLES, checked by `encode`), so a one-character code can never
# meet a role spelled that way; kind is never empty (the importer checks).

ROLE_CODES = {"system": "s", "developer": "d", "user": "u", "assistant": "a", "tool": "t"}
ROLE_NAMES = {code: role for role, code in ROLE_CODES.items()}
MESSAGE_KIND = "message"


def role_key(role: str) -> str:
    """A role as a SQLite row stores it: its one-character code."""
    return ROLE_CODES.get(role, role)


def role_text(value: Any) -> Any:
    """A stored role back as its name (a name passes through: older rows)."""
    return ROLE_NAMES.get(value, value)


def kind_key(kind: str) -> str:
    """A row kind as stored: the common ``message`` as ``''``, others as they are."""
    return "" if kind == MESSAGE_KIND else kind


def kind_text(value: Any) -> Any:
    """A stored kind back as its name."""
    return MESSAGE_KIND if value == "" else value
