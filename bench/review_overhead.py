"""Overhead of the background review on the live turn.

A live turn is started while the review of the previous turn is streaming
(a slow scripted reply: 16 characters every 20 ms). We measure how long the
new turn waits for the review to acknowledge its cancellation
(`TurnResult.review_wait_s`) and the whole live turn's latency, beside the
floor: the same live turn with no review in flight, measured in the same
run, interleaved. Local scripted model over real HTTP with the real SDK.

    python bench/review_overhead.py [--rounds 30] [--quick] [--json]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anthropic  # noqa: E402

from hstate_agent import Agent, Reply  # noqa: E402
from hstate_agent.localmodel.server import LocalModelServer  # noqa: E402
from hstate_agent.review.review_config import ReviewConfig  # noqa: E402
from hstate_agent.review.review_prompt import is_review_request  # noqa: E402
from bench.common import median, percentile  # noqa: E402
from sessiondb import SessionDB  # noqa: E402


class Script:
    def __init__(self, chunk_delay: float) -> None:
        self.review_seen = 0
        self.chunk_delay = chunk_delay

    def __call__(self, request: dict) -> Reply:
        if is_review_request(request):
            self.review_seen += 1
            return Reply.text("considering " * 300, chunk_delay=self.chunk_delay)
        return Reply.text("Live answer.")


def one_round(agent: Agent, script: Script, reviewed: bool) -> tuple[float, float, str]:
    """(seconds waited for the review, seconds of the whole live turn, how the
    review ended)."""
    if reviewed:
        seen = script.review_seen
        agent.reviewer.config = ReviewConfig()
        agent.run_turn("prepare")  # completes; its review starts streaming
        deadline = time.monotonic() + 5
        while script.review_seen == seen and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(random.uniform(0.05, 0.3))  # somewhere inside the stream
    agent.reviewer.config = ReviewConfig(enabled=False)
    t0 = time.perf_counter()
    result = agent.run_turn("the live turn")
    total = time.perf_counter() - t0
    assert result.completed, result.failure_reason
    status = agent.reviewer.last.status if reviewed and agent.reviewer.last else "-"
    return result.review_wait_s, total, status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="10 rounds")
    ap.add_argument("--chunk-delay", type=float, default=0.02,
                    help="seconds between the review's streamed chunks (default 0.02)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rounds = 10 if args.quick else args.rounds
    script = Script(args.chunk_delay)
    waits, with_review, floor = [], [], []
    cancelled = 0
    with tempfile.TemporaryDirectory() as home, SessionDB.open(home) as db, \
            LocalModelServer(script) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="local", max_retries=0)
        agent = Agent(db, client=client, system_prompt="Be brief.")
        one_round(agent, script, False)  # warm-up
        for _ in range(rounds):
            w, t, status = one_round(agent, script, True)
            waits.append(w)
            with_review.append(t)
            cancelled += status == "cancelled"
            floor.append(one_round(agent, script, False)[1])
    ms = lambda xs, q: round(percentile(xs, q) * 1000, 2)  # noqa: E731
    doc = {"rounds": rounds, "cancelled_reviews": cancelled, "chunk_delay_s": args.chunk_delay,
           "wait_ms": {"p50": ms(waits, 50), "p95": ms(waits, 95), "max": ms(waits, 100)},
           "live_turn_ms": {"p50": ms(with_review, 50), "p95": ms(with_review, 95)},
           "floor_turn_ms": {"p50": ms(floor, 50), "p95": ms(floor, 95)},
           "ratio_p50": round(median(with_review) / median(floor), 2)}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"rounds {rounds} ({cancelled} reviews cancelled mid-stream, a chunk every "
              f"{args.chunk_delay * 1000:g} ms): wait for the review to stop p50 {doc['wait_ms']['p50']} ms, "
              f"p95 {doc['wait_ms']['p95']} ms, max {doc['wait_ms']['max']} ms (target: "
              "max <= 2000, p50 < 50)")
        print(f"live turn with a review in flight p50 {doc['live_turn_ms']['p50']} ms vs "
              f"floor (no review) p50 {doc['floor_turn_ms']['p50']} ms: "
              f"x{doc['ratio_p50']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
