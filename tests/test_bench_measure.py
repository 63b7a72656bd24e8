"""Measuring a path: RSS, GC pauses, Python allocations, CUDA's allocator stats read as deltas."""

from __future__ import annotations

import gc

import pytest
import torch

from kvstress.bench._measure import GcWatch, Probe, _cuda_memory, read_rss, settle


def test_rss_is_read_from_the_process() -> None:
    """Resident and peak resident sizes are positive, the peak at least the current size."""
    rss, peak = read_rss()
    assert 0 < rss <= peak


def test_gc_watch_counts_a_collection_and_its_pause() -> None:
    """A full collection under the watch counts once in generation 2, with a pause >= 0."""
    watch = GcWatch()
    gc.callbacks.append(watch)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(watch)
    summary = watch.summary()
    assert summary.collections == (0, 0, 1)
    assert summary.pause_s >= 0 and summary.pause_max_s == summary.pause_s


def test_probe_measures_its_block_and_removes_its_callback() -> None:
    """The probe's result covers the block (RSS, faults, GC), and its gc callback is gone afterwards."""
    callbacks = list(gc.callbacks)
    with Probe(torch.device("cpu"), trace_python=True) as probe:
        kept = torch.ones(1 << 20)  # 4 MiB touched
        gc.collect()
    result = probe.result
    assert gc.callbacks == callbacks
    assert result.rss_peak_bytes >= result.rss_final_bytes > 0
    assert result.rss_peak_scope in ("path", "process")
    assert result.minor_faults >= 0 and result.gc.collections[2] >= 1
    assert result.tracemalloc_peak_bytes is not None and result.cuda is None
    del kept


def test_probe_result_is_refused_before_the_block_ends() -> None:
    """Reading the result inside the with-block is a misuse: RuntimeError says when to read it."""
    with Probe(torch.device("cpu")) as probe, pytest.raises(RuntimeError, match="after the with-block"):
        _ = probe.result


def test_cuda_memory_takes_peaks_as_read_and_counters_as_deltas() -> None:
    """Peaks come from the end stats; allocation, segment, retry and OOM counts are differences."""
    before = {
        "allocation.all.allocated": 10,
        "segment.all.allocated": 2,
        "num_alloc_retries": 1,
        "num_ooms": 0,
    }
    after = {
        "reserved_bytes.all.peak": 1000,
        "allocated_bytes.all.peak": 750,
        "reserved_bytes.all.current": 800,
        "allocated_bytes.all.current": 0,
        "allocation.all.allocated": 110,
        "segment.all.allocated": 7,
        "num_alloc_retries": 4,
        "num_ooms": 3,
    }
    cuda = _cuda_memory(before, after)
    assert (cuda.reserved_peak_bytes, cuda.allocated_peak_bytes, cuda.reserved_final_bytes) == (
        1000,
        750,
        800,
    )
    assert cuda.fragmentation == 0.25
    assert (cuda.allocations, cuda.device_mallocs, cuda.alloc_retries, cuda.ooms) == (100, 5, 3, 3)
    assert _cuda_memory({}, {}).fragmentation == 0.0


def test_settle_runs_on_the_cpu() -> None:
    """settle() collects and trims without error where there is no CUDA."""
    settle(torch.device("cpu"))
