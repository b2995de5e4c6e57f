"""Agents SDK items as message rows, and back, exactly.

An item of the Responses API (what an Agents SDK session holds) becomes one
message dict the store's codec takes, in one of two forms:

- **plain**: an item with a chat role (``user``, ``assistant``, ``system``,
  ``developer``) and string content is already a message: it is stored as
  it is (its other keys, ``type``, ``id``, ``status``, ..., go to the row's
  meta, verbatim), unless it has a key the codec reads into a column of
  its own (``name``, ``timestamp``, ...).
- **wrapped**: any other item (part-list content, function calls and their
  outputs, reasoning, computer and hosted tool calls, types the SDK adds
  later) is kept whole under `ITEM_KEY`, with a role chosen for reading
  (``tool`` for outputs, ``assistant`` otherwise) and the text worth
  searching (message text, tool arguments and outputs, queries, code) as
  the row's content, so the store's search index sees it. When that text
  sits in one place of the item, it is moved out rather than copied: the
  item keeps ``None`` there and `TEXT_AT_KEY` names the place.

`to_message` and `from_message` are inverse: ``from_message(to_message(i))``
is JSON-equal to ``i`` for every JSON item.
"""
from __future__ import annotations

from typing import Any, Iterable

import json

from ..rows import PRIVATE_PREFIX, ROLE_CODES, ROLES, decode

#: The meta key of a wrapped row holding the item.
ITEM_KEY = "agents_item"
#: The meta key naming where in the item the row's content was taken from.
TEXT_AT_KEY = "agents_text_at"
#: Keys whose string values are the text worth searching, at any depth.
TEXT_KEYS = frozenset({"text", "refusal", "arguments", "output", "input", "query",
                       "queries", "code", "command", "summary", "content"})
#: Roles an item may carry as its own.
_CHAT_ROLES = ROLES - {"tool"}
#: Keys the codec reads into typed columns (and checks): an item holding one
#: is wrapped, so its value is kept as the item had it.
_CODEC_KEYS = frozenset({"tool_calls", "tool_call_id", "name", "finish_reason", "timestamp",
                         "token_count"})
_SEPARATOR = "\n"
#: Text walks stop this deep (the codec refuses deeper values anyway).
_MAX_DEPTH = 100

Path = list[Any]


def to_message(item: Any) -> dict[str, Any]:
    """The message dict that stores ``item`` (a new dict; the item is not changed)."""
    if type(item) is dict and _plain(item):
        return dict(item)
    return _wrapped(item)


def _plain(item: dict[str, Any]) -> bool:
    if item.get("role") not in _CHAT_ROLES or type(item.get("content")) is not str:
        return False
    return not any(type(k) is not str or k.startswith(PRIVATE_PREFIX)
                   or k in _CODEC_KEYS or k in (ITEM_KEY, TEXT_AT_KEY) for k in item)


def _wrapped(item: Any) -> dict[str, Any]:
    """The wrapped form: a role for reading, the searchable text as content."""
    slots = text_slots(item) if isinstance(item, dict) else []
    message: dict[str, Any] = {"role": role_for(item)}
    if len(slots) == 1:
        path, text = slots[0]
        message["content"] = text
        message[ITEM_KEY] = replaced(item, path, None)
        message[TEXT_AT_KEY] = path
        return message
    if slots:
        message["content"] = _SEPARATOR.join(text for _, text in slots)
    message[ITEM_KEY] = item
    return message


def role_for(item: Any) -> str:
    """The row's role: the item's own chat role, ``tool`` for a tool's
    output, ``assistant`` for everything else the model produced."""
    if not isinstance(item, dict):
        return "assistant"
    role = item.get("role")
    if role in _CHAT_ROLES:
        return str(role)
    kind = item.get("type")
    if isinstance(kind, str) and kind.endswith("_output"):
        return "tool"
    return "assistant"


