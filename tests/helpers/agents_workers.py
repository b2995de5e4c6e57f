"""A process appending to an Agents SDK session through HermesSession until
it is killed: ``python -m tests.helpers.agents_workers PATH SESSION TAG``.

Each batch is three items; after ``add_items`` returns, the batch number is
written to stdout (flushed): that line is the acknowledgement a caller
relies on."""
from __future__ import annotations

import asyncio
import sys

from sessiondb.integrations.openai_agents import HermesSession


async def append_forever(path: str, session_id: str, tag: str) -> None:
    session = HermesSession(session_id, path)
    n = 0
    while True:
        await session.add_items([{"role": "user", "content": f"{tag}.{n}.{k} " + "x" * 200}
                                 for k in range(3)])
        sys.stdout.write(f"{n}\n")
        sys.stdout.flush()
        n += 1


if __name__ == "__main__":
    asyncio.run(append_forever(sys.argv[1], sys.argv[2], sys.argv[3]))
