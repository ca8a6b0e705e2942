"""Observability (``tulip.observability``): the seed's import path of the events.

``from tulip_memory.observability.emit import EV_..., emit, emit_sync`` is what
``tulip.observability.emit`` is in the SDK. The implementation lives in
:mod:`tulip_memory.events`; :mod:`tulip_memory.observability.emit` re-exports it, so
there is one registry of subscribers whichever path a caller imports.
"""
