"""Pacing: a reindex gives way when the database it shares with recall gets busy.

Recall and a job's batches run on the same database CPU, so a batch written while
recall queries wait for a core makes them slower. Each batch's write (one ``UPDATE``
of its rows) is timed per row: the fastest per-row time this process has seen in the
job is the database with CPU to spare, and a write more than :attr:`Pacer.slowdown`
times slower than that means statements are queueing for CPU, the job's, recall's or
anyone's. The pacer then pauses the batch's worker after its write: the pause is
``factor`` times the write's own time, ``factor`` doubling on each slow write (from
1, so the worker writes at most half the time, up to :attr:`Pacer.max_factor`) and
halving on each write back within the bound, to none. A job on an otherwise idle
database keeps its full speed; one competing with busy recall slows until its writes
stop slowing.

It reads no clock and sleeps nothing itself: :meth:`Pacer.observe` takes a write's
duration and returns the pause, which the reindexer sleeps (and a test can read).
Each process paces its own batches (a reindex worker's pool processes, each with its
own pacer), so more workers do not take more of the database than the bound lets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: A pause shorter than this is not taken (``factor`` drops to 0 below it).
MIN_FACTOR = 1 / 8


@dataclass
class Pacer:
    """The pause after each batch of a job, from how long its write took."""

    #: A write this many times slower (per row) than the fastest seen is a busy database.
    slowdown: float = 1.5
    #: The longest pause, in multiples of the write that asked for it.
    max_factor: float = 8.0
    #: The longest pause, in seconds.
    max_pause: float = 5.0
    _job: int | None = field(default=None, init=False, repr=False)
    _fastest: float = field(default=float("inf"), init=False, repr=False)
    factor: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if self.slowdown <= 1 or self.max_factor < 1 or self.max_pause < 0:
            raise ValueError(
                "need slowdown > 1, max_factor >= 1 and max_pause >= 0; got "
                f"{self.slowdown}, {self.max_factor}, {self.max_pause}"
            )

    @property
    def fastest(self) -> float:
        """The fastest write of the job so far, seconds a row (``inf`` before one)."""
        return self._fastest

    def observe(self, job_id: int, rows: int, seconds: float) -> float:
        """A batch of job ``job_id`` wrote ``rows`` rows in ``seconds``: the seconds
        to pause before the next one (0 for none)."""
        if job_id != self._job:  # a new job: nothing known about its rows yet
            self._job, self._fastest, self.factor = job_id, float("inf"), 0.0
        if rows < 1 or seconds <= 0:
            return 0.0
        per_row = seconds / rows
        self._fastest = min(self._fastest, per_row)
        if per_row > self.slowdown * self._fastest:
            self.factor = min(self.max_factor, max(1.0, 2 * self.factor))
        else:
            self.factor = self.factor / 2 if self.factor / 2 >= MIN_FACTOR else 0.0
        return min(self.max_pause, self.factor * seconds)
