"""The per-request path: a tensor per request, written, dropped; its memory budget and out-of-memory."""

from __future__ import annotations

import weakref

import pytest
import torch

from kvstress.bench import FreshAlloc, Outcome, Phase, Request
from kvstress.bench._fresh import FreshPath, MemoryBudget, device_capped
from kvstress.capacity import load_card

TINY = load_card("tiny")
BLOCK_BYTES = 16 * TINY.bytes_per_token


def _path(budget: MemoryBudget, fresh: FreshAlloc = FreshAlloc.ZEROS) -> FreshPath:
    return FreshPath(TINY.block_shape(16), TINY.torch_dtype, torch.device("cpu"), budget, fresh, 16)


def _request(tokens: int) -> Request:
    return Request(index=5, phase=Phase.BURST, tokens=tokens, hold_s=0.0)


def test_budget_refuses_what_would_pass_the_cap() -> None:
    """take() counts bytes up to the cap and refuses beyond it without counting; give() returns them."""
    budget = MemoryBudget(100)
    assert budget.take(60) and not budget.take(41) and budget.take(40)
    assert budget.held_bytes == 100
    budget.give(60)
    assert budget.held_bytes == 40 and MemoryBudget(None).take(1 << 40)


@pytest.mark.parametrize("fresh", list(FreshAlloc))
def test_a_request_writes_every_token_and_gives_its_memory_back(fresh: FreshAlloc) -> None:
    """40 tokens are written into a 3-block tensor, and the budget is back to zero afterwards."""
    budget = MemoryBudget(None)
    result = _path(budget, fresh).serve(_request(40), 0.0)
    assert (result.outcome, result.tokens_written, result.attempts, result.waits) == (
        Outcome.COMPLETED,
        40,
        1,
        0,
    )
    assert budget.held_bytes == 0


def test_the_tensor_is_dropped_when_the_request_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request's tensor has the pooled path's bytes and no reference to it survives the request."""
    made: list[weakref.ref[torch.Tensor]] = []
    shapes: list[tuple[int, ...]] = []

    def zeros(shape: tuple[int, ...], **kwargs: object) -> torch.Tensor:
        tensor = torch.zeros(shape, **kwargs)  # type: ignore[call-overload]
        made.append(weakref.ref(tensor))
        shapes.append(shape)
        return tensor

    path = _path(MemoryBudget(None))
    monkeypatch.setattr(path, "_make", zeros)
    path.serve(_request(40), 0.0)
    assert shapes == [(3, *TINY.block_shape(16))]
    assert made[0]() is None


def test_past_the_cap_the_request_is_out_of_memory() -> None:
    """A request whose tensor would pass the cap ends as oom, writes nothing, and holds nothing."""
    budget = MemoryBudget(2 * BLOCK_BYTES)
    result = _path(budget).serve(_request(40), 0.0)
    assert (result.outcome, result.tokens_written) == (Outcome.OOM, 0)
    assert budget.held_bytes == 0


def test_a_device_out_of_memory_error_is_counted_as_oom(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.OutOfMemoryError from the allocator ends the request as oom and gives the budget back."""

    def refuse(*args: object, **kwargs: object) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory")

    budget = MemoryBudget(None)
    path = _path(budget)
    monkeypatch.setattr(path, "_make", refuse)
    assert path.serve(_request(16), 0.0).outcome is Outcome.OOM
    assert budget.held_bytes == 0


def test_device_cap_does_nothing_on_the_cpu() -> None:
    """device_capped is a no-op off CUDA: the CPU path counts against its budget instead."""
    with device_capped(torch.device("cpu"), 1):
        assert torch.zeros(4).sum() == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_cap_takes_a_bare_cuda_device() -> None:
    """``--device cuda`` names no index; the cap goes on the current device (the first GPU run
    failed here: torch's fraction setter wants an index)."""
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    with device_capped(torch.device("cuda"), total // 8), pytest.raises(torch.OutOfMemoryError):
        torch.empty(total // 4, dtype=torch.uint8, device="cuda")
    kept = torch.empty(total // 4, dtype=torch.uint8, device="cuda")  # the cap is lifted after
    assert kept.numel() == total // 4
    del kept
    torch.cuda.empty_cache()
