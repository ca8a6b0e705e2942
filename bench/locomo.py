"""The LoCoMo data set as the recall benchmarks read it: conversations, turns, questions.

Shared by ``bench/recall_quality.py`` (turns indexed straight into the store) and
``bench/quality_pipeline.py`` (the same conversations through the real pipeline).
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

KS = (1, 5, 10)
_SESSION = re.compile(r"^session_(\d+)$")
# Evidence ids as the data set spells them: "D8:6", "D:11:26", "D30:05", "D9:1 D4:4".
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*0*(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    position: int
    speaker: str
    text: str
    caption: str | None


@dataclass(frozen=True)
class Question:
    text: str
    evidence: frozenset[str]
    category: int
    answer: str | None = None  # None: the data set gives none (adversarial questions)


@dataclass(frozen=True)
class Conversation:
    sample: str
    turns: list[Turn]
    questions: list[Question]
    speakers: tuple[str, ...] = ()
    #: Session number -> the session's date and time, epoch seconds (UTC).
    dates: dict[int, float] = field(default_factory=dict)

    @property
    def namespace(self) -> tuple[str, ...]:
        return (f"locomo-{self.sample}", "conversation")


def dataset_paths(pattern: str) -> list[str]:
    """The files ``pattern`` (a glob) matches, sorted; none is an error."""
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise SystemExit(f"no file matches {pattern!r}")
    return paths


def load(paths: Sequence[str]) -> list[Conversation]:
    out = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        turns = []
        sessions = sorted(
            (int(m.group(1)), k) for k in data if (m := _SESSION.match(k)) and data[k]
        )
        for number, key in sessions:
            for position, t in enumerate(data[key]):
                turns.append(
                    Turn(
                        _dia_id(t["dia_id"]),
                        number,
                        position,
                        t["speaker"],
                        t["text"],
                        t.get("blip_caption"),
                    )
                )
        questions = [
            Question(
                q["question"],
                _evidence(q["evidence"]),
                int(q["category"]),
                None if q.get("answer") is None else str(q["answer"]),
            )
            for q in data["qa"]
            if q.get("evidence")
        ]
        speakers = tuple(s for s in (data.get("speaker_a"), data.get("speaker_b")) if s)
        dates = {n: _session_time(data[f"{key}_date_time"]) for n, key in sessions}
        out.append(Conversation(Path(path).stem, turns, questions, speakers, dates))
    return out


def _session_time(text: str) -> float:
    """``1:56 pm on 8 May, 2023`` as epoch seconds (the data set gives no zone: UTC)."""
    when = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return when.replace(tzinfo=UTC).timestamp()


def _evidence(ids: Sequence[str]) -> frozenset[str]:
    return frozenset(f"D{a}:{b}" for e in ids for a, b in _EVIDENCE.findall(e))


def _dia_id(raw: str) -> str:
    found = _evidence([raw])
    return next(iter(found)) if len(found) == 1 else raw


def turn_text(turn: Turn, form: str) -> str:
    """What is indexed for a turn: its text, with the speaker, with a shared photo's
    caption (what a chat transcript shows; the data set's image search query is not)."""
    text = turn.text
    if form in ("speaker", "speaker+caption"):
        text = f"{turn.speaker}: {text}"
    if form in ("caption", "speaker+caption") and turn.caption:
        text = f"{text} [shares a photo: {turn.caption}]"
    return text
