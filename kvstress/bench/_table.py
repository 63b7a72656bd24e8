"""The workload report as text: what ran, then one row per metric, the paths side by side with their ratio."""

from __future__ import annotations

from collections.abc import Callable

from kvstress._format import human_bytes, human_seconds, table
from kvstress.bench._report import PathReport, WorkloadReport
from kvstress.bench._result import Outcome

Cell = Callable[[PathReport], str]


def workload_table(report: WorkloadReport) -> str:
    """The header lines, a blank line, and the metrics table (pooled, per-request, pooled/per-request)."""
    ratios = report.ratios()
    rows = [("metric", "pooled", "per-request", "pooled/per-request")]
    for label, cell, ratio in _rows(report):
        pooled, fresh = (
            ("-" if path is None else cell(path)) for path in (report.pooled, report.per_request)
        )
        rows.append((label, pooled, fresh, _times(ratios.get(ratio))))
    return "\n".join([*_header(report), "", table(rows)])


def _header(report: WorkloadReport) -> list[str]:
    config, setup, load = report.config, report.setup, report.config.load
    burst = f" (+{load.burst} at once)" if load.burst else ""
    sized = (
        f"kvstress plan: {load.concurrency} x {setup.planned_seq_len} tokens"
        if setup.planned_seq_len
        else "given"
    )
    lines = [
        f"model     {setup.model} {setup.dtype} on {setup.device}; "
        f"block {config.block_tokens} tokens = {human_bytes(setup.block_bytes)}",
        f"load      {load.requests} requests{burst}, {load.concurrency} concurrent; tokens lognormal "
        f"(median {load.median_tokens:g}, sigma {load.sigma:g}, max {load.max_tokens}): drawn P50 "
        f"{setup.tokens_p50}, P99 {setup.tokens_p99}; hold ~{load.hold_ms:g} ms; seed {load.seed}",
        f"pool      {setup.pool_blocks} blocks = {human_bytes(setup.pool_bytes)} ({sized}); "
        f"policy {config.policy.value}, wait {human_seconds(config.queue_timeout_s)}",
        f"fresh     torch.{config.fresh.value} per request; cap {human_bytes(setup.memory_cap_bytes)} "
        f"({setup.cap_enforced_by})",
    ]
    if load.burst:
        lines.append(
            f"burst     {setup.burst_demand_blocks} blocks wanted at once, {setup.pool_blocks} in the pool"
        )
    if report.interrupted:
        lines.append("INTERRUPTED: the numbers cover the requests served before Ctrl-C")
    return lines


def _rows(report: WorkloadReport) -> list[tuple[str, Cell, str]]:
    """(label, cell, ratio key or "") per row; the CUDA and tracemalloc rows only when measured."""
    rows: list[tuple[str, Cell, str]] = [
        ("completed", lambda p: f"{len(p.completed)} / {len(p.results)}", ""),
        ("requests/s", lambda p: f"{p.requests_per_s:,.1f}", "requests_per_s"),
        ("tokens/s", lambda p: f"{p.tokens_per_s:,.0f}", "tokens_per_s"),
        ("acquire p50", lambda p: human_seconds(p.acquire_latency.p50_s), "acquire_p50_s"),
        ("acquire p99", lambda p: human_seconds(p.acquire_latency.p99_s), "acquire_p99_s"),
        ("acquire p999", lambda p: human_seconds(p.acquire_latency.p999_s), "acquire_p999_s"),
        ("request p99", lambda p: human_seconds(p.request_latency.p99_s), ""),
        ("RSS start", lambda p: human_bytes(p.measurements.rss_start_bytes), ""),
        ("RSS peak", lambda p: human_bytes(p.measurements.rss_peak_bytes), "rss_peak_bytes"),
        ("RSS final", lambda p: human_bytes(p.measurements.rss_final_bytes), "rss_final_bytes"),
        ("page faults", lambda p: f"{p.measurements.minor_faults:,}", "minor_faults"),
        ("KV tensors made", lambda p: f"{p.tensor_allocations:,}", ""),
        ("Python blocks +", lambda p: f"{p.measurements.py_blocks_delta:+,}", ""),
        ("GC runs gen 0/1/2", lambda p: "/".join(map(str, p.measurements.gc.collections)), ""),
        ("GC pause", lambda p: human_seconds(p.measurements.gc.pause_s), "gc_pause_s"),
        ("GC pause max", lambda p: human_seconds(p.measurements.gc.pause_max_s), ""),
        ("waits / timeouts", lambda p: f"{p.total(lambda r: r.waits)} / {p.total(lambda r: r.timeouts)}", ""),
        ("preemptions", lambda p: f"{p.total(lambda r: r.attempts - 1)}", ""),
        ("truncations", _truncations, ""),
        ("rejected / gave up", lambda p: f"{p.count(Outcome.REJECTED)} / {p.count(Outcome.GAVE_UP)}", ""),
        ("out of memory", lambda p: f"{p.count(Outcome.OOM)}", ""),
    ]
    rows += [(f"{phase} done", _phase(phase), "") for phase in _phases(report)]
    rows.append(("pool at end", _pool_end, ""))
    if _any_path(report, lambda p: p.measurements.tracemalloc_peak_bytes is not None):
        rows.append(
            ("tracemalloc peak", lambda p: human_bytes(p.measurements.tracemalloc_peak_bytes or 0), "")
        )
    if _any_path(report, lambda p: p.measurements.cuda is not None):
        rows += _cuda_rows()
    return rows


def _cuda_rows() -> list[tuple[str, Cell, str]]:
    def cuda(read: Callable[..., str]) -> Cell:
        return lambda p: "-" if p.measurements.cuda is None else read(p.measurements.cuda)

    return [
        ("CUDA reserved peak", cuda(lambda c: human_bytes(c.reserved_peak_bytes)), ""),
        ("CUDA allocated peak", cuda(lambda c: human_bytes(c.allocated_peak_bytes)), ""),
        ("CUDA reserved final", cuda(lambda c: human_bytes(c.reserved_final_bytes)), ""),
        ("CUDA fragmentation", cuda(lambda c: f"{c.fragmentation:.1%}"), ""),
        ("CUDA allocations", cuda(lambda c: f"{c.allocations:,}"), ""),
        ("cudaMalloc calls", cuda(lambda c: f"{c.device_mallocs:,}"), ""),
        ("CUDA alloc retries", cuda(lambda c: f"{c.alloc_retries:,}"), ""),
        ("CUDA OOMs", cuda(lambda c: f"{c.ooms:,}"), ""),
    ]


def _truncations(path: PathReport) -> str:
    return f"{path.total(lambda r: r.truncations)} ({path.total(lambda r: r.tokens_truncated):,} tokens)"


def _phase(name: str) -> Cell:
    def cell(path: PathReport) -> str:
        counts = path.phases().get(name)
        return "-" if counts is None else f"{counts['completed']} / {counts['requests']}"

    return cell


def _phases(report: WorkloadReport) -> list[str]:
    seen = report.pooled.phases() if report.pooled is not None else {}
    return list(seen) if len(seen) > 1 else []


def _pool_end(path: PathReport) -> str:
    end = path.pool_end
    if end is None:
        return "-"
    return f"{end.free_count}/{end.num_blocks} free, {end.held} held"


def _any_path(report: WorkloadReport, test: Callable[[PathReport], bool]) -> bool:
    return any(path is not None and test(path) for path in (report.pooled, report.per_request))


def _times(ratio: float | None) -> str:
    # Rows without a ratio key look up "" and get None.
    return "" if ratio is None else f"{ratio:.3g}"
