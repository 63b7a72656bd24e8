"""Block memory: one preallocated torch tensor ``[num_blocks, *block_shape]``; blocks are views of it.

On CUDA the reset is ordered by streams, as PyTorch's caching allocator orders the reuse of
memory across streams. A reset runs on the pool's own stream, after the releasing thread's
stream has finished its work on the block, and records an event; the block is offered (on the
host) with that event, and whoever takes it next makes its current stream wait on the event
before any of its work can touch the block. The host never blocks on the device, and no work of
the new tenant can run before the zeros land. On the CPU the reset completes before it returns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class BlockStorage:
    """The pool's memory, allocated once. Nothing here is allocated per request."""

    __slots__ = ("_ready", "_stream", "tensor")

    def __init__(
        self, num_blocks: int, block_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> None:
        self.tensor = torch.zeros((num_blocks, *block_shape), dtype=dtype, device=device)
        # block id -> the event recorded after its last reset, until the block is handed out.
        self._ready: dict[int, torch.cuda.Event] = {}
        cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device=device) if cuda else None  # type: ignore[no-untyped-call]

    def view(self, block_id: int) -> torch.Tensor:
        """A view of exactly one block's memory (made on demand, not kept)."""
        return self.tensor[block_id]

    def reset(self, block_id: int) -> None:
        """Zero one block, ordered before the caller offers it back to the queue (see module)."""
        if self._stream is None:
            self.tensor[block_id].zero_()
        else:
            self._reset_on_stream([block_id], lambda: self.tensor[block_id].zero_())

    def reset_many(self, block_ids: list[int]) -> None:
        """Zero several blocks in one device operation (a slice when the ids are one run, an
        indexed fill otherwise): the per-call cost is paid once, not per block. Ordered before
        the caller offers any of them."""
        if not block_ids:
            return
        first, last = min(block_ids), max(block_ids)
        if last - first + 1 == len(block_ids) and len(set(block_ids)) == len(block_ids):

            def zero() -> None:
                self.tensor[first : last + 1].zero_()
        else:

            def zero() -> None:
                index = torch.tensor(block_ids, dtype=torch.long, device=self.tensor.device)
                self.tensor.index_fill_(0, index, 0)

        if self._stream is None:
            zero()
        else:
            self._reset_on_stream(block_ids, zero)

    def hand_out(self, block_id: int) -> None:
        """Call as a block is handed out: on CUDA the taker's current stream waits for the
        block's reset (the host does not). A no-op on the CPU."""
        if self._ready:
            event = self._ready.pop(block_id, None)
            if event is not None:
                torch.cuda.current_stream(self.tensor.device).wait_event(event)

    def _reset_on_stream(self, block_ids: list[int], zero: Callable[[], object]) -> None:
        assert self._stream is not None
        # The releaser's queued work may still read or write the block: the reset waits for it.
        self._stream.wait_stream(torch.cuda.current_stream(self.tensor.device))
        with torch.cuda.stream(self._stream):
            zero()
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(self._stream)
        for block_id in block_ids:
            self._ready[block_id] = event  # before the caller offers the block

    @property
    def nbytes(self) -> int:
        """Bytes of block memory in all."""
        return self.tensor.numel() * self.tensor.element_size()
