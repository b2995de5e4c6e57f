"""A local model that speaks the Messages API, for the demo and the tests."""
from .server import LABEL, LocalModelServer, Reply, rule_based

__all__ = [
    "LABEL",
    "LocalModelServer",
    "Reply",
    "rule_based",
]
