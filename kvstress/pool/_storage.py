"""Block memory: one preallocated torch tensor ``[num_blocks, *block_shape]``; blocks are views of it.

On CUDA the reset is ordered by streams (``StreamOrderedStorage``), as PyTorch's caching
allocator orders the reuse of memory across streams. A reset runs on the pool's own stream,
after the releasing thread's stream has finished its work on the block, and records an event;
the block is offered (on the host) with that event, and whoever takes it next makes its current
stream wait on the event before any of its work can touch the block. The host never blocks on
the device, and no work of the new tenant can run before the zeros land. On the CPU the reset
completes before it returns, and handing a block out costs nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

import torch

from kvstress.pool._core import as_run

HOST_COPY_MAX_BYTES = 64 * 1024
"""Blocks up to this size are reset on the host by one ``memoryview`` copy from a zero buffer: a
tenth of the cost of a tensor call for a 4 KiB block. Beyond it, torch's own (parallel) fill wins."""


class BlockStorage:
    """The pool's memory, allocated once. Nothing here is allocated per request."""

    __slots__ = ("tensor",)

    orders_streams = False
    """Whether ``hand_out`` must be called as a block is handed out (CUDA stream ordering)."""
    resets_under_lock = False
    """Whether ``reset`` is short and bounded enough for a pool to run it under its lock."""
    _stream: torch.cuda.Stream | None = None
    _ready: dict[int, torch.cuda.Event] = {}  # noqa: RUF012 (never written here: no events on the CPU)

    def __init__(
        self, num_blocks: int, block_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> None:
        self.tensor = torch.zeros((num_blocks, *block_shape), dtype=dtype, device=device)

    def view(self, block_id: int) -> torch.Tensor:
        """A view of exactly one block's memory (made on demand, not kept)."""
        return self.tensor[block_id]

    def host_span(self, block_id: int) -> tuple[int, int] | None:
        """(address, bytes) of one block's memory where it is host memory at a fixed address
        for the storage's life; None otherwise (device memory, or memory that may move)."""
        return None

    def reset(self, block_id: int) -> None:
        """Zero one block; done before the caller offers it back to the queue."""
        self.tensor[block_id].zero_()

    def resets_many_under_lock(self, count: int) -> bool:
        """Whether ``reset_many`` of ``count`` blocks is short and bounded enough for a pool to
        run it under its lock (as ``resets_under_lock`` says of one block)."""
        return False

    def reset_many(self, block_ids: Sequence[int]) -> None:
        """Zero several blocks in one device operation (a slice when the ids are one run, an
        indexed fill otherwise): the per-call cost is paid once, not per block. Done before the
        caller offers any of them."""
        if block_ids:
            _zero_many(self.tensor, block_ids)

    def hand_out(self, block_id: int) -> None:
        """Nothing to order on the CPU (see ``StreamOrderedStorage``)."""

    def hand_out_many(self, block_ids: Sequence[int]) -> None:
        """Nothing to order on the CPU (see ``StreamOrderedStorage``)."""

    @property
    def nbytes(self) -> int:
        """Bytes of block memory in all."""
        return self.tensor.numel() * self.tensor.element_size()


class StreamOrderedStorage(BlockStorage):
    """CUDA block memory whose resets are ordered by a stream and events (see the module)."""

    __slots__ = ("_index", "_ready", "_stream")

    orders_streams = True

    def __init__(
        self, num_blocks: int, block_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(num_blocks, block_shape, dtype, device)
        # block id -> the event recorded after its last reset, until the block is handed out.
        self._ready: dict[int, torch.cuda.Event] = {}
        # The device as an index: torch resolves a torch.device at every stream call (8 us
        # against 3 us an H200's host measured), and a pair makes three such calls.
        index = self.tensor.device.index
        assert index is not None  # a CUDA tensor's device always has one
        self._index: int = index
        self._stream = torch.cuda.Stream(device=index)  # type: ignore[no-untyped-call]

    def reset(self, block_id: int) -> None:
        """Zero one block on the pool's stream, ordered before the caller's offer."""
        self._on_stream([block_id], lambda: self.tensor[block_id].zero_())

    def reset_many(self, block_ids: Sequence[int]) -> None:
        """``reset`` for several blocks, as one operation and one event."""
        if block_ids:
            self._on_stream(block_ids, lambda: _zero_many(self.tensor, block_ids))

    def hand_out(self, block_id: int) -> None:
        """The taker's current stream waits for the block's reset (the host does not); no wait
        once the reset is seen done (``query`` costs a sixth of asking for the stream)."""
        event = self._ready.pop(block_id, None)
        if event is not None and not event.query():  # type: ignore[no-untyped-call]
            torch.cuda.current_stream(self._index).wait_event(event)

    def hand_out_many(self, block_ids: Sequence[int]) -> None:
        """``hand_out`` for a batch: one wait per distinct event (blocks reset together by one
        ``reset_many`` share one event, so a whole table returned at once costs one wait)."""
        events: dict[int, torch.cuda.Event] = {}
        for block_id in block_ids:
            event = self._ready.pop(block_id, None)
            if event is not None:
                events[id(event)] = event
        waits = [event for event in events.values() if not event.query()]  # type: ignore[no-untyped-call]
        if waits:
            stream = torch.cuda.current_stream(self._index)
            for event in waits:
                stream.wait_event(event)

    def _on_stream(self, block_ids: Sequence[int], zero: Callable[[], object]) -> None:
        stream = self._stream
        assert stream is not None
        # The releaser's queued work may still read or write the block: the reset waits for it.
        current = torch.cuda.current_stream(self._index)
        stream.wait_stream(current)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        if torch.cuda.current_device() == self._index:
            # What ``torch.cuda.stream(stream)`` does on the current device, at a seventh of the
            # cost (it asks for the current stream twice more); it would also change devices.
            torch.cuda.set_stream(stream)
            try:
                zero()
                event.record(stream)
            finally:
                torch.cuda.set_stream(current)
        else:
            with torch.cuda.stream(stream):
                zero()
                event.record(stream)
        for block_id in block_ids:
            self._ready[block_id] = event  # before the caller offers the block


class HostStorage(BlockStorage):
    """CPU block memory whose small blocks are reset without a tensor call.

    ``reset`` copies a block's worth of zero bytes over the block through a memoryview of the
    tensor's memory (the tensor is contiguous, allocated once and kept, so its address is fixed).
    All-zero bytes are zero in every torch dtype. The copy completes before ``reset`` returns.
    """

    __slots__ = ("_address", "_block_nbytes", "_bytes", "_zeros")

    resets_under_lock = True  # a copy of at most HOST_COPY_MAX_BYTES: a few microseconds

    def __init__(
        self, num_blocks: int, block_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(num_blocks, block_shape, dtype, device)
        self._block_nbytes = self.nbytes // num_blocks
        self._address = self.tensor.data_ptr()
        raw = (ctypes.c_ubyte * self.nbytes).from_address(self._address)
        self._bytes = memoryview(raw).cast("B")
        self._zeros = bytes(self._block_nbytes)

    def host_span(self, block_id: int) -> tuple[int, int]:
        """(address, bytes) of one block: the tensor is allocated once and kept."""
        size = self._block_nbytes
        return self._address + block_id * size, size

    def reset(self, block_id: int) -> None:
        """Zero one block on the host; done before the caller offers it back to the queue."""
        size = self._block_nbytes
        start = block_id * size
        self._bytes[start : start + size] = self._zeros

    def resets_many_under_lock(self, count: int) -> bool:
        """Up to ``HOST_COPY_MAX_BYTES`` times four in all (a few microseconds: a block table)."""
        return count * self._block_nbytes <= 4 * HOST_COPY_MAX_BYTES

    def reset_many(self, block_ids: Sequence[int]) -> None:
        """Zero several blocks on the host: one fill for a run of consecutive ids (a table freed
        in the order it was taken), one copy per block otherwise; done before any is offered."""
        if not block_ids:
            return
        size, count = self._block_nbytes, len(block_ids)
        run = as_run(block_ids)
        if type(run) is range and count * size <= HOST_COPY_MAX_BYTES * 16:
            # One memset: it only writes, where a copy from a zero buffer reads as much again.
            ctypes.memset(self._address + run.start * size, 0, count * size)
            return
        super().reset_many(block_ids)


def make_storage(
    num_blocks: int, block_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> BlockStorage:
    """Stream-ordered storage on CUDA; host-copy resets for small blocks on the CPU; plain
    storage otherwise."""
    if device.type == "cuda":
        return StreamOrderedStorage(num_blocks, block_shape, dtype, device)
    if device.type == "cpu" and _block_nbytes(block_shape, dtype) <= HOST_COPY_MAX_BYTES:
        return HostStorage(num_blocks, block_shape, dtype, device)
    return BlockStorage(num_blocks, block_shape, dtype, device)


def _block_nbytes(block_shape: tuple[int, ...], dtype: torch.dtype) -> int:
    count = 1
    for extent in block_shape:
        count *= extent
    return count * dtype.itemsize


def _zero_many(tensor: torch.Tensor, block_ids: Sequence[int]) -> None:
    if type(block_ids) is range:
        first, last = block_ids.start, block_ids.stop - 1
    else:
        first, last = min(block_ids), max(block_ids)
    if last - first + 1 == len(block_ids) and len(set(block_ids)) == len(block_ids):
        tensor[first : last + 1].zero_()
    else:
        index = torch.tensor(block_ids, dtype=torch.long)
        if tensor.is_cuda:
            # From pageable memory, torch's copy waits for the stream's queued work (on the pool's
            # stream that includes the releaser's, which the reset waits for): the host would
            # stall until the GPU caught up. Pinned and non-blocking, it goes on at once (torch
            # keeps the pinned buffer until the copy is done).
            index = index.pin_memory().to(tensor.device, non_blocking=True)
        tensor.index_fill_(0, index, 0)
