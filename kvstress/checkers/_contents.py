"""Block contents: fresh blocks are all zeros (dirty-read); a holder's canary survives (shared-block)."""

from __future__ import annotations

import torch

from kvstress._violation import InvariantViolation


def check_zeroed(block_id: int, data: torch.Tensor) -> None:
    """Every element of a freshly acquired block is zero; a partial reset is caught too."""
    flat = data.detach().reshape(-1)
    nonzero = torch.nonzero(flat != 0)
    if nonzero.numel() == 0:
        return
    # Quote from one snapshot: a reset still running in another thread may zero the block
    # between the test and the quote ("8 of 8 not zero (first ...: 0.0)").
    snapshot = flat.clone()
    again = torch.nonzero(snapshot != 0)
    if again.numel():
        first = int(again[0, 0])
        detail = f"{again.shape[0]} of {flat.numel()} elements not zero (first at flat index {first}: "
        detail += f"{snapshot[first].item()!r})"
    else:
        detail = (
            f"{nonzero.shape[0]} of {flat.numel()} elements not zero, zeroed since: a reset still running"
        )
    raise InvariantViolation(
        "dirty-read",
        f"block {block_id} came out of acquire with {detail}: stale K/V from an earlier holder",
    )


def check_canary(block_id: int, data: torch.Tensor, canary: float, holder: str) -> None:
    """The value ``holder`` wrote over the whole block is still there, element for element."""
    flat = data.detach().reshape(-1)
    wrong = torch.nonzero(flat != canary)
    if wrong.numel() == 0:
        return
    first = int(wrong[0, 0])
    raise InvariantViolation(
        "shared-block",
        f"block {block_id}: {wrong.shape[0]} of {flat.numel()} elements of {holder}'s canary {canary!r} "
        f"were overwritten (first at flat index {first}: {flat[first].item()!r}) while {holder} held it",
    )
