"""A schedule: the choices one execution made, and its versioned, copy-pasteable text form.

Text form: ``ks1:`` followed by unpadded urlsafe base64 of

    flags (1 byte) | body | crc32 of flags and body (4 bytes, big-endian)

where body is ``varint(len(strategy)) strategy varint(seed) varint(n) varint(choice + 1) * n``,
zlib-deflated when that is shorter (flags bit 0). Flags bit 1 says that the execution offered
sleeping threads' timers among its choices (``Schedule.timers`` 1, ``SLEEPERS``), bits 1 and 2
that it offered every timer that may fire early (2, ``ALL_TIMERS``: the timed waits of the
code's own threads, and the controlled loop's timers); schedules replay with the timers they
were recorded with (one without either bit on a baton that fires a timer only when every thread
is blocked). Flags bit 3 says that the controlled loop's timers could fire late (``Schedule.late``:
an explored test's schedule). Varints are
unsigned LEB128. A random draw is choice -1, so it encodes as 0 and a task id t as t + 1: small
ids cost one byte each.
"""

from __future__ import annotations

import base64
import re
import zlib
from dataclasses import dataclass

RANDOM_DRAW = -1
"""The choice recorded for a ``next_u64`` call; every other choice is the id of the task that ran."""

VERSION = 1
_U64 = 1 << 64
_MAX_TASK_ID = (1 << 63) - 1
_DEFLATED = 1
_TIMERS = 2
_ALL_TIMERS = 4
_LATE = 8
SLEEPERS = 1
"""``Schedule.timers``: sleeping threads' timers may fire ahead of runnable threads (the thread
baton's plain sleeps of threads not daemons), as schedules recorded before ``ALL_TIMERS``."""
ALL_TIMERS = 2
"""``Schedule.timers``: any timer that may fire early does: ``SLEEPERS``', a timed wait of a thread
the code under test started, and a timer of the controlled event loop."""
_BASE64 = re.compile(r"[A-Za-z0-9_-]*")
_HEAD = re.compile(r"ks(\d+)")


@dataclass(frozen=True)
class Schedule:
    """What one execution chose, in order: enough to replay its interleaving and its data.

    ``strategy`` names the scheduler that made the choices, ``seed`` seeds the execution's data
    stream (``next_u64`` values are derived from it, so only the draws' positions are stored),
    and ``choices`` holds, per decision, the task id that ran or ``RANDOM_DRAW``.
    ``timers`` records which timers were a choice too (choosing one fired it early: see
    ``ThreadController`` and ``ControlledEventLoop``): 0 none, ``SLEEPERS`` (True), or
    ``ALL_TIMERS``. ``late`` records that the controlled loop's timers could fire late, each
    jump of virtual time a choice (see ``ControlledEventLoop``). ``str(schedule)`` is its
    ``encode()``d text.
    """

    strategy: str
    seed: int
    choices: tuple[int, ...] = ()
    timers: int = 0
    late: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, str) or not self.strategy:
            raise TypeError(f"Schedule.strategy must be a non-empty str, got {self.strategy!r}")
        if type(self.seed) is not int or not 0 <= self.seed < _U64:
            raise ValueError(
                f"Schedule.seed must be an int in [0, 2**64), got {self.seed!r} ({type(self.seed).__name__})"
            )
        if type(self.timers) not in (bool, int) or not 0 <= self.timers <= ALL_TIMERS:
            raise ValueError(f"Schedule.timers must be 0, SLEEPERS (1) or ALL_TIMERS (2): {self.timers!r}")
        object.__setattr__(self, "timers", int(self.timers))
        if type(self.late) is not bool:
            raise ValueError(f"Schedule.late must be a bool: {self.late!r}")
        choices = tuple(self.choices)  # accept any sequence; the field stays an immutable tuple
        for index, choice in enumerate(choices):
            if type(choice) is not int or not RANDOM_DRAW <= choice <= _MAX_TASK_ID:
                raise ValueError(
                    f"Schedule.choices[{index}] must be a task id >= 0 or RANDOM_DRAW "
                    f"(-1), got {choice!r} ({type(choice).__name__})"
                )
        object.__setattr__(self, "choices", choices)

    @property
    def tasks(self) -> tuple[int, ...]:
        """The task choices alone, in order (random draws left out)."""
        return tuple(choice for choice in self.choices if choice != RANDOM_DRAW)

    def encode(self) -> str:
        """The schedule as one short line, ``ks1:...``; ``Schedule.decode`` reads it back."""
        body = bytearray()
        name = self.strategy.encode()
        _put(body, len(name))
        body += name
        _put(body, self.seed)
        _put(body, len(self.choices))
        for choice in self.choices:
            _put(body, choice + 1)
        flags, packed = 0, bytes(body)
        deflated = zlib.compress(packed, 9)
        if len(deflated) < len(packed):  # long schedules repeat themselves a lot
            flags, packed = _DEFLATED, deflated
        if self.timers:
            flags |= _TIMERS | (_ALL_TIMERS if self.timers >= ALL_TIMERS else 0)
        if self.late:
            flags |= _LATE
        payload = bytes([flags]) + packed
        payload += zlib.crc32(payload).to_bytes(4, "big")
        return f"ks{VERSION}:" + base64.urlsafe_b64encode(payload).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, text: str) -> Schedule:
        """Read an ``encode()``d schedule; whitespace (line wrapping) is ignored.

        Raises ValueError saying what is wrong: not a kvstress schedule, a version this kvstress
        does not read, not base64, truncated, or corrupt (checksum, framing or field values).
        """
        compact = "".join(str(text).split())
        head, colon, tail = compact.partition(":")
        match = _HEAD.fullmatch(head)
        if not colon or match is None:
            raise ValueError(
                f"not a kvstress schedule: expected text starting with 'ks{VERSION}:', got {compact[:16]!r}"
            )
        if int(match.group(1)) != VERSION:
            raise ValueError(
                f"schedule format {head!r} is not supported: this kvstress reads "
                f"'ks{VERSION}:' schedules only"
            )
        payload = _unbase64(tail)
        if len(payload) < 6:
            raise ValueError(f"schedule is truncated: {len(payload)} bytes, fewer than any schedule has")
        framed, crc = payload[:-4], int.from_bytes(payload[-4:], "big")
        if zlib.crc32(framed) != crc:
            raise ValueError("schedule is corrupt or truncated: checksum mismatch (copy the whole string)")
        timers = ALL_TIMERS if framed[0] & _ALL_TIMERS else SLEEPERS if framed[0] & _TIMERS else 0
        return _parse(cls, _unpack(framed), timers=timers, late=bool(framed[0] & _LATE))

    def __str__(self) -> str:
        return self.encode()


