"""The workload driver: one stream through the pooled path, then the per-request path, each measured."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch

from kvstress.bench._config import WorkloadConfig
from kvstress.bench._fresh import FreshPath, MemoryBudget, device_capped
from kvstress.bench._kv import write_tokens
from kvstress.bench._load import Request, request_stream
from kvstress.bench._measure import Probe, settle
from kvstress.bench._pooled import PooledPath
from kvstress.bench._report import PathReport, PoolEnd, WorkloadReport
from kvstress.bench._result import Outcome
from kvstress.bench._setup import WorkloadSetup, resolve
from kvstress.bench._workers import serve_all
from kvstress.capacity import pool_for_model
from kvstress.pool import ThreadedBlockPool


def run_workload(config: WorkloadConfig) -> WorkloadReport:
    """Replay ``config``'s stream through both paths, pooled first, and report them side by side.

    Each path starts from a settled process (garbage collected, freed heap handed back, CUDA's
    cache emptied). Ctrl-C ends the run early without losing what was measured: the report
    comes back with ``interrupted`` set, and a path that never started is None. Raises
    ValueError when the config cannot be served here (naming what).
    """
    stream = request_stream(config.load)
    setup = resolve(config, stream)
    device = torch.device(setup.device)
    _warm_up(setup, config, device)
    settle(device)
    pooled = _run_pooled(config, setup, stream, device)
    per_request = None
    if not pooled.interrupted:
        # Ctrl-C outside the serving loop (while settling, or starting the probe) must not lose
        # the pooled path's numbers either: the per-request path is then reported as missing.
        with contextlib.suppress(KeyboardInterrupt):
            settle(device)
            per_request = _run_per_request(config, setup, stream, device)
    settle(device)
    interrupted = pooled.interrupted or per_request is None or per_request.interrupted
    return WorkloadReport(config, setup, pooled, per_request, interrupted)


def _run_pooled(
    config: WorkloadConfig, setup: WorkloadSetup, stream: tuple[Request, ...], device: torch.device
) -> PathReport:
    # The pool is made inside the probe: its memory is the pooled path's cost, held from the start.
    with Probe(device, trace_python=config.tracemalloc) as probe:
        pool = pool_for_model(
            ThreadedBlockPool, config.card, setup.pool_blocks, block_tokens=config.block_tokens, device=device
        )
        served = serve_all(PooledPath(pool, config).serve, stream, config.load, sync=_sync(device))
    metrics = pool.metrics()
    end = PoolEnd(
        num_blocks=pool.num_blocks,
        free_count=pool.free_count(),
        free_ids=len(pool.free_ids()),
        held=int(metrics["acquired_count"]),
        double_releases=int(metrics["double_release_count"]),
    )
    return PathReport(
        PooledPath.name, served.results, served.wall_s, probe.result, 1, end, served.interrupted
    )


def _run_per_request(
    config: WorkloadConfig, setup: WorkloadSetup, stream: tuple[Request, ...], device: torch.device
) -> PathReport:
    # On CUDA the allocator itself is capped (device_capped); counting as well would cap twice.
    budget = MemoryBudget(None if setup.cap_enforced_by == "cuda-allocator" else setup.memory_cap_bytes)
    path = FreshPath(
        setup.block_shape, config.card.torch_dtype, device, budget, config.fresh, config.block_tokens
    )
    with (
        device_capped(device, setup.memory_cap_bytes),
        Probe(device, trace_python=config.tracemalloc) as probe,
    ):
        served = serve_all(path.serve, stream, config.load, sync=_sync(device))
    allocations = sum(1 for result in served.results if result.outcome is not Outcome.OOM)
    return PathReport(
        FreshPath.name, served.results, served.wall_s, probe.result, allocations, None, served.interrupted
    )


def _warm_up(setup: WorkloadSetup, config: WorkloadConfig, device: torch.device) -> None:
    """Pay torch's first-call costs (thread pools, kernel setup) before either path is timed."""
    write_tokens(torch.zeros(setup.block_shape, dtype=config.card.torch_dtype, device=device), 1, 1.0)


def _sync(device: torch.device) -> Callable[[], None]:
    """Wait for the device's queued work before a path's clock stops (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        return functools.partial(torch.cuda.synchronize, device)
    return lambda: None
