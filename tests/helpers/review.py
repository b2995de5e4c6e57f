"""A local-model script that answers the live turn and the review fork apart.

The fork's requests carry the review prompt, so one server can script both:
``live`` and ``review`` are queues of replies (or callables for the
review's every request); an exhausted queue answers 500.
"""
from __future__ import annotations

import json
import threading
from typing import Any, Callable

import anthropic

from hstate_agent.localmodel.server import LocalModelServer, Reply
from hstate_agent.localmodel.localmodel_http import build_message, count_tokens
from hstate_agent.review.review_prompt import is_review_request


class TwoScripts:
    def __init__(self, live: list[Reply], review: list[Reply] | Callable[[dict], Reply]):
        self.live, self.review = list(live), review
        self.lock = threading.Lock()
        self.review_started = threading.Event()
        self.replies: list[tuple[bool, dict[str, Any], Reply]] = []  # (is_review, req, reply)

    def __call__(self, request: dict[str, Any]) -> Reply:
        review = is_review_request(request)
        with self.lock:
            if review:
                self.review_started.set()
                reply = (self.review(request) if callable(self.review)
                         else self.review.pop(0) if self.review else Reply.error(500, "api_error"))
            else:
                reply = self.live.pop(0) if self.live else Reply.error(500, "api_error")
            self.replies.append((review, request, reply))
        return reply

    def reported(self, review: bool) -> dict[str, int]:
        """The usage the server reported for the live (or the review's) calls."""
        total = {"input_tokens": 0, "output_tokens": 0, "api_calls": 0}
        for is_review, request, reply in self.replies:
            if is_review != review or reply.status != 200:
                continue
            usage = build_message(reply, request)["usage"]
            total["input_tokens"] += usage["input_tokens"]
            total["output_tokens"] += usage["output_tokens"]
            total["api_calls"] += 1
        return total


def client_for(server: LocalModelServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="local-test", max_retries=0)


def top_level_spans(raw: bytes) -> dict[str, bytes]:
    """The exact bytes of each top-level value of a JSON object body."""
    text = raw.decode("utf-8")
    decoder = json.JSONDecoder()
    spans: dict[str, bytes] = {}
    i = text.index("{") + 1
    while True:
        while text[i] in " \t\r\n,":
            i += 1
        if text[i] == "}":
            return spans
        key, i = decoder.raw_decode(text, i)
        i = text.index(":", i) + 1
        while text[i] in " \t\r\n":
            i += 1
        _value, end = decoder.raw_decode(text, i)
        spans[key] = text[i:end].encode("utf-8")
        i = end


__all__ = ["TwoScripts", "client_for", "top_level_spans", "count_tokens"]
