"""The handle a pool gives out for one tenancy of one block."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from kvstress.pool._state import BlockState

if TYPE_CHECKING:
    from kvstress.pool._core import PoolCore
    from kvstress.pool._storage import BlockStorage


class Block:
    """A block as its holder sees it: ``id``, ``data`` (a view), ``state`` and ``refcount``.

    ``state`` and ``refcount`` are read live from the pool. A handle belongs to one tenancy
    (``generation``): once its block has been returned, the handle is stale and the pool
    refuses it (a release through it counts as a double release).
    """

    __slots__ = ("_core", "_storage", "generation", "id")

    def __init__(self, core: PoolCore, storage: BlockStorage, block_id: int, generation: int) -> None:
        self._core = core
        self._storage = storage
        self.id = block_id
        self.generation = generation

    @property
    def data(self) -> torch.Tensor:
        """This block's memory: a view of shape ``block_shape`` on the pool's device."""
        return self._storage.view(self.id)

    @property
    def host_span(self) -> tuple[int, int] | None:
        """(address, bytes) of this block's memory where it is host memory at a fixed address
        (read without a tensor view: the audit compares it with zeros); None otherwise."""
        return self._storage.host_span(self.id)

    @property
    def state(self) -> BlockState:
        """The block's state now."""
        return self._core.state(self.id)

    @property
    def refcount(self) -> int:
        """The block's reference count now."""
        return self._core.refcount[self.id]

    def belongs_to(self, core: PoolCore) -> bool:
        """Whether this handle was given out by the pool that owns ``core``."""
        return self._core is core

    def __repr__(self) -> str:
        return f"<Block {self.id} {self.state.name} refcount={self.refcount} gen={self.generation}>"


class BlockBatch(list[Block]):
    """What ``acquire_many`` returns: a plain list of the batch's handles that also keeps their
    ids and their one generation.

    While the list still holds exactly the handles it was made with, in their order,
    ``mark_in_use_many`` and ``release_many`` read the kept ids instead of each handle (a
    table's bookkeeping in one comparison). Once it is changed (an append, a slice assigned, a
    handle replaced) they read the handles, as for any other list.
    """

    __slots__ = ("_core", "_gens", "_handles", "_ids")

    def __init__(
        self, core: PoolCore, handles: list[Block], block_ids: Sequence[int], generation: int
    ) -> None:
        super().__init__(handles)
        self._core = core
        self._handles = handles  # the batch as made: never handed to anyone else
        self._ids = block_ids
        self._gens = [generation] * len(block_ids)

    def kept(self, core: PoolCore) -> tuple[Sequence[int], list[int]] | None:
        """The kept ids and generations, where the list is unchanged and from ``core``'s pool."""
        if self._core is core and self == self._handles:  # identity per element: one C pass
            return self._ids, self._gens
        return None
