"""The codec's fast paths (ASCII text skips the UTF-8 probe, one hash call
for the fingerprint, one pass over the keys) change no result: stored
fingerprints, refusals and round-trips are exactly what they were."""
from __future__ import annotations

import pytest

from sessiondb import MARKER_KEY, InvalidMessage, strip_markers
from sessiondb.rows.codec import UID_KEY, encode, fingerprint_of

# Digests computed by the part-by-part hashing before the fast path; rows
# written by earlier versions carry them, and a changed digest would make
# every reloaded transcript look edited.
GOLDEN = [
    (("user", "text", "hello", None, "{}"), "ecea20b62993f923ca1058b5"),
    (("assistant", "json", '[{"type":"text","text":"é 😀"}]', '[{"id":"c1"}]',
      '{"ñ":"x\\u0000"}'), "e4d0f96c0d4e30f7ab454e43"),
]


@pytest.mark.parametrize("parts, digest", GOLDEN)
def test_fingerprints_are_the_ones_already_stored(parts, digest):
    assert fingerprint_of(*parts) == digest


def test_encoded_message_fingerprint_and_meta_unchanged():
    enc = encode({"role": "assistant", "content": "a\x00b 😀 é 漢", "finish_reason": "stop",
                  "ключ": [1, {"x": None}], UID_KEY: "u"})
    assert enc.fingerprint == "4862c29ba21f906285fc23d7"
    assert enc.meta == '{"finish_reason":"stop","ключ":[1,{"x":null}]}'
    assert enc.uid == "u" and enc.content == "a\x00b 😀 é 漢"


@pytest.mark.parametrize("bad, field, offset", [
    ({"role": "user", "content": "plain ascii then \ud800"}, "content", 17),
    ({"role": "user", "content": "\udfff"}, "content", 0),
    ({"role": "user", "content": "x", "k\ud800": 1}, "k\ud800", 1),
    ({"role": "user", "content": "x", "note": "ok \udc80"}, "note", None),
    ({"role": "user", "content": "x", UID_KEY: "u\ud800"}, UID_KEY, 1),
])
def test_lone_surrogates_are_still_refused_by_field(bad, field, offset):
    with pytest.raises(InvalidMessage) as info:
        encode(bad, index=3)
    assert info.value.field == field
    assert info.value.index == 3
    if offset is not None:
        assert f"offset {offset}" in str(info.value)


def test_text_round_trips_exactly_through_the_store(db, sid):
    texts = ["", "plain", "nul\x00inside\x00", "😀", "é", "日本語", "\x7f\x00\x01",
             "mixed ascii 😀 and\x00nul"]
    batch = [{"role": "user", "content": t} for t in texts]
    batch.append({"role": "assistant", "content": "x", "ñ": "ü", "n": 1})
    expected = strip_markers(batch)
    db.append_messages(sid, batch)
    loaded = db.get_messages(sid)
    assert strip_markers(loaded) == expected
    assert [type(m["content"]) for m in loaded] == [str] * len(batch)
    # The fingerprint the append marked is the one a reload computes.
    assert [m[MARKER_KEY] for m in loaded] == [m[MARKER_KEY] for m in batch]
    assert all(encode(m).fingerprint == m[MARKER_KEY].fingerprint for m in loaded)


def test_private_keys_stay_out_of_meta_and_order_is_kept():
    enc = encode({"z": 1, "role": "user", "_db_x": 2, "content": "c", "a": 3,
                  "tool_calls": None})
    assert enc.meta == '{"z":1,"a":3,"tool_calls":null}'
    assert enc._replace(timestamp=1.0).timestamp == 1.0  # the spool's re-import copy
    with pytest.raises(AttributeError):
        enc.timestamp = 2.0  # type: ignore[misc]
