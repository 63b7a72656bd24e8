"""``kvstress shadow``: decode with a tiny model over a pool's blocks beside a reference.

Exit 0: no divergence within the budget (a one-paragraph summary). Exit 1: a divergence (the
first diverging step, the block responsible and the exact replay command) or a pool failure
that is not drift (a crash or a hang). Exit 2: bad input, one line.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from kvstress.capacity import ModelCard, load_card
from kvstress.cli._parser import Parser, UsageError
from kvstress.fuzz import TargetError, load_target
from kvstress.shadow import ShadowResult, shadow
from kvstress.shadow._plan import blocks_for


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register ``shadow`` and its options."""
    parser = subparsers.add_parser(
        "shadow",
        help="decode with a tiny model over a pool's blocks beside a reference; report drift",
        description="Run a tiny random-weight decoder whose KV cache lives in the pool's blocks, "
        "beside a reference that keeps K/V in fresh tensors, under the deterministic thread "
        "scheduler, seed after seed; compare logits step by step. Exit 0: no divergence; "
        "1: a divergence or a pool failure; 2: bad input.",
        allow_abbrev=False,
    )
    parser.add_argument("--pool", required=True, metavar="MODULE:ATTR", help="the pool class or factory")
    parser.add_argument("--model", default="tiny", metavar="NAME", help="model card (%(default)s)")
    parser.add_argument("--sequences", type=int, default=4, metavar="N", help="(%(default)s)")
    parser.add_argument(
        "--steps", type=int, default=12, metavar="N", help="decode steps, at most (%(default)s)"
    )
    parser.add_argument("--blocks", type=int, default=None, metavar="N", help="default: one longest sequence")
    parser.add_argument("--block-tokens", type=int, default=4, metavar="N", help="(%(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (%(default)s)")
    parser.add_argument("--budget", type=float, default=10.0, metavar="SECONDS", help="(%(default)s)")
    parser.add_argument("--seeds", type=int, default=None, metavar="N", help="stop after N seeds")
    parser.add_argument("--no-forks", action="store_true", help="no forked sequences (prefix sharing)")
    parser.add_argument("--free", action="store_true", help="real threads instead (not replayable)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the result as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Shadow the pool as asked; print the summary or the first divergence and its replay."""
    card, blocks = _check(args)
    if args.json and not Path(args.json).parent.is_dir():
        raise UsageError(f"argument --json: the folder of {args.json!r} must exist")
    try:
        target = load_target(
            args.pool, num_blocks=blocks, block_shape=card.block_shape(args.block_tokens), wider=False
        )
    except TargetError as error:
        raise UsageError(str(error)) from None
    if target.is_async:
        raise UsageError(
            f"--pool {args.pool} is an async pool; shadow mode drives thread-flavoured pools only"
        )
    result = shadow(
        target.factory,
        card=card,
        sequences=args.sequences,
        steps=args.steps,
        block_tokens=args.block_tokens,
        num_blocks=blocks,
        seed=args.seed,
        forks=not args.no_forks,
        max_seeds=args.seeds,
        budget_s=args.budget,
        mode="free" if args.free else "controlled",
    )
    replay = replay_command(args, blocks, result)
    status = _say(result, replay)
    if args.json:
        try:
            Path(args.json).write_text(json.dumps({**result.to_dict(), "replay": replay}, indent=2) + "\n")
        except OSError as error:
            raise UsageError(f"argument --json: cannot write {args.json!r}: {error.strerror}") from None
    return status


def replay_command(args: argparse.Namespace, blocks: int, result: ShadowResult) -> str | None:
    """The command that runs the finding's seed alone; None when nothing was found."""
    found = result.divergence or result.failure
    if found is None:
        return None
    words = ["kvstress", "shadow", "--pool", args.pool, "--model", args.model]
    words += ["--sequences", str(args.sequences), "--steps", str(args.steps), "--blocks", str(blocks)]
    words += ["--block-tokens", str(args.block_tokens), "--seed", str(found.seed), "--seeds", "1"]
    words += ["--no-forks"] * args.no_forks + ["--free"] * args.free
    return shlex.join(words)


def _say(result: ShadowResult, replay: str | None) -> int:
    d, f = result.divergence, result.failure
    if d is not None:
        print(
            f"divergence: sequence {d.sequence} step {d.step} (position {d.position}): max |logit diff| "
            f"{d.max_abs_diff:.3g} > {result.tolerance:g}; token: reference {d.reference_token}, "
            f"paged {d.paged_token}"
        )
        if d.block is None:
            print("block: none (every K/V read back matched what was written)")
        else:
            b = d.block
            print(
                f"block: {b.block_id} (position {b.position}, slot {b.slot}, layer {b.layer}: its {b.kind} "
                f"read back differs from what was written by {b.max_abs_diff:.3g}; "
                f"now {b.state}, refcount {b.refcount})"
            )
        print(f"seed: {d.seed}  strategy: {d.strategy}" + (f"  schedule: {d.schedule}" if d.schedule else ""))
    elif f is not None:
        print(f"pool failure: [{f.invariant}] {' '.join(f.message.splitlines())}")
        print(f"seed: {f.seed}  strategy: {f.strategy}")
    if replay is not None:
        note = "  (free-running: may not recur)" if result.mode == "free" else ""
        print(f"replay: {replay}{note}")
        return 1
    print(
        f"no divergence: {result.steps_compared:,} steps compared over {result.seeds} seeds "
        f"({result.executions} {result.mode} executions, from seed {result.first_seed}) in "
        f"{result.elapsed_s:.1f} s; max |paged - reference| logit diff {result.max_abs_diff:.2g} "
        f"(tolerance {result.tolerance:g}); pool {result.pool}, model {result.model}"
    )
    return 0


def _check(args: argparse.Namespace) -> tuple[ModelCard, int]:
    if not args.budget > 0:
        raise UsageError(f"--budget must be > 0 seconds, got {args.budget:g}")
    for flag, value in (("--sequences", args.sequences), ("--steps", args.steps)):
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    if args.block_tokens < 1:
        raise UsageError(f"--block-tokens must be >= 1, got {args.block_tokens}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    if args.seeds is not None and args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    try:
        card = load_card(args.model)
    except ValueError as error:
        raise UsageError(f"--model: {error}") from None
    least = blocks_for(args.block_tokens + args.steps, args.block_tokens)
    blocks = least if args.blocks is None else args.blocks
    if blocks < least:
        raise UsageError(
            f"--blocks must be >= {least} (one sequence of --block-tokens + --steps tokens), got {blocks}"
        )
    return card, blocks
