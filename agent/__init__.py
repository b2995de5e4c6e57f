"""The agent loop on the anthropic SDK; a client of sessiondb."""
from .compact import CompactionPolicy
from .failure import TurnFailure
from .localmodel import LABEL, LocalModelServer, Reply, rule_based
from .loop import Agent, TurnResult, Usage
from .tools import Tool, ToolOutcome, ToolRegistry

__all__ = ["Agent", "TurnResult", "TurnFailure", "Usage", "CompactionPolicy", "Tool", "ToolOutcome",
           "ToolRegistry", "LocalModelServer", "Reply", "rule_based", "LABEL"]
