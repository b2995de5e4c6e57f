"""How much message-sized pieces of real text shrink when packed one by one.

The prose corpus (bench/common.py) draws syllable words from a fixed
vocabulary, so it packs better than real text; this measures the codecs
bench/layout_whatif.py sizes on real English (and code) instead: the long
descriptions (READMEs) of the installed packages, or any text files given,
cut into messages of about ``--chars`` characters at line ends. A
dictionary is trained on half of the messages and the other half is
packed, each message alone, as a row would be.

    python bench/pack_ratio.py [--chars 340] [FILE ...]
"""
from __future__ import annotations

import argparse
import random
import sys
import zlib
from importlib import metadata
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layout_whatif import DICT_BYTES, PACK_MIN  # noqa: E402


def corpus_texts(files: list[str]) -> list[str]:
    if files:
        return [Path(f).read_text(errors="replace") for f in files]
    texts = []
    for dist in metadata.distributions():
        body = dist.metadata.get_payload() if dist.metadata else None  # type: ignore[attr-defined]
        if body:
            texts.append(body)
    return texts


def messages(texts: list[str], chars: int) -> list[str]:
    out, cur = [], ""
    for text in texts:
        for line in text.splitlines(keepends=True):
            cur += line
            if len(cur) >= chars:
                out.append(cur)
                cur = ""
    return [m for m in out if len(m) >= PACK_MIN]


def packed_size(codec: object, raw: bytes) -> int:
    if codec is None:
        got = len(zlib.compress(raw, 6))
    else:
        got = len(codec.compress(raw)) - 4  # type: ignore[attr-defined]
    return min(got, len(raw))  # kept plain when packing does not pay


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--chars", type=int, default=340)
    args = ap.parse_args()
    msgs = [m.encode() for m in messages(corpus_texts(args.files), args.chars)]
    random.Random(1).shuffle(msgs)
    train, test = msgs[: len(msgs) // 2], msgs[len(msgs) // 2:]
    opts = {"level": 3, "write_checksum": False, "write_content_size": False, "write_dict_id": False}
    trained = zstandard.train_dictionary(DICT_BYTES, train[:4000])
    codecs = {"zlib 6": None, "zstd 3": zstandard.ZstdCompressor(**opts),  # type: ignore[arg-type]
              "zstd 3 + 16 KiB dictionary": zstandard.ZstdCompressor(dict_data=trained, **opts)}  # type: ignore[arg-type]
    raw = sum(len(m) for m in test)
    print(f"{len(test):,} messages of real text, {raw / len(test):.0f} bytes on average")
    for name, codec in codecs.items():
        size = sum(packed_size(codec, m) for m in test)
        print(f"  {name}: {size / raw:.0%} of the raw bytes ({size / len(test):.0f} B/msg)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
