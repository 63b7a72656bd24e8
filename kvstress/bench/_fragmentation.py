"""Experiment 3: contiguous allocation against paged blocks, on one seeded stream and one memory budget.

A request arrives (exponential gaps), has a final length in tokens (lognormal: heavy-tailed,
capped at ``max_tokens``) and holds its memory for as many ticks as it has tokens. Requests are
admitted first come, first served; the head of the queue waits until its memory can be had,
and gives up after ``patience`` ticks (rejected). The two sides see the same requests:

- contiguous: each request reserves one range of a token arena, first fit: ``max_tokens``
  (``reserve="max"``, what a server that does not know the length must do) or its final length
  (``reserve="final"``). Free space splits into holes as requests come and go (external
  fragmentation), and a max reservation wastes what the request never writes (internal).
- paged: each request takes ``ceil(length / block_tokens)`` fixed blocks; any free block serves,
  so the only waste is the unused tail of each request's last block.

Pure arithmetic over token counts: no tensors, so a run of thousands of requests takes well
under a second, and the same config prints the same numbers.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kvstress._checks import got, positive_int, positive_number

RESERVE_MODES = ("max", "final")


@dataclass(frozen=True, slots=True)
class FragmentationConfig:
    """The stream and the budget. Lengths and memory in tokens, times in ticks (one token's hold)."""

    requests: int = 2000
    memory_tokens: int = 65536
    block_tokens: int = 16
    max_tokens: int = 2048
    median_tokens: int = 128
    sigma: float = 1.0
    mean_gap: float = 1.0
    patience: float = 400.0
    reserve: str = "max"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("requests", "memory_tokens", "block_tokens", "max_tokens", "median_tokens"):
            positive_int(name, getattr(self, name))
        for name in ("sigma", "mean_gap", "patience"):
            positive_number(name, getattr(self, name))
        if self.reserve not in RESERVE_MODES:
            raise ValueError(f"reserve must be one of {RESERVE_MODES}, got {got(self.reserve)}")
        if self.median_tokens > self.max_tokens:
            raise ValueError(
                f"median_tokens must be <= max_tokens ({self.max_tokens}), got {got(self.median_tokens)}"
            )
        if self.block_tokens > self.memory_tokens:
            raise ValueError(
                f"block_tokens must be <= memory_tokens ({self.memory_tokens}), got {got(self.block_tokens)}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, got {got(self.seed)}")


@dataclass(frozen=True, slots=True)
class Request:
    """One request of the stream: when it arrives (ticks) and its final length (tokens)."""

    index: int
    arrival: float
    tokens: int


@dataclass(frozen=True, slots=True)
class SideResult:
    """What one allocation scheme did with the stream. Fractions are time-weighted over the run."""

    name: str
    admitted: int
    tokens_served: int
    rejected: int
    waited: int
    mean_wait: float
    peak_concurrency: int
    utilisation: float  # tokens stored / memory reserved
    memory_reserved: float  # memory reserved / budget
    internal_fragmentation: float  # reserved but never written / reserved
    external_fragmentation: float  # 1 - largest free run / free memory
    mean_largest_free_run: float  # tokens
    blocked_by_fragmentation: int  # times the head waited although enough memory was free
    finished_at: float
    series: tuple[tuple[float, int, int], ...] = field(repr=False)  # (time, stored, reserved)


@dataclass(frozen=True, slots=True)
class FragmentationResult:
    """Both sides on the same stream."""

    config: FragmentationConfig
    drawn_p50: int
    drawn_p99: int
    contiguous: SideResult
    paged: SideResult


def draw_stream(config: FragmentationConfig) -> list[Request]:
    """The seeded stream: exponential gaps, lognormal lengths capped at ``max_tokens``."""
    rng = random.Random(config.seed)
    now, stream = 0.0, []
    for index in range(config.requests):
        now += rng.expovariate(1.0 / config.mean_gap)
        tokens = round(rng.lognormvariate(math.log(config.median_tokens), config.sigma))
        stream.append(Request(index, now, min(config.max_tokens, max(1, tokens))))
    return stream


class _Arena:
    """A token arena with first-fit ranges. ``_starts``/``_ends`` are the allocated ranges, sorted."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._starts: list[int] = []
        self._ends: list[int] = []

    def allocate(self, length: int) -> int:
        """The start of the first hole of ``length`` tokens, now taken; -1 when none is."""
        cursor = 0
        for k, start in enumerate(self._starts):
            if start - cursor >= length:
                self._insert(k, cursor, length)
                return cursor
            cursor = self._ends[k]
        if self.size - cursor >= length:
            self._insert(len(self._starts), cursor, length)
            return cursor
        return -1

    def free(self, start: int) -> None:
        """Give back the range that begins at ``start``."""
        k = bisect.bisect_left(self._starts, start)
        del self._starts[k], self._ends[k]

    def largest_hole(self) -> int:
        """The longest free run of tokens."""
        holes = [s - e for s, e in zip(self._starts, [0, *self._ends], strict=False)]
        return max([*holes, self.size - (self._ends[-1] if self._ends else 0)])

    def _insert(self, k: int, start: int, length: int) -> None:
        self._starts.insert(k, start)
        self._ends.insert(k, start + length)


class _Side:
    """One scheme's run: admission, the clock, and the time-weighted sums."""

    def __init__(self, name: str, config: FragmentationConfig) -> None:
        self.name, self.config = name, config
        self.paged = name == "paged"
        self.arena = _Arena(config.memory_tokens)
        self.free_blocks = config.memory_tokens // config.block_tokens
        self.budget = self.free_blocks * config.block_tokens if self.paged else config.memory_tokens
        self.stored = self.reserved = 0
        self.now = 0.0
        self.sums = {"util": 0.0, "res": 0.0, "ext": 0.0, "run": 0.0}
        self.util_time = 0.0
        self.series: list[tuple[float, int, int]] = [(0.0, 0, 0)]

    def need(self, request: Request) -> int:
        """Tokens this side reserves for ``request``."""
        if self.paged:
            return -(-request.tokens // self.config.block_tokens) * self.config.block_tokens
        return self.config.max_tokens if self.config.reserve == "max" else request.tokens

    def take(self, need: int) -> int:
        """Reserve ``need`` tokens: a handle (arena start or 0), or -1 when they cannot be had."""
        if self.paged:
            blocks = need // self.config.block_tokens
            if blocks > self.free_blocks:
                return -1
            self.free_blocks -= blocks
            return 0
        return self.arena.allocate(need)

    def give(self, handle: int, need: int) -> None:
        """Give a reservation back."""
        if self.paged:
            self.free_blocks += need // self.config.block_tokens
        else:
            self.arena.free(handle)

    def largest_run(self) -> int:
        """The longest request this side could admit now."""
        return self.budget - self.reserved if self.paged else self.arena.largest_hole()

    def advance(self, to: float) -> None:
        """Move the clock, adding the state since the last move to the time-weighted sums."""
        dt, free = to - self.now, self.budget - self.reserved
        if dt > 0:
            run = self.largest_run()
            if self.reserved:
                self.sums["util"] += dt * self.stored / self.reserved
                self.util_time += dt
            self.sums["res"] += dt * self.reserved / self.budget
            self.sums["ext"] += dt * (1 - run / free if free else 0.0)
            self.sums["run"] += dt * run
        self.now = to

    def changed(self) -> None:
        """Record a point of the stored/reserved series."""
        self.series.append((self.now, self.stored, self.reserved))


def run_fragmentation(config: FragmentationConfig) -> FragmentationResult:
    """Serve the seeded stream contiguously and paged, on the same budget; both sides' numbers."""
    stream = draw_stream(config)
    lengths = sorted(r.tokens for r in stream)
    return FragmentationResult(
        config,
        lengths[(len(lengths) - 1) // 2],
        lengths[min(len(lengths) - 1, math.ceil(0.99 * len(lengths)) - 1)],
        _serve(_Side("contiguous", config), stream),
        _serve(_Side("paged", config), stream),
    )


def _serve(side: _Side, stream: list[Request]) -> SideResult:
    patience, arrivals = side.config.patience, iter(stream)
    pending: Request | None = next(arrivals, None)
    queue: deque[Request] = deque()
    running: list[tuple[float, int, int, int, int]] = []  # (end, index, handle, need, tokens)
    counts = {"admitted": 0, "tokens": 0, "rejected": 0, "waited": 0, "peak": 0}
    wait_sum, blocked = 0.0, set()
    while pending is not None or queue or running:
        t_arrive = pending.arrival if pending is not None else math.inf
        t_end = running[0][0] if running else math.inf
        t_give_up = queue[0].arrival + patience if queue else math.inf
        side.advance(min(t_arrive, t_end, t_give_up))
        if t_end <= min(t_arrive, t_give_up):
            _, _, handle, need, tokens = heapq.heappop(running)
            side.give(handle, need)
            side.stored, side.reserved = side.stored - tokens, side.reserved - need
        elif t_give_up <= t_arrive:
            queue.popleft()
            counts["rejected"] += 1
        else:
            assert pending is not None  # t_arrive is finite
            if side.need(pending) > side.budget:
                counts["rejected"] += 1
            else:
                queue.append(pending)
            pending = next(arrivals, None)
        while queue:
            head = queue[0]
            need = side.need(head)
            handle = side.take(need)
            if handle < 0:
                if side.budget - side.reserved >= need:
                    blocked.add(head.index)
                break
            queue.popleft()
            heapq.heappush(running, (side.now + head.tokens, head.index, handle, need, head.tokens))
            side.stored, side.reserved = side.stored + head.tokens, side.reserved + need
            counts["admitted"] += 1
            counts["tokens"] += head.tokens
            counts["peak"] = max(counts["peak"], len(running))
            if side.now > head.arrival:
                counts["waited"] += 1
                wait_sum += side.now - head.arrival
        side.changed()
    return _result(side, counts, wait_sum, len(blocked))


def _result(side: _Side, counts: dict[str, int], wait_sum: float, blocked: int) -> SideResult:
    span, sums = side.now or 1.0, side.sums
    utilisation = sums["util"] / side.util_time if side.util_time else 0.0
    return SideResult(
        name=side.name,
        admitted=counts["admitted"],
        tokens_served=counts["tokens"],
        rejected=counts["rejected"],
        waited=counts["waited"],
        mean_wait=wait_sum / counts["waited"] if counts["waited"] else 0.0,
        peak_concurrency=counts["peak"],
        utilisation=utilisation,
        memory_reserved=sums["res"] / span,
        internal_fragmentation=1 - utilisation if side.util_time else 0.0,
        external_fragmentation=sums["ext"] / span,
        mean_largest_free_run=sums["run"] / span,
        blocked_by_fragmentation=blocked,
        finished_at=side.now,
        series=tuple(side.series),
    )


def fragmentation_table(result: FragmentationResult) -> str:
    """The side-by-side table the CLI prints."""
    c, p = result.config, (result.contiguous, result.paged)
    reserve = "max_tokens" if c.reserve == "max" else "its final length"
    rows: list[tuple[str, Callable[[SideResult], str]]] = [
        ("admitted", lambda s: f"{s.admitted:,} / {c.requests:,}"),
        ("tokens served", lambda s: f"{s.tokens_served:,}"),
        ("rejected (gave up)", lambda s: f"{s.rejected:,}"),
        ("waited / mean wait", lambda s: f"{s.waited:,} / {s.mean_wait:.1f} ticks"),
        ("peak concurrency", lambda s: f"{s.peak_concurrency:,}"),
        ("utilisation", lambda s: f"{s.utilisation:.1%}"),
        ("memory reserved", lambda s: f"{s.memory_reserved:.1%}"),
        ("internal fragmentation", lambda s: f"{s.internal_fragmentation:.1%}"),
        ("external fragmentation", lambda s: f"{s.external_fragmentation:.1%}"),
        ("largest free run, mean", lambda s: f"{s.mean_largest_free_run:,.0f} tokens"),
        ("blocked by fragmentation", lambda s: f"{s.blocked_by_fragmentation:,}"),
        ("finished at", lambda s: f"{s.finished_at:,.0f} ticks"),
    ]
    lines = [
        f"stream    {c.requests:,} requests, mean gap {c.mean_gap} ticks; tokens lognormal (median "
        f"{c.median_tokens}, sigma {c.sigma}, max {c.max_tokens}): drawn P50 {result.drawn_p50}, "
        f"P99 {result.drawn_p99}; patience {c.patience} ticks; seed {c.seed}",
        f"memory    {c.memory_tokens:,} tokens; contiguous reserves {reserve} (first fit); "
        f"paged in blocks of {c.block_tokens} tokens",
        "",
        f"{'metric':<26}{'contiguous':<22}paged",
    ]
    lines += [f"{label:<26}{show(p[0]):<22}{show(p[1]):<22}".rstrip() for label, show in rows]
    return "\n".join(lines)
