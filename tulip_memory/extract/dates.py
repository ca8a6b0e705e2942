"""Relative time words made absolute against the time a message was said.

"I went there yesterday", said on 8 May 2023, is a fact about 7 May 2023; stored as
"yesterday" it would be wrong the day after. :func:`resolve` rewrites the common
English forms; the phrasing follows how people write dates ("the Sunday before
25 May 2023", "in June 2023").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

_I = re.IGNORECASE
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_NUMBERS = (
    "a",
    "an",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
)


def day(d: date) -> str:
    """``7 May 2023``."""
    return f"{d.day} {d:%B} {d.year}"


def month(d: date, shift: int) -> str:
    """``June 2023`` for ``shift`` months after ``d``'s month."""
    index = d.year * 12 + d.month - 1 + shift
    return f"{date(index // 12, index % 12 + 1, 1):%B} {index // 12}"


Rewrite = Callable[[re.Match[str], date], str]


_RULES: tuple[tuple[re.Pattern[str], Rewrite], ...] = (
    (re.compile(r"\blast night\b", _I), lambda m, d: f"on the night of {day(d - timedelta(1))}"),
    (re.compile(r"\byesterday\b", _I), lambda m, d: f"on {day(d - timedelta(1))}"),
    (re.compile(r"\btonight\b", _I), lambda m, d: f"on the night of {day(d)}"),
    (
        re.compile(r"\b(?:earlier )?(?:today|this (?:morning|afternoon|evening))\b", _I),
        lambda m, d: f"on {day(d)}",
    ),
    (re.compile(r"\btomorrow\b", _I), lambda m, d: f"on {day(d + timedelta(1))}"),
    (re.compile(r"\blast weekend\b", _I), lambda m, d: f"on the weekend before {day(d)}"),
    (
        re.compile(r"\b(?:this|next) weekend\b", _I),
        lambda m, d: f"on the weekend after {day(d)}",
    ),
    (re.compile(r"\blast week\b", _I), lambda m, d: f"in the week before {day(d)}"),
    (re.compile(r"\bthis week\b", _I), lambda m, d: f"in the week of {day(d)}"),
    (re.compile(r"\bnext week\b", _I), lambda m, d: f"in the week after {day(d)}"),
    (re.compile(r"\blast month\b", _I), lambda m, d: f"in {month(d, -1)}"),
    (re.compile(r"\bthis month\b", _I), lambda m, d: f"in {month(d, 0)}"),
    (re.compile(r"\bnext month\b", _I), lambda m, d: f"in {month(d, 1)}"),
    (re.compile(r"\blast year\b", _I), lambda m, d: f"in {d.year - 1}"),
    (re.compile(r"\bthis year\b", _I), lambda m, d: f"in {d.year}"),
    (re.compile(r"\bnext year\b", _I), lambda m, d: f"in {d.year + 1}"),
    (
        re.compile(rf"\blast (?P<day>{'|'.join(_DAYS)})\b", _I),
        lambda m, d: f"on the {m['day'].capitalize()} before {day(d)}",
    ),
    (
        re.compile(rf"\bnext (?P<day>{'|'.join(_DAYS)})\b", _I),
        lambda m, d: f"on the {m['day'].capitalize()} after {day(d)}",
    ),
    (
        re.compile(
            rf"\b(?P<n>\d+|{'|'.join(_NUMBERS)}|a few|a couple of|few|couple of)\s+"
            r"(?P<unit>days?|weeks?|months?|years?)\s+ago\b",
            _I,
        ),
        lambda m, d: f"{m['n']} {m['unit']} before {day(d)}",
    ),
)


def resolve(text: str, when: float | None) -> str:
    """``text`` with its relative time words made absolute for a message said at
    ``when`` (epoch seconds, UTC); unchanged without a time."""
    if when is None:
        return text
    d = datetime.fromtimestamp(when, UTC).date()
    for pattern, rewrite in _RULES:
        text = pattern.sub(lambda m, r=rewrite: r(m, d), text)  # type: ignore[misc]
    return text


def has_time(text: str) -> bool:
    """Whether ``text`` holds a relative time word :func:`resolve` rewrites."""
    return any(pattern.search(text) for pattern, _ in _RULES)
