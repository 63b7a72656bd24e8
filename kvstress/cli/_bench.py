"""``kvstress bench``: ``workload`` (pooled blocks against a fresh tensor per request, on one
serving-like load) and ``fragmentation`` (contiguous allocation against paged blocks)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvstress.bench import (
    FreshAlloc,
    LoadSpec,
    OverloadPolicy,
    WorkloadConfig,
    latency_svg,
    run_workload,
    workload_table,
)
from kvstress.bench._fragmentation import (
    RESERVE_MODES,
    FragmentationConfig,
    fragmentation_table,
    run_fragmentation,
)
from kvstress.bench._fragmentation_plot import fragmentation_svg
from kvstress.capacity import ModelCard, load_card
from kvstress.cli._parser import Parser, UsageError

_MIB = 1 << 20
_MAX_TOKENS = 1024  # the default length cap: a CPU-sized slice of any card's context


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register ``bench`` and its benchmarks, ``workload`` and ``fragmentation``."""
    bench = subparsers.add_parser(
        "bench",
        help="measure what the pool buys",
        description="Measure what the pool buys.",
        allow_abbrev=False,
    )
    kinds = bench.add_subparsers(dest="bench", metavar="BENCH", title="benchmarks", required=True)
    parser = kinds.add_parser(
        "workload",
        help="pooled blocks against a fresh tensor per request, side by side",
        description=(
            "Replay one seeded serving-like load (heavy-tailed lengths, K/V written block by block, "
            "held for a drawn time) through the pool, then through a fresh tensor per request; print "
            "throughput, acquire latency, memory and GC side by side."
        ),
        allow_abbrev=False,
    )
    _model_options(parser.add_argument_group("model"))
    _load_options(parser.add_argument_group("load"))
    _serving_options(parser.add_argument_group("serving"))
    out = parser.add_argument_group("output")
    out.add_argument("--json", type=Path, metavar="PATH", help="also write the report as JSON")
    out.add_argument("--plot", type=Path, metavar="PATH.svg", help="also write latency over time as SVG")
    out.add_argument("--tracemalloc", action="store_true", help="trace Python allocations (slows them)")
    parser.set_defaults(run=run)
    _add_fragmentation(kinds)


def _add_fragmentation(kinds: argparse._SubParsersAction[Parser]) -> None:
    parser = kinds.add_parser(
        "fragmentation",
        help="contiguous allocation against paged blocks, on one memory budget",
        description=(
            "Serve one seeded heavy-tailed stream of requests twice on the same memory: each request "
            "in one contiguous range (first fit), then in fixed blocks; print admissions, concurrency, "
            "utilisation and fragmentation side by side. Pure arithmetic: runs in well under a second."
        ),
        allow_abbrev=False,
    )
    defaults = FragmentationConfig()
    add = parser.add_argument
    add("--requests", type=int, default=defaults.requests, metavar="N", help="requests (%(default)s)")
    add("--memory-tokens", type=int, default=defaults.memory_tokens, metavar="T", help="budget (%(default)s)")
    add("--block-tokens", type=int, default=defaults.block_tokens, metavar="B", help="block (%(default)s)")
    add("--max-tokens", type=int, default=defaults.max_tokens, metavar="T", help="cap (%(default)s)")
    add("--median-tokens", type=int, default=defaults.median_tokens, metavar="T", help="(%(default)s)")
    add("--sigma", type=float, default=defaults.sigma, help="lognormal shape: the tail (%(default)s)")
    add("--mean-gap", type=float, default=defaults.mean_gap, metavar="TICKS", help="arrivals (%(default)s)")
    add("--patience", type=float, default=defaults.patience, metavar="TICKS", help="wait (%(default)s)")
    add("--reserve", choices=RESERVE_MODES, default=defaults.reserve, help="contiguous (%(default)s)")
    add("--seed", type=int, default=defaults.seed, help="the stream's seed (%(default)s)")
    add("--plot", type=Path, metavar="PATH.svg", help="also write memory over time as SVG")
    parser.set_defaults(run=run_fragmentation_command)


def run_fragmentation_command(args: argparse.Namespace) -> int:
    """Simulate both sides, print the table, write the plot if asked."""
    _check_outputs(None, args.plot)
    try:
        config = FragmentationConfig(
            requests=args.requests,
            memory_tokens=args.memory_tokens,
            block_tokens=args.block_tokens,
            max_tokens=args.max_tokens,
            median_tokens=args.median_tokens,
            sigma=args.sigma,
            mean_gap=args.mean_gap,
            patience=args.patience,
            reserve=args.reserve,
            seed=args.seed,
        )
    except ValueError as exc:
        flag = "--" + str(exc).split(" ", 1)[0].replace("_", "-")
        raise UsageError(f"argument {flag}: {exc}") from exc
    result = run_fragmentation(config)
    print(fragmentation_table(result))
    if args.plot is not None:
        _write("--plot", args.plot, fragmentation_svg(result))
    return 0


