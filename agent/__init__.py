"""The agent loop on the anthropic SDK; a client of sessiondb."""
from .compact import CompactionPolicy
from .errors import AgentError
from .failure import TurnFailure
from .localmodel import LABEL, LocalModelServer, Reply, rule_based
from .loop import Agent, DEFAULT_MODEL, TurnResult, Usage
from .memory import MemoryConfig, load_memory_config
from .review import ReviewConfig, ReviewResult, load_review_config
from .tools import Tool, ToolOutcome, ToolRegistry

__all__ = ["Agent", "DEFAULT_MODEL", "AgentError", "TurnResult", "TurnFailure", "Usage",
           "CompactionPolicy", "Tool", "ToolOutcome", "ToolRegistry", "LocalModelServer", "Reply",
           "rule_based", "LABEL", "ReviewConfig", "ReviewResult", "load_review_config",
           "MemoryConfig", "load_memory_config"]