def _unbase64(tail: str) -> bytes:
    if _BASE64.fullmatch(tail) is None:
        bad = next(char for char in tail if _BASE64.fullmatch(char) is None)
        raise ValueError(f"schedule is corrupt: {bad!r} is not a urlsafe base64 character")
    if len(tail) % 4 == 1:  # no byte count encodes to this length
        raise ValueError("schedule is truncated: its base64 text ends mid-byte")
    return base64.urlsafe_b64decode(tail + "=" * (-len(tail) % 4))


def _unpack(framed: bytes) -> bytes:
    flags, packed = framed[0] & ~(_TIMERS | _ALL_TIMERS | _LATE), framed[1:]
    if flags == 0:
        return packed
    if flags != _DEFLATED:
        raise ValueError(f"schedule is corrupt: unknown flags {flags:#04x}")
    try:
        return zlib.decompress(packed)
    except zlib.error as exc:
        raise ValueError(f"schedule is corrupt: its body does not inflate ({exc})") from None


def _parse(cls: type[Schedule], body: bytes, *, timers: int, late: bool) -> Schedule:
    reader = _Reader(body)
    name_length = reader.varint("strategy name length")
    try:
        strategy = reader.take(name_length, "strategy name").decode()
    except UnicodeDecodeError:
        raise ValueError("schedule is corrupt: the strategy name is not UTF-8") from None
    seed = reader.varint("seed")
    count = reader.varint("choice count")
    if count > reader.remaining:  # every choice takes at least one byte
        raise ValueError(
            f"schedule is truncated: it announces {count} choices but has {reader.remaining} bytes left"
        )
    choices = tuple(reader.varint(f"choice {index}") - 1 for index in range(count))
    if reader.remaining:
        raise ValueError(f"schedule is corrupt: {reader.remaining} bytes after the last choice")
    try:
        return cls(strategy, seed, choices, timers, late)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"schedule is corrupt: {exc}") from None


def _put(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


class _Reader:
    """Reads varints and byte strings off a body, naming the field when the bytes run out."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    @property
    def remaining(self) -> int:
        return len(self._data) - self._at

    def take(self, count: int, what: str) -> bytes:
        if count > self.remaining:
            raise ValueError(f"schedule is truncated: the bytes ran out in the {what}")
        self._at += count
        return self._data[self._at - count : self._at]

    def varint(self, what: str) -> int:
        value = shift = 0
        while True:
            if self._at >= len(self._data):
                raise ValueError(f"schedule is truncated: the bytes ran out in the {what}")
            byte = self._data[self._at]
            self._at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift >= 70:  # ten bytes hold any u64
                raise ValueError(f"schedule is corrupt: the {what} is longer than 64 bits")


TIMER_LANE = 1 << 20
"""The choice that fires the next timer early on the controlled loop (``fires_timers`` at
``ALL_TIMERS``): an id no task's lane reaches. At a late jump (``late_timers``), the choice
``TIMER_LANE + i`` jumps to the ``i``-th of the timers offered."""
