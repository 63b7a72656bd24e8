"""A tiny decoder-only transformer whose attention reads K/V through a pluggable cache.

The same seeded weights run twice in shadow mode: once over ``ReferenceCache`` (K/V in a fresh
tensor per sequence, nothing shared with anyone) and once over the paged cache (K/V in pool
blocks). Geometry comes from a ``ModelCard``: hidden size, attention heads, KV heads (grouped-
query attention), head dim, layers, vocabulary. Everything is float32 on the CPU.

The paged path reads attention the way paged kernels do: whole blocks, with a length mask.
Slots past the sequence's length are never read (masked scores, and their values zeroed
before the weighted sum so that a stale NaN cannot leak through ``0 * NaN``). So a block that
comes out of the pool dirty, in slots the tenant has not written yet, is *not* output drift:
no real kernel reads them. What drifts is K/V the tenant wrote changing under it: a
reset that lands after the block was handed to the next tenant (it wipes what the tenant
wrote), or a block handed to two tenants at once (one overwrites the other's slots). The
decoder never clears a block itself, so it cannot hide either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from kvstress._checks import positive_int
from kvstress.capacity import ModelCard

WEIGHT_SEED = 0
"""The weights are drawn from this seed: every run, every replay, every machine has the same model."""

_ROPE_BASE = 10_000.0


class KVCache(Protocol):
    """Where one sequence's keys and values live.

    ``write`` stores the K and V of ``position`` in ``layer`` (each ``(kv_heads, head_dim)``);
    ``read`` returns ``(keys, values)``, each ``(S, kv_heads, head_dim)`` with ``S >= length``:
    rows ``0 .. length - 1`` are the positions in order, and rows from ``length`` on are padding
    that the decoder masks out.
    """

    def write(self, layer: int, position: int, key: torch.Tensor, value: torch.Tensor) -> None: ...

    def read(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]: ...


class ReferenceCache:
    """K/V in one fresh tensor owned by one sequence: ``(2, layers, capacity, kv_heads, head_dim)``."""

    def __init__(self, card: ModelCard, capacity: int) -> None:
        positive_int("capacity", capacity)
        self.kv = torch.zeros((2, card.layers, capacity, card.kv_heads, card.head_dim), dtype=torch.float32)

    def write(self, layer: int, position: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store K and V at ``position``."""
        self.kv[0, layer, position] = key
        self.kv[1, layer, position] = value

    def read(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Exactly ``length`` rows: no padding, so nothing to mask."""
        return self.kv[0, layer, :length], self.kv[1, layer, :length]

    def fork(self) -> ReferenceCache:
        """An independent copy (a forked sequence's reference shares nothing)."""
        twin = ReferenceCache.__new__(ReferenceCache)
        twin.kv = self.kv.clone()
        return twin


@dataclass(frozen=True)
class _Layer:
    attn_norm: torch.Tensor
    qkv: torch.Tensor  # (hidden, (heads + 2 * kv_heads) * head_dim)
    out: torch.Tensor  # (heads * head_dim, hidden)
    mlp_norm: torch.Tensor
    up: torch.Tensor  # (hidden, 4 * hidden)
    down: torch.Tensor  # (4 * hidden, hidden)


MAX_WEIGHT_BYTES = 2 << 30
"""The most float32 weight memory the shadow decoder builds: a 7B card's geometry took 26 GB of
random weights, and a blind tester's machine's memory with them."""


def weight_bytes(card: ModelCard) -> int:
    """Bytes of the decoder's float32 weights for ``card``: embedding and head, and per layer the
    QKV, output and MLP matrices and the norms."""
    hidden, heads, kv, d = card.hidden_size, card.attention_heads, card.kv_heads, card.head_dim
    layer = hidden * (heads + 2 * kv) * d + heads * d * hidden + 8 * hidden * hidden + 2 * hidden
    return 4 * (2 * card.vocab_size * hidden + card.layers * layer + hidden)


class TinyDecoder:
    """Embedding, per layer RMSNorm + grouped-query attention with RoPE + MLP, final norm, LM head.

    Weights are normal with std ``1/sqrt(fan_in)`` (seeded by ``seed``), so activations, attention
    scores and logits are all of order one: replacing one position's K or V moves the logits by
    far more than float32 rounding does (see ``kvstress.shadow._run.TOLERANCE``).

    Raises ValueError when the card's heads are not a multiple of its KV heads, its head dim is
    odd (RoPE rotates pairs) or ``max_positions`` is not an int >= 1.
    """

    def __init__(self, card: ModelCard, *, max_positions: int, seed: int = WEIGHT_SEED) -> None:
        if card.attention_heads % card.kv_heads:
            raise ValueError(
                f"card.attention_heads must be a multiple of card.kv_heads ({card.kv_heads}), "
                f"got {card.attention_heads} (card {card.name})"
            )
        if card.head_dim % 2:
            raise ValueError(f"card.head_dim must be even for RoPE, got {card.head_dim} (card {card.name})")
        needed = weight_bytes(card)
        if needed > MAX_WEIGHT_BYTES:
            raise ValueError(
                f"card {card.name} needs {needed / 2**30:.1f} GiB of float32 weights for the shadow "
                f"decoder, more than its {MAX_WEIGHT_BYTES / 2**30:g} GiB: shadow runs a small card's "
                "geometry (tiny, or a card of your own with fewer layers or a smaller hidden size)"
            )
        self.card = card
        self.max_positions = positive_int("max_positions", max_positions)
        self._group = card.attention_heads // card.kv_heads
        self._scale = 1.0 / math.sqrt(card.head_dim)
        gen = torch.Generator().manual_seed(seed)
        hidden, heads, kv, d = card.hidden_size, card.attention_heads, card.kv_heads, card.head_dim
        self.embed = _normal(gen, (card.vocab_size, hidden), 1.0)
        self.layers = tuple(
            _Layer(
                attn_norm=1.0 + _normal(gen, (hidden,), 0.1),
                qkv=_normal(gen, (hidden, (heads + 2 * kv) * d), hidden**-0.5),
                out=_normal(gen, (heads * d, hidden), (heads * d) ** -0.5),
                mlp_norm=1.0 + _normal(gen, (hidden,), 0.1),
                up=_normal(gen, (hidden, 4 * hidden), hidden**-0.5),
                down=_normal(gen, (4 * hidden, hidden), (4 * hidden) ** -0.5),
            )
            for _ in range(card.layers)
        )
        self.final_norm = 1.0 + _normal(gen, (hidden,), 0.1)
        self.lm_head = _normal(gen, (hidden, card.vocab_size), hidden**-0.5)
        angles = torch.outer(
            torch.arange(max_positions, dtype=torch.float32),
            _ROPE_BASE ** (-torch.arange(0, d, 2, dtype=torch.float32) / d),
        )
        self._cos, self._sin = angles.cos(), angles.sin()

    def step(self, token: int, position: int, cache: KVCache) -> torch.Tensor:
        """Run one token at ``position`` (its K/V go into ``cache`` first, then attention reads
        positions ``0 .. position``); return the next-token logits, shape ``(vocab_size,)``."""
        if not 0 <= token < self.card.vocab_size:
            raise ValueError(f"token must be in [0, {self.card.vocab_size}), got {token!r}")
        if not 0 <= position < self.max_positions:
            raise ValueError(f"position must be in [0, {self.max_positions}), got {position!r}")
        heads, kv, d = self.card.attention_heads, self.card.kv_heads, self.card.head_dim
        x = self.embed[token]
        for index, layer in enumerate(self.layers):
            qkv = _rms(x, layer.attn_norm) @ layer.qkv
            q = self._rope(qkv[: heads * d].view(heads, d), position)
            k = self._rope(qkv[heads * d : (heads + kv) * d].view(kv, d), position)
            v = qkv[(heads + kv) * d :].view(kv, d)
            cache.write(index, position, k, v)
            keys, values = cache.read(index, position + 1)
            x = x + self._attend(q, keys, values, position + 1).reshape(-1) @ layer.out
            x = x + torch.nn.functional.silu(_rms(x, layer.mlp_norm) @ layer.up) @ layer.down
        logits: torch.Tensor = _rms(x, self.final_norm) @ self.lm_head
        return logits

    def _rope(self, x: torch.Tensor, position: int) -> torch.Tensor:
        half = x.shape[-1] // 2
        cos, sin = self._cos[position], self._sin[position]
        first, second = x[..., :half], x[..., half:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, length: int) -> torch.Tensor:
        """Grouped-query attention of ``q`` (heads, d) over rows ``< length`` of keys/values."""
        valid = torch.arange(keys.shape[0]) < length
        # Padding rows are never read: -inf scores and zero values, whatever the block held.
        keys = torch.where(valid[:, None, None], keys, 0.0).repeat_interleave(self._group, dim=1)
        values = torch.where(valid[:, None, None], values, 0.0).repeat_interleave(self._group, dim=1)
        scores = torch.einsum("hd,shd->hs", q, keys) * self._scale
        weights = torch.softmax(scores.masked_fill(~valid, float("-inf")), dim=-1)
        return torch.einsum("hs,shd->hd", weights, values)


def _normal(gen: torch.Generator, shape: tuple[int, ...], std: float) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float32) * std


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean() + 1e-6) * weight
