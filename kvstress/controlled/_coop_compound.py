"""``threading.Barrier`` and ``threading.Timer`` on the baton, built from the cooperative basics.

The real ones wait on a real ``Condition`` (Barrier) or in a real thread (Timer): under the
baton a thread waiting at a real barrier blocks its OS thread while the scheduler thinks it
runs, and the run stalls on a correct test. These wait on ``_coop.Condition`` and run in a
controlled thread, on virtual time, with the standard library's interface and errors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kvstress.controlled import _coop


class Barrier:
    """``threading.Barrier``: ``parties`` threads meet, then all go on (``wait`` returns each a
    distinct index, 0 to parties - 1; the last to arrive runs ``action``). A wait that times out,
    an ``abort`` or a failing ``action`` breaks it (``threading.BrokenBarrierError``) until
    ``reset``."""

    def __init__(
        self, parties: int, action: Callable[[], object] | None = None, timeout: float | None = None
    ) -> None:
        if parties < 1:
            raise ValueError("parties must be >= 1")
        self._cond = _coop.Condition(_coop.Lock())
        self._parties, self._action, self._timeout = parties, action, timeout
        self._arrived = 0  # threads in the current round
        self._round = 0  # counts rounds completed or reset
        self._broken = False
        self._reset_round = -1  # a round that reset ended: its waiters raise

    @property
    def parties(self) -> int:
        """How many threads each round needs."""
        return self._parties

    @property
    def n_waiting(self) -> int:
        """Threads waiting in the current round."""
        return 0 if self._broken else self._arrived

    @property
    def broken(self) -> bool:
        """Whether the barrier is broken (until ``reset``)."""
        return self._broken

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the round to fill; this thread's index in it."""
        timeout = self._timeout if timeout is None else timeout
        with self._cond:
            if self._broken:
                raise threading.BrokenBarrierError
            index, this_round = self._arrived, self._round
            self._arrived += 1
            if self._arrived == self._parties:
                self._complete()
                return index
            if not self._cond.wait_for(lambda: self._round != this_round or self._broken, timeout):
                self._break()
                raise threading.BrokenBarrierError
            if this_round == self._reset_round or (self._broken and self._round == this_round):
                raise threading.BrokenBarrierError
            return index

    def _complete(self) -> None:
        try:
            if self._action is not None:
                self._action()
        except BaseException:
            self._break()
            raise
        self._arrived, self._round = 0, self._round + 1
        self._cond.notify_all()

    def _break(self) -> None:
        self._broken = True
        self._cond.notify_all()

    def abort(self) -> None:
        """Break the barrier: waiters now and later raise until ``reset``."""
        with self._cond:
            self._break()

    def reset(self) -> None:
        """Back to empty and unbroken; threads waiting now raise ``BrokenBarrierError``."""
        with self._cond:
            if self._arrived and not self._broken:
                self._reset_round = self._round
            self._arrived, self._round, self._broken = 0, self._round + 1, False
            self._cond.notify_all()


class Timer(_coop.Thread):
    """``threading.Timer``: a controlled thread that calls ``function`` after ``interval``
    virtual seconds, unless ``cancel`` comes first."""

    def __init__(
        self,
        interval: float,
        function: Callable[..., object],
        args: Iterable[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.interval, self.function = interval, function
        self.args, self.kwargs = list(args or ()), dict(kwargs or {})
        self.finished = _coop.Event()

    def cancel(self) -> None:
        """Stop the timer if it has not fired yet."""
        self.finished.set()

    def run(self) -> None:
        self.finished.wait(self.interval)
        if not self.finished.is_set():
            self.function(*self.args, **self.kwargs)
        self.finished.set()
