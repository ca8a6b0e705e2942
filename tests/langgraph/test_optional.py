"""LangGraph is an optional extra: the library imports it only through tulip_memory.langgraph."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_library_does_not_import_langgraph() -> None:
    code = (
        "import sys, tulip_memory, tulip_memory.delta, tulip_memory.store, tulip_memory.registry, "
        "tulip_producer; "
        "print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('langgraph', 'langchain_core')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
