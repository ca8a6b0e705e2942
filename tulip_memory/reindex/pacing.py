"""Pacing: a reindex gives way when it makes the database it shares with recall slower.

Recall and a job's batches run on the same database CPU, so a batch written while
recall queries wait for a core makes them slower. The pacer watches a **probe**: one
short statement of fixed work (:data:`~tulip_memory.reindex.sql.LOAD_PROBE`, a few
milliseconds on an idle server, as long as a recall query: the scheduler runs a much
shorter one first and it would miss the queueing), which waits for a core as a recall
query would, and which (unlike a batch's write, whose time moves with its rows: page
splits, TOAST, a GIN pending-list flush) does the same work every time.

The job's first :attr:`Pacer.calibration` probes in a process are its **reference**
(their median): the database as recall had it before this process's batches loaded
it (an in-process job takes them before its first batch; a worker with its first
batches). After each batch's write the worker probes again; when the running
average of its probes (so one descheduled probe is not a busy database) is more than
:attr:`Pacer.slowdown` times the reference, the job's load is slowing recall, which
is the ratio recall's target is set in (p99 during a job against idle). The pacer
then pauses the batch's worker: ``factor`` times the write's own time, ``factor``
doubling on each slow probe (from 1, so the worker writes at most half the time, up
to :attr:`Pacer.max_factor`) and halving on each probe back within the bound, to
none. Load that was there before the job (other work on the server) is in the
reference, so it does not stop the job; load the job adds does.

It reads no clock and sleeps nothing itself: :meth:`Pacer.observe` takes the probe's
and the write's durations and returns the pause, which the reindexer sleeps (and a
test can read). Each process paces its own batches (a reindex worker's pool
processes, each with its own pacer), so more workers do not take more of the
database than the bound lets.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

#: A pause shorter than this is not taken (``factor`` drops to 0 below it).
MIN_FACTOR = 1 / 8


@dataclass
class Pacer:
    """The pause after each batch of a job, from how long its probe took."""

    #: Probes (running average) this many times slower than the reference: pause.
    slowdown: float = 1.5
    #: The longest pause, in multiples of the write that asked for it.
    max_factor: float = 8.0
    #: The longest pause, in seconds.
    max_pause: float = 5.0
    #: The newest probe's weight in the running average.
    weight: float = 0.5
    #: The first probes of a job, whose median is the reference.
    calibration: int = 5
    _job: int | None = field(default=None, init=False, repr=False)
    _first: list[float] = field(default_factory=list, init=False, repr=False)
    _recent: float = field(default=0.0, init=False, repr=False)
    factor: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if (
            self.slowdown <= 1
            or self.max_factor < 1
            or self.max_pause < 0
            or not 0 < self.weight <= 1
            or self.calibration < 1
        ):
            raise ValueError(
                "need slowdown > 1, max_factor >= 1, max_pause >= 0, 0 < weight <= 1 and "
                f"calibration >= 1; got {self.slowdown}, {self.max_factor}, {self.max_pause}, "
                f"{self.weight}, {self.calibration}"
            )

    @property
    def reference(self) -> float | None:
        """The job's reference probe, seconds (``None`` until calibrated)."""
        if len(self._first) < self.calibration:
            return None
        return statistics.median(self._first)

    def calibrating(self, job_id: int) -> bool:
        """Whether job ``job_id`` still needs probes for its reference."""
        return job_id != self._job or self.reference is None

    def observe(self, job_id: int, probe: float, write: float = 0.0) -> float:
        """A probe of job ``job_id`` took ``probe`` seconds, after a write that took
        ``write`` seconds (0: none, a calibration probe): the seconds to pause
        before the next batch (0 for none)."""
        if job_id != self._job:  # a new job: nothing known about the database yet
            self._job, self._first, self._recent, self.factor = job_id, [], 0.0, 0.0
        if probe <= 0:
            return 0.0
        reference = self.reference
        if reference is None:
            self._first.append(probe)
            self._recent = statistics.median(self._first)
            return 0.0
        self._recent = self.weight * probe + (1 - self.weight) * self._recent
        if self._recent > self.slowdown * reference:
            self.factor = min(self.max_factor, max(1.0, 2 * self.factor))
        else:
            self.factor = self.factor / 2 if self.factor / 2 >= MIN_FACTOR else 0.0
        return min(self.max_pause, self.factor * max(write, 0.0))
