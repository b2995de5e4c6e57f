"""Active-transcript tokens over a scripted 12-exchange conversation,
with and without micro-compaction (local scripted model, real SDK over HTTP).

    python bench/micro_compaction.py [--threshold 1500] [--turns 12]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anthropic  # noqa: E402

from hstate_agent import Agent, CompactionPolicy  # noqa: E402
from hstate_agent.compact import estimate_tokens  # noqa: E402
from hstate_agent.localmodel.server import LocalModelServer  # noqa: E402
from hstate_agent.localmodel.scripted import calc_registry, exchange_script  # noqa: E402
from sessiondb import SessionDB  # noqa: E402


def run(policy: CompactionPolicy | None, turns: int) -> list[int]:
    with tempfile.TemporaryDirectory() as home, SessionDB.open(home) as db, \
            LocalModelServer(exchange_script) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="local", max_retries=0)
        agent = Agent(db, client=client, system_prompt="You are careful.",
                      tools=calc_registry(), micro_compact=policy)
        sizes = []
        for i in range(turns):
            agent.run_turn(f"compute step {i} please")
            sizes.append(estimate_tokens(agent.messages))
        return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threshold", type=int, default=1500)
    ap.add_argument("--turns", type=int, default=12)
    args = ap.parse_args()
    off = run(None, args.turns)
    on = run(CompactionPolicy(token_threshold=args.threshold, keep_tail=6), args.turns)
    print("exchange  tokens_without  tokens_with  ratio")
    for i, (a, b) in enumerate(zip(off, on), 1):
        print(f"{i:8d}  {a:14d}  {b:11d}  {b / a:5.2f}")
    print(f"final: {on[-1]} vs {off[-1]} tokens ({on[-1] / off[-1]:.2f}x) "
          f"with threshold {args.threshold}")


if __name__ == "__main__":
    main()
