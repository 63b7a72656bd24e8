"""What a path costs the process: resident memory, page faults, Python allocations, GC pauses, CUDA memory."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import resource
import sys
import time
import tracemalloc
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


@dataclass(frozen=True, slots=True)
class GcSummary:
    """Collections per generation (0, 1, 2) and the time they stopped the world, in seconds."""

    collections: tuple[int, int, int]
    pause_s: float
    pause_max_s: float


@dataclass(frozen=True, slots=True)
class CudaMemory:
    """The CUDA caching allocator over one path (``torch.cuda.memory_stats``); bytes and counts.

    ``fragmentation`` is ``1 - allocated peak / reserved peak``: the share of the memory the
    allocator took from the device that live tensors never filled. ``allocations`` counts the
    allocator's allocations, ``device_mallocs`` its cudaMalloc calls (new segments),
    ``alloc_retries`` the cudaMallocs that failed and were retried after freeing the cache (a
    stall), ``ooms`` the out-of-memory errors it raised.
    """

    reserved_peak_bytes: int
    allocated_peak_bytes: int
    reserved_final_bytes: int
    allocated_final_bytes: int
    fragmentation: float
    allocations: int
    device_mallocs: int
    alloc_retries: int
    ooms: int


@dataclass(frozen=True, slots=True)
class Measurements:
    """One path's cost to the process. RSS is bytes; ``rss_final_bytes`` is read when the path ends.

    ``rss_peak_scope`` is ``"path"`` when the kernel's high-water mark could be reset at the
    path's start, else ``"process"`` (the peak since the process started). ``minor_faults``
    counts pages the kernel had to map in. ``py_blocks_delta`` is the change in Python's
    allocated memory blocks; ``tracemalloc_peak_bytes`` is None unless tracing was asked for
    (it slows every Python allocation, so it is off by default).
    """

    rss_start_bytes: int
    rss_peak_bytes: int
    rss_final_bytes: int
    rss_peak_scope: str
    minor_faults: int
    py_blocks_delta: int
    tracemalloc_peak_bytes: int | None
    gc: GcSummary
    cuda: CudaMemory | None


class GcWatch:
    """A ``gc.callbacks`` entry counting collections and timing their pauses.

    Collections never overlap (each holds the GIL to its end), so one start time suffices.
    """

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.pause_s = 0.0
        self.pause_max_s = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: Mapping[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        pause = time.perf_counter() - self._began
        self.collections[info["generation"]] += 1
        self.pause_s += pause
        self.pause_max_s = max(self.pause_max_s, pause)

    def summary(self) -> GcSummary:
        """What was seen so far."""
        first, second, third = self.collections
        return GcSummary((first, second, third), self.pause_s, self.pause_max_s)


class Probe:
    """``with Probe(device) as probe:`` measures the block; ``probe.result`` holds it afterwards.

    The result is taken on exit whatever happened inside, so an interrupted path keeps what
    it measured.
    """

    def __init__(self, device: torch.device, *, trace_python: bool = False) -> None:
        self._device = device
        self._trace = trace_python
        self._watch = GcWatch()
        self._result: Measurements | None = None
        # What __enter__ reads at the start, for the differences taken at the end.
        self._scope = "process"
        self._rss_start = 0
        self._faults = 0
        self._blocks = 0
        self._cuda_before: dict[str, int] | None = None

    @property
    def result(self) -> Measurements:
        """The measurements; raises RuntimeError before the block has ended."""
        if self._result is None:
            raise RuntimeError("Probe.result is read after the with-block ends")
        return self._result

    def __enter__(self) -> Probe:
        self._scope = "path" if reset_peak_rss() else "process"
        self._rss_start = read_rss()[0]
        self._faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        self._blocks = sys.getallocatedblocks()
        self._cuda_before = _cuda_start(self._device)
        if self._trace:
            tracemalloc.start()
        gc.callbacks.append(self._watch)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        gc.callbacks.remove(self._watch)
        traced = None
        if self._trace:
            traced = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        cuda = None
        if self._cuda_before is not None:
            torch.cuda.synchronize(self._device)
            cuda = _cuda_memory(self._cuda_before, torch.cuda.memory_stats(self._device))
        rss, peak = read_rss()
        self._result = Measurements(
            rss_start_bytes=self._rss_start,
            rss_peak_bytes=peak,
            rss_final_bytes=rss,
            rss_peak_scope=self._scope,
            minor_faults=resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self._faults,
            py_blocks_delta=sys.getallocatedblocks() - self._blocks,
            tracemalloc_peak_bytes=traced,
            gc=self._watch.summary(),
            cuda=cuda,
        )


def read_rss() -> tuple[int, int]:
    """(resident, peak resident) bytes from ``/proc/self/status``; getrusage's peak for both elsewhere."""
    try:
        with open(_STATUS, encoding="ascii") as status:
            fields = dict(line.split(":", 1) for line in status if line.startswith(("VmRSS", "VmHWM")))
        return _kib(fields["VmRSS"]), _kib(fields["VmHWM"])
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return peak, peak


def reset_peak_rss() -> bool:
    """Reset the kernel's resident high-water mark (Linux 4.0+); False where that is not allowed."""
    try:
        with open(_CLEAR_REFS, "w", encoding="ascii") as clear:
            clear.write("5")
        return True
    except OSError:
        return False


def settle(device: torch.device) -> None:
    """Give the next path a clean start: collect garbage, hand freed heap back, empty CUDA's cache.

    Without this the second path would start on the first one's leftovers: glibc keeps freed
    memory in its arenas, and CUDA's caching allocator keeps its segments.
    """
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(None).malloc_trim(0)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def _kib(value: str) -> int:
    return int(value.split()[0]) * 1024


def _cuda_start(device: torch.device) -> dict[str, int] | None:
    """CUDA's counters at a path's start, with its peaks reset to now; None off CUDA."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return dict(torch.cuda.memory_stats(device))


def _cuda_memory(before: Mapping[str, int], after: Mapping[str, int]) -> CudaMemory:
    """The path's share of CUDA's allocator stats: peaks as read, counters as differences."""

    def grew(key: str) -> int:
        return int(after.get(key, 0)) - int(before.get(key, 0))

    reserved_peak = int(after.get("reserved_bytes.all.peak", 0))
    allocated_peak = int(after.get("allocated_bytes.all.peak", 0))
    return CudaMemory(
        reserved_peak_bytes=reserved_peak,
        allocated_peak_bytes=allocated_peak,
        reserved_final_bytes=int(after.get("reserved_bytes.all.current", 0)),
        allocated_final_bytes=int(after.get("allocated_bytes.all.current", 0)),
        fragmentation=1 - allocated_peak / reserved_peak if reserved_peak else 0.0,
        allocations=grew("allocation.all.allocated"),
        device_mallocs=grew("segment.all.allocated"),
        alloc_retries=grew("num_alloc_retries"),
        ooms=grew("num_ooms"),
    )
