"""Agents built on other frameworks, persisting through the store.

`sessiondb.integrations.openai_agents.HermesSession` is the OpenAI Agents
SDK's ``Session``; `sessiondb.integrations.langgraph.HermesSaver` is a
LangGraph checkpointer. Each needs its framework (the ``openai-agents`` and
``langgraph`` extras), so neither is imported here: this package offers
only what runs without them (docs/integrations.md).
"""
from .items import from_message, to_message
from .naming import open_store, store_session_id

__all__ = ["from_message", "to_message", "open_store", "store_session_id"]
