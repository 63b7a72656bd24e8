"""The per-request path: a fresh tensor of the request's size, written block by block, dropped at the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from kvstress.bench._config import FreshAlloc
from kvstress.bench._kv import block_fills, kv_value, write_tokens
from kvstress.bench._load import Request
from kvstress.bench._result import Outcome, RequestResult, Tally


class MemoryBudget:
    """The bytes the per-request path holds at once, against a cap (None: no cap).

    Emulates a device of ``cap_bytes`` on the CPU. Invariant: ``held_bytes`` is the sum of the
    sizes taken and not yet given back, and never exceeds the cap.
    """

    __slots__ = ("_lock", "cap_bytes", "held_bytes")

    def __init__(self, cap_bytes: int | None) -> None:
        self.cap_bytes = cap_bytes
        self.held_bytes = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Count ``size`` bytes as held; False (nothing counted) when they would pass the cap."""
        with self._lock:
            if self.cap_bytes is not None and self.held_bytes + size > self.cap_bytes:
                return False
            self.held_bytes += size
            return True

    def give(self, size: int) -> None:
        """Give back ``size`` bytes taken earlier."""
        with self._lock:
            self.held_bytes -= size


class FreshPath:
    """Serves a request from a tensor made for it: allocate, write block by block, hold, drop.

    The tensor is shaped ``(blocks, *block_shape)``: the same bytes the pooled path writes, so
    the two paths differ only in where the memory comes from. An allocation the budget or the
    device refuses ends the request as ``oom``; the path has no policy to fall back on.
    """

    name = "per-request"

    def __init__(
        self,
        block_shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        budget: MemoryBudget,
        fresh: FreshAlloc,
        block_tokens: int,
    ) -> None:
        self._block_shape = block_shape
        self._block_bytes = dtype.itemsize * _numel(block_shape)
        self._dtype = dtype
        self._device = device
        self._budget = budget
        self._make = torch.zeros if fresh is FreshAlloc.ZEROS else torch.empty
        self._block_tokens = block_tokens

    def serve(self, request: Request, origin: float) -> RequestResult:
        """Serve one request (timed from ``origin``, a ``time.perf_counter`` reading)."""
        start = time.perf_counter()
        tally = Tally(attempts=1)
        fills = block_fills(request.tokens, self._block_tokens)
        size = len(fills) * self._block_bytes
        kv = self._allocate(len(fills), size)
        tally.acquire_s = time.perf_counter() - start
        if kv is None:
            return tally.result(request, Outcome.OOM, start - origin, time.perf_counter() - origin)
        try:
            for index, tokens in enumerate(fills):
                write_tokens(kv[index], tokens, kv_value(request.index))
                tally.written += tokens
            time.sleep(request.hold_s)
        finally:
            del kv  # dropped before the budget is given back, so the budget never under-counts
            self._budget.give(size)
        return tally.result(request, Outcome.COMPLETED, start - origin, time.perf_counter() - origin)

    def _allocate(self, blocks: int, size: int) -> torch.Tensor | None:
        if not self._budget.take(size):
            return None
        try:
            return self._make((blocks, *self._block_shape), dtype=self._dtype, device=self._device)
        except torch.OutOfMemoryError:
            self._budget.give(size)
            return None


@contextmanager
def device_capped(device: torch.device, cap_bytes: int | None) -> Iterator[None]:
    """On CUDA, cap the caching allocator at ``cap_bytes`` for the block (real OOMs, fragmentation included).

    Elsewhere (or with no cap) this does nothing: the CPU has no allocator cap to set, and the
    per-request path counts against a MemoryBudget instead.
    """
    if device.type != "cuda" or cap_bytes is None:
        yield
        return
    # set_per_process_memory_fraction wants an index: a bare "cuda" means the current device.
    index = torch.cuda.current_device() if device.index is None else device.index
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / total), index)
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
