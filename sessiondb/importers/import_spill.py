"""The import's checked records, spilled to a private file between its two passes.

An import checks the whole stream before it writes anything (see
importer.py). The checking pass already parses every line and encodes
every message; instead of doing both again, it writes each checked record
(messages as their encoded row) to a spill file, and the writing pass reads
that back: no JSON parsing and no encoding twice, and memory stays one
record. The file is ours alone: a 0700 directory beside the store (its name
starts with doctor's scratch prefix, so a leftover one is found and
removed), deleted when the import ends however it ends.
"""
from __future__ import annotations

import marshal
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any, Callable, IO, Iterator

from ..rows import EncodedMessage

# Starts with hstate_recovery.source.liveread.SCRATCH_PREFIX, which doctor --fix cleans up.
PREFIX = ".hermes-scratch-import-"
BUFFER = 1 << 20
_LENGTH = struct.Struct("<I")


class Spill:
    """Write records once (``write``), then read them back in order (``read``)."""

    def __init__(self, beside: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=beside))
        self.path = self.dir / "records.bin"
        self._out: IO[bytes] | None = open(self.path, "xb", buffering=BUFFER)

    def write(self, record: tuple[Any, ...]) -> None:
        """One record: a tuple of plain values, length-prefixed ``marshal``
        (a tenth of pickle.load's cost per record; the file lives only as long
        as this process, so marshal's version-specific format is fine)."""
        assert self._out is not None
        data = marshal.dumps(record)
        self._out.write(_LENGTH.pack(len(data)))
        self._out.write(data)

    def read(self) -> Iterator[tuple[Any, ...]]:
        if self._out is not None:
            self._out.close()
            self._out = None
        with open(self.path, "rb", buffering=BUFFER) as f:
            while head := f.read(_LENGTH.size):
                (n,) = _LENGTH.unpack(head)
                yield marshal.loads(f.read(n))

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Spill":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encoded_from(values: tuple[Any, ...]) -> EncodedMessage:
    return EncodedMessage._make(values)


SpillWriter = Callable[[tuple[Any, ...]], None]
