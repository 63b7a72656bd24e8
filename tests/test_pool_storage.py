"""Block memory: the storage a pool picks, and resets that zero exactly one block in every dtype."""

from __future__ import annotations

import pytest
import torch

import kvstress
from kvstress import ThreadedBlockPool
from kvstress.pool._storage import HOST_COPY_MAX_BYTES, BlockStorage, HostStorage, make_storage

CPU = torch.device("cpu")
DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int64,
    torch.bool,
    torch.complex64,
]


def test_small_cpu_blocks_get_host_resets_and_large_ones_torch_fills() -> None:
    """Blocks up to HOST_COPY_MAX_BYTES are reset by a host copy; larger ones by torch."""
    limit_floats = HOST_COPY_MAX_BYTES // 4
    assert type(make_storage(4, (limit_floats,), torch.float32, CPU)) is HostStorage
    assert type(make_storage(4, (limit_floats + 1,), torch.float32, CPU)) is BlockStorage
    assert type(ThreadedBlockPool(2, (2, 8))._storage) is HostStorage


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", [HostStorage, BlockStorage])
def test_reset_zeroes_exactly_one_block(kind: type[BlockStorage], dtype: torch.dtype) -> None:
    """reset(i) leaves block i all zeros and its neighbours as they were, in every dtype."""
    storage = kind(5, (3, 7), dtype, CPU)
    storage.tensor.fill_(1)
    storage.reset(2)
    assert torch.count_nonzero(storage.tensor[2]) == 0
    others = torch.cat([storage.tensor[:2], storage.tensor[3:]])
    assert torch.equal(others, torch.ones_like(others))


@pytest.mark.parametrize("kind", [HostStorage, BlockStorage])
def test_reset_many_zeroes_the_listed_blocks_only(kind: type[BlockStorage]) -> None:
    """reset_many zeroes the listed blocks, a run or scattered, and nothing else."""
    storage = kind(8, (4,), torch.float16, CPU)
    for ids in ([1, 2, 3], [6, 0, 4]):
        storage.tensor.fill_(3)
        storage.reset_many(ids)
        zeroed = [i for i in range(8) if torch.count_nonzero(storage.tensor[i]) == 0]
        assert zeroed == sorted(ids)


def test_host_reset_writes_through_to_the_views_handed_out() -> None:
    """A view taken before the reset sees the zeros: the copy goes to the tensor's own memory."""
    storage = HostStorage(3, (2, 2), torch.float32, CPU)
    view = storage.view(1)
    view.fill_(9.0)
    storage.reset(1)
    assert torch.count_nonzero(view) == 0


def test_a_host_block_s_span_is_its_view_s_memory_and_moving_memory_has_none() -> None:
    """``host_span`` is (address, bytes) of exactly the block's view; device storage and a
    tiered pool (whose blocks move between tiers) give None."""
    pool = ThreadedBlockPool(4, (2, 8))
    block = pool.acquire(0)
    assert block is not None
    view = block.data
    assert block.host_span == (view.data_ptr(), view.nbytes)
    assert BlockStorage(2, (4,), torch.float32, torch.device("cpu")).host_span(1) is None
    tiered = kvstress.TieredBlockPool(4, (2, 8), core_blocks=2)
    held = tiered.acquire(0)
    assert held is not None and held.host_span is None