def _model_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--model", default="llama-2-7b", metavar="NAME", help="a model card (%(default)s)")
    group.add_argument(
        "--layers",
        type=int,
        default=2,
        metavar="N",
        help="keep N layers of the card (%(default)s: CPU-sized)",
    )
    group.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    group.add_argument(
        "--block-tokens", type=int, default=16, metavar="B", help="tokens per block (%(default)s)"
    )


def _load_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--requests", type=int, default=200, metavar="N", help="steady requests (%(default)s)")
    group.add_argument(
        "--concurrency", type=int, default=8, metavar="C", help="steady concurrency (%(default)s)"
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        metavar="T",
        help=f"longest request; lengths lognormal, median T/8 (default: min(context, {_MAX_TOKENS}))",
    )
    group.add_argument("--sigma", type=float, default=1.0, help="lognormal shape: the tail (%(default)s)")
    group.add_argument(
        "--hold-ms", type=float, default=50.0, metavar="MS", help="mean hold time (%(default)s)"
    )
    group.add_argument("--burst", type=int, default=0, metavar="N", help="N more requests arriving at once")
    group.add_argument("--seed", type=int, default=0, help="the load's seed (%(default)s)")


def _serving_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--pool-blocks", type=int, metavar="N", help="pool size (default: kvstress plan)")
    group.add_argument(
        "--policy", choices=[p.value for p in OverloadPolicy], default="queue", help="when the pool is empty"
    )
    group.add_argument(
        "--queue-timeout-ms",
        type=float,
        default=200.0,
        metavar="MS",
        help="longest wait for a block (%(default)s)",
    )
    group.add_argument("--max-attempts", type=int, default=20, metavar="N", help="queue tries (%(default)s)")
    group.add_argument(
        "--sink", type=int, default=1, metavar="B", help="truncate keeps the first B blocks (%(default)s)"
    )
    group.add_argument("--window", type=int, default=4, metavar="B", help="... and the last B (%(default)s)")
    group.add_argument(
        "--memory-cap-mib", type=float, metavar="MIB", help="per-request path's memory (default: the pool's)"
    )
    group.add_argument(
        "--fresh", choices=[f.value for f in FreshAlloc], default="zeros", help="per request (%(default)s)"
    )


def run(args: argparse.Namespace) -> int:
    """Run the workload, print its table, write what was asked; Ctrl-C still prints and writes."""
    _check_outputs(args.json, args.plot)
    config = _config(args)
    report = run_workload(config)
    print(workload_table(report))
    if args.json is not None:
        _write("--json", args.json, json.dumps(report.to_dict(), indent=2) + "\n")
    if args.plot is not None:
        _write("--plot", args.plot, latency_svg(report))
    if report.interrupted:
        raise KeyboardInterrupt  # what was measured is out; main exits 130 as for any interrupt
    return 0


def _config(args: argparse.Namespace) -> WorkloadConfig:
    card = _card(args.model, args.layers)
    if args.memory_cap_mib is not None and not args.memory_cap_mib > 0:
        raise UsageError(f"argument --memory-cap-mib: must be > 0, got {args.memory_cap_mib}")
    if not args.queue_timeout_ms > 0:
        raise UsageError(f"argument --queue-timeout-ms: must be > 0, got {args.queue_timeout_ms}")
    load = LoadSpec(
        requests=args.requests,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens if args.max_tokens is not None else min(card.max_context, _MAX_TOKENS),
        sigma=args.sigma,
        hold_ms=args.hold_ms,
        burst=args.burst,
        seed=args.seed,
    )
    return WorkloadConfig(
        card=card,
        load=load,
        block_tokens=args.block_tokens,
        pool_blocks=args.pool_blocks,
        device=args.device,
        policy=OverloadPolicy(args.policy),
        queue_timeout_s=args.queue_timeout_ms / 1000,
        max_attempts=args.max_attempts,
        sink_blocks=args.sink,
        window_blocks=args.window,
        memory_cap_bytes=None if args.memory_cap_mib is None else max(1, round(args.memory_cap_mib * _MIB)),
        fresh=FreshAlloc(args.fresh),
        tracemalloc=args.tracemalloc,
    )


def _card(name: str, layers: int) -> ModelCard:
    try:
        card = load_card(name)
    except ValueError as exc:
        raise UsageError(f"argument --model: {exc}") from exc
    return card if layers == card.layers else card.scaled(layers=layers)


def _write(flag: str, path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"argument {flag}: cannot write {str(path)!r}: {exc.strerror}") from exc
    print(f"wrote {path}")


def _check_outputs(json_path: Path | None, plot: Path | None) -> None:
    """Refuse unwritable outputs before the run, not after it."""
    for flag, path in (("--json", json_path), ("--plot", plot)):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"argument {flag}: the folder of {str(path)!r} must exist")
        if path is not None and path.is_dir():
            raise UsageError(f"argument {flag}: must name a file, got the folder {str(path)!r}")
    if plot is not None and plot.suffix != ".svg":
        raise UsageError(f"argument --plot: must end in .svg (the plot is SVG), got {str(plot)!r}")
