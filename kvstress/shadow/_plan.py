"""The workload of one shadow execution, drawn from its seed: sequences, lengths, forks."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class SequencePlan:
    """One sequence: ``prompt`` tokens fed in order, then ``decode`` greedy steps.

    ``fork_at`` (a length, > 0) forks a child there that continues for ``fork_decode`` steps
    from a different token (``fork_token``), sharing the full prefix blocks; None: no fork.
    """

    name: str
    prompt: tuple[int, ...]
    decode: int
    fork_at: int | None = None
    fork_decode: int = 0
    fork_token_shift: int = 1

    @property
    def length(self) -> int:
        """Tokens the sequence ends with."""
        return len(self.prompt) + self.decode


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Blocks that ``tokens`` positions take."""
    return -(-tokens // block_tokens)


def draw_plan(
    seed: int, *, sequences: int, steps: int, block_tokens: int, vocab: int, forks: bool
) -> tuple[SequencePlan, ...]:
    """``sequences`` plans: prompts of 1 to ``block_tokens`` tokens, ``steps // 2`` to ``steps``
    decode steps (so sequences end at different times); with ``forks``, about half fork past
    their first full block. No sequence, fork or not, exceeds ``block_tokens + steps`` tokens."""
    rng = random.Random(seed)
    longest = block_tokens + steps
    plans = []
    for index in range(sequences):
        prompt = tuple(rng.randrange(vocab) for _ in range(rng.randint(1, block_tokens)))
        decode = rng.randint(max(1, steps // 2), steps)
        fork_at: int | None = None
        fork_decode = 0
        total = len(prompt) + decode
        if forks and total > block_tokens + 1 and rng.random() < 0.5:
            fork_at = rng.randint(block_tokens, total - 1)
            fork_decode = rng.randint(1, max(1, min(steps // 2, longest - fork_at)))
        shift = 1 + rng.randrange(max(1, vocab - 1))
        plans.append(SequencePlan(f"s{index}", prompt, decode, fork_at, fork_decode, shift))
    return tuple(plans)
