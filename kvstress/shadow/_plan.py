"""The workload of one shadow execution, drawn from its seed: sequences, lengths, fork trees.

Forks are where blocks are shared, so they are drawn to make sharing race: a sequence may fork
several children, at different lengths or several at once (parallel sampling), and a child may
fork in turn. A fork drawn at a sequence's last length happens as that sequence ends, so the
parent releases the shared prefix while its children retain it; children of different lengths
end, and release, while their siblings and parent still hold it. Every draw comes from the
seed, so a workload replays exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

MAX_FORKS = 6
"""Forks one root sequence's tree holds, at most (children and grandchildren together)."""

MAX_DEPTH = 2
"""Fork generations below a root: children may fork, grandchildren do not."""

# The odds of each draw (see ``_draw_forks``): one more fork, one more sample of the last fork's
# request (same length, same decode), a fork as the sequence ends.
_P_FORK = 0.8
_P_SIBLING = 0.4
_P_AT_END = 0.3
_P_NEXT = 0.3


@dataclass(frozen=True)
class ForkPlan:
    """A child forked when its parent's length reaches ``at`` (at least one full block to share).

    The child retains the parent's full blocks, copies the partial one, and decodes ``decode``
    steps from the parent's next token shifted by ``token_shift``; it forks ``forks`` itself.
    """

    at: int
    decode: int
    token_shift: int
    forks: tuple[ForkPlan, ...] = ()

    @property
    def length(self) -> int:
        """Tokens the child ends with."""
        return self.at + self.decode


@dataclass(frozen=True)
class SequencePlan:
    """One root sequence: ``prompt`` tokens fed in order, then ``decode`` greedy steps; it forks
    ``forks`` (in order of ``at``; several may share one ``at``)."""

    name: str
    prompt: tuple[int, ...]
    decode: int
    forks: tuple[ForkPlan, ...] = ()

    @property
    def length(self) -> int:
        """Tokens the sequence ends with."""
        return len(self.prompt) + self.decode

    def descendants(self) -> Iterator[ForkPlan]:
        """Every fork in the tree, parents before their children."""
        stack = list(reversed(self.forks))
        while stack:
            fork = stack.pop()
            yield fork
            stack.extend(reversed(fork.forks))

    @property
    def tokens(self) -> int:
        """Positions the whole tree decodes: the root's and every child's own steps."""
        return self.length + sum(fork.decode for fork in self.descendants())


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Blocks that ``tokens`` positions take."""
    return -(-tokens // block_tokens)


def draw_plan(
    seed: int, *, sequences: int, steps: int, block_tokens: int, vocab: int, forks: bool
) -> tuple[SequencePlan, ...]:
    """``sequences`` plans: prompts of 1 to ``block_tokens`` tokens, ``steps // 2`` to ``steps``
    decode steps (so sequences end at different times); with ``forks``, each root past its first
    full block draws a fork tree of 0 to ``MAX_FORKS`` forks (the first root at least one),
    ``MAX_DEPTH`` generations deep, children decoding 1 to ``steps // 2`` steps. No sequence,
    root or fork, exceeds ``block_tokens + steps`` tokens."""
    rng = random.Random(seed)
    longest = block_tokens + steps
    plans = []
    for index in range(sequences):
        prompt = tuple(rng.randrange(vocab) for _ in range(rng.randint(1, block_tokens)))
        decode = rng.randint(max(1, steps // 2), steps)
        tree: tuple[ForkPlan, ...] = ()
        if forks:
            # The oldest request (the most patient, so the likeliest to progress) always forks:
            # every seed shares blocks.
            budget = [rng.randint(1 if index == 0 else 0, MAX_FORKS)]
            bounds = _Bounds(longest, steps, vocab, least=1 if index == 0 else 0)
            tree = _draw_forks(rng, block_tokens, len(prompt) + decode, 1, budget, bounds)
        plans.append(SequencePlan(f"s{index}", prompt, decode, tree))
    return tuple(plans)


@dataclass(frozen=True)
class _Bounds:
    longest: int  # tokens no sequence exceeds
    steps: int  # decode steps a child takes, at most
    vocab: int
    least: int = 0  # forks the root draws, at least


def _draw_forks(
    rng: random.Random, first: int, last: int, depth: int, budget: list[int], bounds: _Bounds
) -> tuple[ForkPlan, ...]:
    """Forks of a sequence that reaches lengths ``first .. last`` (a fork at ``last`` happens as
    it ends); ``budget[0]`` forks are left for the whole tree and each drawn one spends one.

    The draws lean towards the moments sharing races: a fork as the parent ends (it releases
    the prefix while the children retain it), several children at once with one length (they
    end together, releasing the same blocks), a child forking soon after its own fork (its
    retain meets its parent's or siblings' releases)."""
    drawn: list[ForkPlan] = []
    last = min(last, bounds.longest - 1)  # a child decodes at least one token
    least = bounds.least if depth == 1 else 0
    while budget[0] > 0 and first <= last and (len(drawn) < least or rng.random() < _P_FORK):
        draw = rng.random()
        if drawn and draw < _P_SIBLING:  # one more sample of the last fork's request
            at, decode = drawn[-1].at, drawn[-1].decode
        elif drawn and draw < _P_SIBLING + _P_NEXT and drawn[-1].at < last:
            # One token after the last fork: its retains meet that fork's children's releases of
            # the partial block they copy.
            at = drawn[-1].at + 1
            decode = rng.randint(1, min(max(1, bounds.steps // 2), bounds.longest - at))
        else:
            at = last if rng.random() < _P_AT_END else rng.randint(first, last)
            decode = rng.randint(1, min(max(1, bounds.steps // 2), bounds.longest - at))
        budget[0] -= 1
        shift = 1 + rng.randrange(max(1, bounds.vocab - 1))
        nested: tuple[ForkPlan, ...] = ()
        if depth < MAX_DEPTH:
            nested = _draw_forks(rng, at + 1, at + min(decode, 2), depth + 1, budget, bounds)
        drawn.append(ForkPlan(at, decode, shift, nested))
    return tuple(sorted(drawn, key=lambda fork: fork.at))
