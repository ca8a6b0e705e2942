"""``tulip.memory.managers``: the seed's module path of the optional managers.

The managers live in :mod:`tulip_memory.manager`; this package re-exports them where
the seed's source keeps them (``tulip.memory.managers.mem0``).
"""