def text_slots(item: dict[str, Any]) -> list[tuple[Path, str]]:
    """(path, text) of every non-empty string held by a `TEXT_KEYS` key (as
    its value, or in a list that is its value), in document order. Nested
    objects choose again by their own keys, so image data, ids and file
    references inside a part list are left out."""
    found: list[tuple[Path, str]] = []
    stack: list[tuple[Any, Path, bool, int]] = [(item, [], False, 0)]
    while stack:
        value, path, wanted, depth = stack.pop()
        if isinstance(value, str):
            if wanted and value:
                found.append((path, value))
            continue
        if depth >= _MAX_DEPTH:
            continue
        if isinstance(value, dict):
            children = [(v, path + [k], k in TEXT_KEYS) for k, v in value.items()]
        elif isinstance(value, list):
            children = [(v, path + [i], wanted) for i, v in enumerate(value)]
        else:
            continue
        stack.extend((v, p, w, depth + 1) for v, p, w in reversed(children))
    return found


def replaced(value: Any, path: Path, new: Any) -> Any:
    """``value`` with the element at ``path`` set to ``new``: the containers
    along the path are copied, everything else is shared."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy = list(value) if isinstance(value, list) else dict(value)
    copy[head] = replaced(value[head], rest, new)
    return copy


def from_message(message: dict[str, Any], *, owned: bool = False) -> Any:
    """The item a stored message dict holds (store markers are dropped).
    ``owned``: the dict was just decoded for this call and has no markers,
    so it may be returned, or changed in place, rather than copied."""
    if ITEM_KEY not in message:
        if owned:
            return message
        return {k: v for k, v in message.items() if not k.startswith(PRIVATE_PREFIX)}
    item = message[ITEM_KEY]
    path = message.get(TEXT_AT_KEY)
    if isinstance(path, list):
        if owned and path:
            _set_in_place(item, path, message.get("content"))
        else:
            item = replaced(item, path, message.get("content"))
    return item


#: How a wrapped row's stored meta starts (the codec writes keys in order, compactly).
_WRAPPED_META = '{"' + ITEM_KEY + '":'
_ROLE_NAMES = {code: name for name, code in ROLE_CODES.items()}
#: ``json.loads`` without its whitespace scans: a stored meta has none around
#: it, and one that has (or has anything after its object) is left to `decode`.
_parse_at_start = json.JSONDecoder().raw_decode

def items_from_rows(rows: Iterable[tuple[Any, ...]]) -> list[Any]:
    """The items stored rows hold, from their columns as `messages.live_rows`
    reads them. The two forms `to_message` writes are read without the
    general decoder, a wrapped one with one JSON parse of its meta; any
    other row goes through `decode`."""
    items: list[Any] = []
    append = items.append
    for role, kind, content, tool_calls, meta, finish_reason in rows:
        if tool_calls is None and finish_reason is None:
            if not meta and kind == "text":
                append({"role": _ROLE_NAMES.get(role, role), "content": content})
                continue
            if meta.startswith(_WRAPPED_META) and kind in ("text", "absent"):
                item = _wrapped_item(meta, content)
                if item is not _NOT_WRAPPED:
                    append(item)
                    continue
        append(from_message(decode(role, kind, content, tool_calls, meta, finish_reason),
                            owned=True))
    return items


def item_from_row(role: str, kind: str, content: str | None, tool_calls: str | None,
                  meta: str, finish_reason: str | None) -> Any:
    """The item one stored row holds (`items_from_rows` of one row)."""
    return items_from_rows([(role, kind, content, tool_calls, meta, finish_reason)])[0]


_NOT_WRAPPED = object()


def _wrapped_item(meta: str, content: str | None) -> Any:
    """The item of a wrapped row's meta (``{"agents_item":ITEM}``, or with
    ``"agents_text_at":PATH`` after it) with the row's content put back at
    PATH; `_NOT_WRAPPED` when the meta is not one such JSON object alone."""
    try:
        fields, end = _parse_at_start(meta)
    except ValueError:
        return _NOT_WRAPPED
    if end != len(meta) or type(fields) is not dict:
        return _NOT_WRAPPED
    item = fields[ITEM_KEY]  # the meta starts with this key
    if len(fields) == 1:
        return item
    path = fields.get(TEXT_AT_KEY)
    if len(fields) > 2 or path is None:
        return _NOT_WRAPPED
    if type(path) is list and path:
        target = item
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = content
    return item


def _set_in_place(value: Any, path: Path, new: Any) -> None:
    for step in path[:-1]:
        value = value[step]
    value[path[-1]] = new


__all__ = ["ITEM_KEY", "TEXT_AT_KEY", "TEXT_KEYS", "to_message", "from_message", "item_from_row",
           "items_from_rows",
           "role_for",
           "text_slots", "replaced"]
