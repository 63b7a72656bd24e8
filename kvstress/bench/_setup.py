"""A workload config made concrete: the device, the pool's size, the per-request cap, the stream's shape."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from typing import Any

import torch

from kvstress._checks import resolve_device
from kvstress._stats import nearest_rank
from kvstress.bench._config import WorkloadConfig
from kvstress.bench._kv import block_fills
from kvstress.bench._load import Phase, Request
from kvstress.capacity import plan


@dataclass(frozen=True, slots=True)
class WorkloadSetup:
    """What a run resolved its config to, and the machine it ran on. Sizes in bytes.

    ``pool_sized_by`` is ``"plan"`` when ``kvstress.plan`` sized the pool for the concurrency
    and the steady stream's P99 length (``planned_seq_len``), else ``"given"``.
    ``cap_enforced_by`` is ``"budget"`` (counted, CPU) or ``"cuda-allocator"``.
    """

    model: str
    dtype: str
    device: str
    block_shape: tuple[int, ...]
    block_bytes: int
    pool_blocks: int
    pool_bytes: int
    pool_sized_by: str
    planned_seq_len: int | None
    memory_cap_bytes: int
    cap_enforced_by: str
    requests: int
    tokens_requested: int
    tokens_p50: int
    tokens_p99: int
    tokens_max: int
    burst_demand_blocks: int
    torch_version: str
    cpu_count: int
    machine: str

    def to_dict(self) -> dict[str, Any]:
        """Every field, by name, as JSON-ready values."""
        return asdict(self)


def resolve(config: WorkloadConfig, stream: tuple[Request, ...]) -> WorkloadSetup:
    """Resolve ``config`` for ``stream``; raises ValueError naming what cannot be served.

    The pool must hold the stream's longest request, or no policy could ever complete it.
    """
    device = _available(resolve_device(config.device))
    card, block_tokens = config.card, config.block_tokens
    tokens = [request.tokens for request in stream]
    steady = [request.tokens for request in stream if request.phase is not Phase.BURST]
    planned = round(nearest_rank(steady, 99))
    pool_blocks = config.pool_blocks
    if pool_blocks is None:
        pool_blocks = plan(
            card, concurrency=config.load.concurrency, seq_len=planned, block_tokens=block_tokens
        ).n_pool
    longest = len(block_fills(max(tokens), block_tokens))
    if pool_blocks < longest:
        raise ValueError(
            f"pool_blocks must hold the longest request ({max(tokens)} tokens, {longest} blocks), "
            f"got {pool_blocks}"
        )
    block_bytes = block_tokens * card.bytes_per_token
    pool_bytes = pool_blocks * block_bytes
    burst = [request.tokens for request in stream if request.phase is Phase.BURST]
    return WorkloadSetup(
        model=card.name,
        dtype=card.dtype,
        device=str(device),
        block_shape=card.block_shape(block_tokens),
        block_bytes=block_bytes,
        pool_blocks=pool_blocks,
        pool_bytes=pool_bytes,
        pool_sized_by="given" if config.pool_blocks is not None else "plan",
        planned_seq_len=None if config.pool_blocks is not None else planned,
        memory_cap_bytes=pool_bytes if config.memory_cap_bytes is None else config.memory_cap_bytes,
        cap_enforced_by="cuda-allocator" if device.type == "cuda" else "budget",
        requests=len(stream),
        tokens_requested=sum(tokens),
        tokens_p50=round(nearest_rank(tokens, 50)),
        tokens_p99=round(nearest_rank(tokens, 99)),
        tokens_max=max(tokens),
        burst_demand_blocks=sum(len(block_fills(count, block_tokens)) for count in burst),
        torch_version=torch.__version__,
        cpu_count=os.cpu_count() or 1,
        machine=f"{platform.system()} {platform.machine()}",
    )


def _available(device: torch.device) -> torch.device:
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {str(device)!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device must be available here, got {str(device)!r} (torch.cuda.is_available() is False)"
        )
    return device
