"""A corpus of real text on this machine, cut to the prose corpus's lengths.

The generated corpora (bench/common.py) pack far better than real text:
the prose corpus draws syllable words from a fixed vocabulary and the
scale corpus slices one pool of ~40 words. This corpus cuts real English
(the installed packages' READMEs and documentation, /usr/share/doc's
READMEs and NEWS files) and real code (the Python standard library) into
consecutive pieces at line ends, with the prose corpus's length per
message, two pieces of English for one of code, and shuffles them with a
fixed seed; no piece of text is used twice (on the machine the figures in
docs/ come from: ~26,000 pieces of English, so past ~39,000 messages the
rest is code). The files differ from machine
to machine, so figures on it hold for the machine they were taken on.
"""
from __future__ import annotations

import gzip
import random
import sys
import sysconfig
from pathlib import Path
from typing import Any, Iterator

_CHUNKS: list[str] = []


def _english_files() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    found = [p for pat in ("*.md", "*.rst", "METADATA") for p in site.rglob(pat)]
    doc = Path("/usr/share/doc")
    if doc.is_dir():
        found += [p for p in doc.rglob("*") if p.is_file()
                  and p.name.split(".")[0].upper() in ("README", "NEWS")]
    return sorted(set(found))


def _code_files() -> list[Path]:
    return sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))


def _read(path: Path) -> str:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return ""


def _pieces(files: list[Path], lengths: Iterator[int]) -> Iterator[str]:
    seen: set[str] = set()
    for path in files:
        text = _read(path)
        if not text or text in seen:  # the same README installed twice
            continue
        seen.add(text)
        cur, want = "", next(lengths)
        for line in text.splitlines(keepends=True):
            cur += line
            if len(cur) >= want:
                yield cur.strip()
                cur, want = "", next(lengths)


def _lengths(seed: int) -> Iterator[int]:
    rng = random.Random(seed)
    while True:  # the prose corpus: 8-160 words, ~344 characters on average
        yield int(rng.triangular(8, 160, 39) * 5.0)


def _build(count: int) -> None:
    english = _pieces(_english_files(), _lengths(1))
    code = _pieces(_code_files(), _lengths(2))
    while len(_CHUNKS) < count:
        batch = [next(english, None), next(english, None), next(code, None)]
        got = [c for c in batch if c]
        if not got:
            sys.exit(f"real text: this machine's files give only {len(_CHUNKS)} messages")
        _CHUNKS.extend(got)


def real_message(i: int) -> dict[str, Any]:
    """Message ``i`` of the corpus; replies carry a finish_reason, as in the prose corpus."""
    if len(_CHUNKS) <= i:
        _build(max(2 * i, 20_000))
        random.Random(344).shuffle(_CHUNKS)  # once: the first call builds more than asked
    text = _CHUNKS[i]
    if i % 2:
        return {"role": "assistant", "content": text, "finish_reason": "stop"}
    return {"role": "user", "content": text}
