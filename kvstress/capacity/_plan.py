"""The capacity model: how many KV-cache blocks a load needs, and whether they fit a device.

For ``C`` concurrent requests of ``S`` tokens each, in blocks of ``B`` tokens:

- ``n_min  = ceil(C * S / B)``: the blocks the live tokens fill, with nothing to spare;
- ``core   = ceil(n_min * (1 + frag))``: preallocated at start; ``frag`` covers the partly
  filled last block of each request and the blocks parked in release;
- ``n_pool = ceil(n_min * (1 + frag) * (1 + burst))``: the hard maximum; the ``elastic``
  blocks above the core are grown on demand for bursts.

Rounding is done in exact rational arithmetic on the decimal the caller wrote: in floats,
``100 * 1.1`` is ``110.00000000000001`` and its ceiling one block too many.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from kvstress._checks import got, non_negative_number, positive_int, positive_number
from kvstress.capacity._cards import ModelCard

_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """The inputs of one plan and what it concluded; sizes are in bytes, counts in blocks.

    The device fields are None when no device memory was given. ``fits`` compares the whole
    pool (``n_pool``), ``core_fits`` the preallocated core only.
    """

    model: str
    dtype: str
    concurrency: int
    seq_len: int
    block_tokens: int
    frag: float
    burst: float
    device_memory_gib: float | None
    bytes_per_token: int
    block_bytes: int
    n_min: int
    n_pool: int
    core_blocks: int
    elastic_blocks: int
    pool_bytes: int
    core_bytes: int
    device_bytes: int | None
    fits: bool | None
    core_fits: bool | None
    max_blocks_fit: int | None
    max_concurrency_fit: int | None

    def to_dict(self) -> dict[str, Any]:
        """Every field, by name, as JSON-ready values."""
        return asdict(self)


def plan(
    card: ModelCard,
    *,
    concurrency: int,
    seq_len: int,
    block_tokens: int = 16,
    frag: float = 0.2,
    burst: float = 0.25,
    device_memory_gib: float | None = None,
) -> CapacityPlan:
    """Size a block pool for ``concurrency`` requests of ``seq_len`` tokens on ``card``'s model.

    ``frag`` and ``burst`` are fractions (0.2 is 20 %). With ``device_memory_gib`` (GiB,
    2**30 bytes) the plan also says what fits. Raises ValueError naming a bad argument.
    """
    if not isinstance(card, ModelCard):
        raise ValueError(f"card must be a ModelCard, got {got(card)}")
    positive_int("concurrency", concurrency)
    positive_int("seq_len", seq_len)
    positive_int("block_tokens", block_tokens)
    core_factor = 1 + _exact(non_negative_number("frag", frag))
    pool_factor = core_factor * (1 + _exact(non_negative_number("burst", burst)))
    if device_memory_gib is not None:
        positive_number("device_memory_gib", device_memory_gib)

    block_bytes = block_tokens * card.bytes_per_token
    n_min = _blocks_for(concurrency * seq_len, block_tokens)
    core_blocks = math.ceil(n_min * core_factor)
    n_pool = math.ceil(n_min * pool_factor)
    device_bytes: int | None = None
    fits: bool | None = None
    core_fits: bool | None = None
    max_blocks: int | None = None
    max_concurrency: int | None = None
    if device_memory_gib is not None:
        device_bytes = math.floor(_exact(device_memory_gib) * _GIB)
        fits = n_pool * block_bytes <= device_bytes
        core_fits = core_blocks * block_bytes <= device_bytes
        max_blocks = device_bytes // block_bytes
        max_concurrency = _max_concurrency(max_blocks, seq_len, block_tokens, pool_factor)
    return CapacityPlan(
        model=card.name,
        dtype=card.dtype,
        concurrency=concurrency,
        seq_len=seq_len,
        block_tokens=block_tokens,
        frag=frag,
        burst=burst,
        device_memory_gib=device_memory_gib,
        bytes_per_token=card.bytes_per_token,
        block_bytes=block_bytes,
        n_min=n_min,
        n_pool=n_pool,
        core_blocks=core_blocks,
        elastic_blocks=n_pool - core_blocks,
        pool_bytes=n_pool * block_bytes,
        core_bytes=core_blocks * block_bytes,
        device_bytes=device_bytes,
        fits=fits,
        core_fits=core_fits,
        max_blocks_fit=max_blocks,
        max_concurrency_fit=max_concurrency,
    )


def _exact(value: float) -> Fraction:
    # str() gives the shortest decimal that reads back as the same float: 0.2 -> "0.2" -> 1/5,
    # the number the caller meant, where Fraction(0.2) would be the binary approximation.
    return Fraction(str(value))


def _blocks_for(tokens: int, block_tokens: int) -> int:
    return -(-tokens // block_tokens)


def _max_concurrency(max_blocks: int, seq_len: int, block_tokens: int, factor: Fraction) -> int:
    """The largest concurrency whose ``n_pool`` is at most ``max_blocks`` (0 if none)."""
    # n_pool grows with the concurrency and is at least n_min >= C * S / B, so the answer lies
    # in [0, max_blocks * B // S]; bisect there with the same exact rounding as plan().
    low, high = 0, max_blocks * block_tokens // seq_len
    while low < high:
        mid = (low + high + 1) // 2
        if math.ceil(_blocks_for(mid * seq_len, block_tokens) * factor) <= max_blocks:
            low = mid
        else:
            high = mid - 1
    return low
