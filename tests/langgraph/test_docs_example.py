"""docs/langgraph.md's example runs as printed, and what it saved is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tulip_memory.langgraph import TulipSaver

DOC = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"


def example() -> str:
    text = DOC.read_text()
    found = re.search(r"<!-- example: langgraph -->\n```python\n(.*?)```", text, re.S)
    assert found, "docs/langgraph.md lost its example"
    return found.group(1)


def test_the_example_is_short() -> None:
    code = [line for line in example().splitlines() if line.strip()]
    assert len(code) <= 15


def test_the_example_runs_and_resumes_the_thread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path}/threads"
    exec(compile(example(), str(DOC), "exec"), {"CHECKPOINTS": url})
    assert capsys.readouterr().out.strip() == "you said: again"
    with TulipSaver.from_url(url) as saver:
        listed = list(saver.list({"configurable": {"thread_id": "chat-1"}}))
    assert len(listed) == 6  # input, __start__ and reply, for each of the two turns
    messages = listed[0].checkpoint["channel_values"]["messages"]
    assert [m.content for m in messages] == ["hello", "you said: hello", "again", "you said: again"]
