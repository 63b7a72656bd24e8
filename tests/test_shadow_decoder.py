"""The tiny decoder and its two caches: deterministic, paged == reference, drift when K/V is touched."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kvstress.capacity import load_card
from kvstress.shadow import TOLERANCE, PagedCache, ReferenceCache, TinyDecoder

CARD = load_card("tiny")
BLOCK_TOKENS = 4
LENGTH = 16


class FakeBlock:
    """A block outside any pool: an id and its memory."""

    def __init__(self, block_id: int, data: torch.Tensor) -> None:
        self.id = block_id
        self.data = data
        self.state = "IN_USE"
        self.refcount = 1


def blocks(fill: float | None = 0.0, count: int = LENGTH // BLOCK_TOKENS) -> list[FakeBlock]:
    """Blocks of the tiny card's shape, filled with ``fill`` (None: random garbage)."""
    shape = CARD.block_shape(BLOCK_TOKENS)
    gen = torch.Generator().manual_seed(99)
    return [
        FakeBlock(i, torch.randn(shape, generator=gen) * 50 if fill is None else torch.full(shape, fill))
        for i in range(count)
    ]


def decode_both(
    model: TinyDecoder, paged: PagedCache, tokens: list[int], *, start: int = 0
) -> tuple[ReferenceCache, list[float]]:
    """Feed ``tokens`` to a fresh reference and to ``paged``; return the per-step max |diff|."""
    reference = ReferenceCache(CARD, LENGTH)
    diffs = []
    for position, token in enumerate(tokens, start=start):
        diffs.append(
            float((model.step(token, position, reference) - model.step(token, position, paged)).abs().max())
        )
    return reference, diffs


def test_decoder_is_deterministic_from_its_seed() -> None:
    """Same seed, same logits; another seed, other logits."""
    logits = [
        TinyDecoder(CARD, max_positions=8, seed=s).step(3, 0, ReferenceCache(CARD, 8)) for s in (0, 0, 1)
    ]
    assert torch.equal(logits[0], logits[1])
    assert not torch.allclose(logits[0], logits[2])
    assert logits[0].shape == (CARD.vocab_size,) and logits[0].dtype == torch.float32


def test_paged_cache_matches_the_reference_within_float_noise() -> None:
    """Over whole blocks with a length mask, the paged side stays far below the tolerance."""
    model = TinyDecoder(CARD, max_positions=LENGTH)
    paged = PagedCache(CARD, BLOCK_TOKENS, LENGTH, blocks=blocks())
    _, diffs = decode_both(model, paged, [(7 * i) % CARD.vocab_size for i in range(LENGTH)])
    assert all(diff < TOLERANCE / 100 for diff in diffs), diffs
    assert paged.first_corruption() is None


def test_stale_slots_that_are_never_read_do_not_drift() -> None:
    """Blocks full of an earlier tenant's garbage (NaN included) are masked, as paged kernels do."""
    stale = blocks(fill=None)
    stale[-1].data[1, -1, -1, -1, -1] = float("nan")
    model = TinyDecoder(CARD, max_positions=LENGTH)
    paged = PagedCache(CARD, BLOCK_TOKENS, LENGTH, blocks=stale)
    _, diffs = decode_both(model, paged, list(range(LENGTH)))
    assert all(diff < TOLERANCE / 100 for diff in diffs), diffs  # a NaN fails too


@pytest.mark.parametrize(("kind", "layer"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_wiping_any_written_row_drifts_and_names_its_block(kind: int, layer: int) -> None:
    """Zeroing one written K (or V) row, as a late reset does, moves the next step past the tolerance."""
    model = TinyDecoder(CARD, max_positions=LENGTH)
    tokens = [(5 * i + 1) % CARD.vocab_size for i in range(LENGTH)]
    smallest = float("inf")
    for victim in range(LENGTH - 1):
        paged = PagedCache(CARD, BLOCK_TOKENS, LENGTH, blocks=blocks())
        decode_both(model, paged, tokens[: victim + 1])
        paged.blocks[victim // BLOCK_TOKENS].data[kind, layer, victim % BLOCK_TOKENS] = 0.0
        reference = ReferenceCache(CARD, LENGTH)
        for position in range(victim + 1):
            model.step(tokens[position], position, reference)
        position = victim + 1
        diff = (
            model.step(tokens[position], position, reference) - model.step(tokens[position], position, paged)
        ).abs()
        smallest = min(smallest, float(diff.max()))
        found = paged.first_corruption()
        assert found is not None
        assert (found.position, found.layer, found.kind) == (victim, layer, "KV"[kind])
        assert found.block is paged.blocks[victim // BLOCK_TOKENS] and found.slot == victim % BLOCK_TOKENS
    assert smallest > 10 * TOLERANCE, smallest


def test_reference_fork_shares_nothing() -> None:
    """A forked reference cache is a copy: writing one leaves the other alone."""
    cache = ReferenceCache(CARD, 4)
    cache.write(0, 0, torch.ones(CARD.kv_heads, CARD.head_dim), torch.ones(CARD.kv_heads, CARD.head_dim))
    twin = cache.fork()
    twin.write(0, 0, torch.zeros(CARD.kv_heads, CARD.head_dim), torch.zeros(CARD.kv_heads, CARD.head_dim))
    assert bool((cache.read(0, 1)[0] == 1).all()) and bool((twin.read(0, 1)[0] == 0).all())


def test_paged_cache_needs_a_block_at_each_boundary() -> None:
    """A new block is needed exactly when a position lands past the block table."""
    paged = PagedCache(CARD, BLOCK_TOKENS, LENGTH)
    assert paged.needs_block(0)
    paged.blocks.append(blocks(count=1)[0])
    assert [paged.needs_block(p) for p in (1, 3, 4)] == [False, False, True]


def test_bad_geometry_and_inputs_raise_value_error() -> None:
    """Heads not a multiple of KV heads, an odd head dim, or a token out of range are refused by name."""
    with pytest.raises(ValueError, match=r"attention_heads must be a multiple of card\.kv_heads"):
        TinyDecoder(replace(CARD, attention_heads=3), max_positions=4)
    with pytest.raises(ValueError, match="head_dim must be even"):
        TinyDecoder(replace(CARD, head_dim=7), max_positions=4)
    with pytest.raises(ValueError, match="max_positions must be an int >= 1"):
        TinyDecoder(CARD, max_positions=0)
    model = TinyDecoder(CARD, max_positions=4)
    with pytest.raises(ValueError, match=r"token must be in \[0, 64\), got 64"):
        model.step(64, 0, ReferenceCache(CARD, 4))
    with pytest.raises(ValueError, match=r"position must be in \[0, 4\), got 4"):
        model.step(0, 4, ReferenceCache(CARD, 5))
