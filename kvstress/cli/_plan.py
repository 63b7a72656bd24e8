"""``kvstress plan``: size a KV-cache block pool for a model card and a load."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from kvstress._format import gib, human_bytes, table
from kvstress.capacity import CapacityPlan, ModelCard, list_cards, load_card, plan
from kvstress.cli._parser import Parser, UsageError


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register ``plan`` and its options."""
    parser = subparsers.add_parser(
        "plan",
        help="size a KV-cache block pool for a model and a load",
        description=(
            "N_min = ceil(C*S/B) blocks; the pool preallocates ceil(N_min*(1+frag)) (the core) "
            "and may grow to N_pool = ceil(N_min*(1+frag)*(1+burst))."
        ),
        allow_abbrev=False,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", metavar="NAME", help="a model card name, or a .toml card's path")
    which.add_argument("--list", action="store_true", help="list the known models and exit")
    parser.add_argument("--concurrency", type=int, metavar="C", help="concurrent requests")
    parser.add_argument("--seq-len", type=int, metavar="S", help="tokens per request")
    parser.add_argument(
        "--block-tokens", type=int, default=16, metavar="B", help="tokens per block (%(default)s)"
    )
    parser.add_argument(
        "--frag", type=float, default=0.2, help="fragmentation margin, a fraction (%(default)s)"
    )
    parser.add_argument("--burst", type=float, default=0.25, help="burst headroom, a fraction (%(default)s)")
    parser.add_argument(
        "--device-memory",
        type=float,
        dest="device_memory_gib",
        metavar="GIB",
        help="device memory for the pool, in GiB: also say what fits",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the plan (or the model list); raise UsageError or ValueError on bad input."""
    if args.list:
        print(_models_json() if args.json else _models_table())
        return 0
    missing = [
        flag
        for flag, value in (("--concurrency", args.concurrency), ("--seq-len", args.seq_len))
        if value is None
    ]
    if missing:
        raise UsageError(f"the following arguments are required with --model: {', '.join(missing)}")
    try:
        card = load_card(args.model)
    except ValueError as exc:
        # The API names its own parameter; on the command line the user wrote --model.
        said = str(exc).removeprefix("name_or_path ")
        raise UsageError(f"argument --model: {said}") from exc
    result = plan(
        card,
        concurrency=args.concurrency,
        seq_len=args.seq_len,
        block_tokens=args.block_tokens,
        frag=args.frag,
        burst=args.burst,
        device_memory_gib=args.device_memory_gib,
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else _plan_table(result, card))
    if args.seq_len > card.max_context:
        # A plan is arithmetic and still printed; the model itself cannot attend that far.
        print(
            f"kvstress: warning: --seq-len {args.seq_len:,} is past {card.name}'s context of "
            f"{card.max_context:,} tokens",
            file=sys.stderr,
        )
    return 0


def _plan_table(result: CapacityPlan, card: ModelCard) -> str:
    geometry = f"{card.layers} layers x {card.kv_heads} KV heads x {card.head_dim} head dim"
    rows = [
        ("model", f"{card.name} ({card.dtype}; {geometry})"),
        ("concurrency", f"{result.concurrency:,}"),
        ("seq_len", f"{result.seq_len:,} tokens"),
        ("block_tokens", f"{result.block_tokens}"),
        ("frag / burst", f"{result.frag} / {result.burst}"),
        ("bytes/token", f"{human_bytes(result.bytes_per_token)} ({result.bytes_per_token:,} B)"),
        ("block bytes", f"{human_bytes(result.block_bytes)} ({result.block_bytes:,} B)"),
        ("N_min", f"{result.n_min:,} blocks"),
        ("N_pool", f"{result.n_pool:,} blocks"),
        ("core / elastic", f"{result.core_blocks:,} / {result.elastic_blocks:,} blocks"),
        ("pool bytes", f"{gib(result.pool_bytes)} (core {gib(result.core_bytes)})"),
    ]
    if result.device_bytes is not None:
        rows += [
            ("device memory", gib(result.device_bytes)),
            ("fits", f"{_yes(result.fits)} (core fits: {_yes(result.core_fits)})"),
            ("max blocks", f"{result.max_blocks_fit:,}"),
            ("max concurrency", f"{result.max_concurrency_fit:,} at seq_len {result.seq_len:,}"),
        ]
    return table(rows)


def _yes(flag: bool | None) -> str:
    return "yes" if flag else "no"


def _models_table() -> str:
    rows = [("model", "layers", "heads", "kv_heads", "head_dim", "dtype", "max_context", "bytes/token")]
    for name in list_cards():
        card = load_card(name)
        rows.append(
            (
                card.name,
                str(card.layers),
                str(card.attention_heads),
                str(card.kv_heads),
                str(card.head_dim),
                card.dtype,
                f"{card.max_context:,}",
                human_bytes(card.bytes_per_token),
            )
        )
    return table(rows)


def _models_json() -> str:
    cards = [load_card(name) for name in list_cards()]
    return json.dumps([{**asdict(card), "bytes_per_token": card.bytes_per_token} for card in cards], indent=2)
