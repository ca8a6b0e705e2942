"""LangGraph adapters (``pip install 'tulip-memory[langgraph]'``).

:class:`TulipSaver` is a LangGraph checkpointer (``BaseCheckpointSaver``) on this
project's delta storage; :class:`TulipStore` a LangGraph ``BaseStore`` over
:class:`~tulip_memory.store.PgMemory` (or :class:`~tulip_memory.store.InMemoryStore`).
Importing :mod:`tulip_memory` never imports LangGraph: only this package does.
"""

from tulip_memory.langgraph.saver import TulipSaver
from tulip_memory.langgraph.store import TulipStore

__all__ = ["TulipSaver", "TulipStore"]
