"""A Hypothesis state machine over the paged layer, checked against a model in plain tensors.

Tables are named by their ``seq_id`` in a bundle, so a failing run prints a program of
``state.allocate(...)`` / ``state.append(table=tables_0, token=1)`` lines that replays exactly.
After every step: refcounts equal the references (tables, plus one when cached), the pool's
free count equals the unreferenced blocks, every cached block holds what was cached under its
hash, and every table reads back its model's K/V. Around every write: no block another table
references changes (copy-on-write). At the end: everything freed, the cache cleared, the pool
is whole and zero.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from kvstress._errors import PoolExhausted
from kvstress._violation import InvariantViolation
from kvstress.paged._check import (
    check_cached_content,
    check_free_count,
    check_refcounts,
    check_unchanged,
    check_whole,
    shared_snapshot,
)
from kvstress.paged._hash import chain_hashes
from kvstress.paged._manager import BlockManager
from kvstress.paged._policy import Degradation, PagingPolicy
from kvstress.paged._table import BlockTable

NO_TABLE = -1
# Prompts share these prefixes, so prefix hits (and evictions of cached blocks) are common.
PREFIXES = ((1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 6, 6, 6, 6), (7, 7, 7, 7, 7, 7))


def token_kv(history: Sequence[int], token_shape: tuple[int, ...]) -> torch.Tensor:
    """The K/V of the last token of ``history``: a function of the whole history, as in a model.

    Equal prefixes give equal K/V (what makes prefix caching sound); every element differs, so
    a partial overwrite shows. Values are exact in float32 and never all zero.
    """
    digest = hashlib.sha256(b"".join(int(t).to_bytes(8, "little", signed=True) for t in history)).digest()
    base = 1 + int.from_bytes(digest[:2], "little")
    numel = 1
    for dim in token_shape:
        numel *= dim
    return (base + torch.arange(numel, dtype=torch.float32) / 128).reshape(token_shape)


def prompt_kv(tokens: Sequence[int], token_shape: tuple[int, ...]) -> torch.Tensor:
    """``token_kv`` of every prefix, stacked on the token axis: ``(2, layers, n, kv_heads, head_dim)``."""
    two, layers, heads, dim = token_shape
    if not tokens:
        return torch.zeros((two, layers, 0, heads, dim))
    return torch.stack([token_kv(tokens[: i + 1], token_shape) for i in range(len(tokens))], dim=2)


prompts = st.builds(
    lambda prefix, cut, tail: list(prefix[:cut]) + tail,
    st.sampled_from(PREFIXES),
    st.integers(0, 8),
    st.lists(st.integers(0, 3), max_size=3),
)


@dataclass
class Model:
    """What a table must read back: the kept tokens, the whole history, and the kept K/V."""

    tokens: list[int]
    history: list[int]
    kv: torch.Tensor


@dataclass(frozen=True)
class PagedOptions:
    """How the machine builds the pool and the manager."""

    num_blocks: int = 8
    block_shape: tuple[int, int, int, int, int] = (2, 2, 2, 2, 8)
    policy: PagingPolicy = field(default_factory=lambda: PagingPolicy(queue_timeout_s=0))


class PagedMachine(RuleBasedStateMachine):
    """Drives a ``manager_type`` over ``factory``'s pool against the model; see paged_machine."""

    factory: ClassVar[Callable[..., Any]]
    manager_type: ClassVar[type[BlockManager]] = BlockManager
    options: ClassVar[PagedOptions] = PagedOptions()

    tables = Bundle("tables")

    def __init__(self) -> None:
        super().__init__()
        o = self.options
        self.pool = type(self).factory(o.num_blocks, o.block_shape, dtype=torch.float32, device="cpu")
        self.manager = self.manager_type(self.pool, o.block_shape, policy=o.policy)
        self.token_shape = self.manager.token_shape
        self.models: dict[int, Model] = {}
        self.cached_kv: dict[bytes, torch.Tensor] = {}  # hash -> the block's K/V when it filled

    @rule(target=tables, prompt=prompts)
    def allocate(self, prompt: list[int]) -> int:
        kv = prompt_kv(prompt, self.token_shape)
        self._remember_full_blocks(prompt, kv)  # a failed allocate may leave full blocks cached
        before = shared_snapshot(self.manager, NO_TABLE)
        try:
            table = self.manager.allocate(prompt, kv)
        except PoolExhausted:
            return NO_TABLE
        finally:
            check_unchanged(self.manager, before, NO_TABLE)
        self.models[table.seq_id] = Model(list(prompt), list(prompt), kv)
        return table.seq_id

    @rule(table=tables, token=st.integers(0, 3))
    def append(self, table: int, token: int) -> None:
        model = self.models.get(table)
        if model is None:
            return
        kv = token_kv([*model.history, token], self.token_shape)
        truncations = self.manager.metrics()["truncations"]
        before = shared_snapshot(self.manager, table)
        try:
            self._table(table).append_token(token, kv)
        except PoolExhausted:
            return
        finally:
            check_unchanged(self.manager, before, table)
            if self.manager.metrics()["truncations"] != truncations:
                self._truncate(model)
        model.tokens.append(token)
        model.history.append(token)
        model.kv = torch.cat([model.kv, kv.unsqueeze(2)], dim=2)
        if model.tokens == model.history:  # cached hashes follow untruncated tables only
            self._remember_full_blocks(model.tokens, model.kv)

    @rule(target=tables, table=tables)
    def fork(self, table: int) -> int:
        model = self.models.get(table)
        if model is None:
            return NO_TABLE
        child = self._table(table).fork()
        self.models[child.seq_id] = Model(list(model.tokens), list(model.history), model.kv.clone())
        return child.seq_id

    @rule(table=consumes(tables))
    def free(self, table: int) -> None:
        if self.models.pop(table, None) is not None:
            self._table(table).free()

    @rule()
    def clear_cache(self) -> None:
        self.manager.clear_cache()

    @invariant()
    def consistent(self) -> None:
        check_refcounts(self.manager)
        check_free_count(self.manager)
        check_cached_content(self.manager, self.cached_kv)
        for seq_id, model in self.models.items():
            got = self._table(seq_id).kv()
            if got.shape != model.kv.shape or not torch.equal(got, model.kv):
                raise InvariantViolation(
                    "dirty-read",
                    f"table {seq_id} reads back K/V of shape {tuple(got.shape)} that differs from what "
                    f"was written for its {len(model.tokens)} tokens",
                )

    def teardown(self) -> None:
        for table in self.manager.tables():
            table.free()
        self.manager.clear_cache()
        check_whole(self.manager)

    def _table(self, seq_id: int) -> BlockTable:
        return next(t for t in self.manager.tables() if t.seq_id == seq_id)

    def _remember_full_blocks(self, tokens: Sequence[int], kv: torch.Tensor) -> None:
        size = self.manager.block_tokens
        for index, digest in enumerate(chain_hashes(tokens, size)):
            self.cached_kv.setdefault(digest, kv[:, :, index * size : (index + 1) * size].clone())

    def _truncate(self, model: Model) -> None:
        """The policy's cut, by the model's own rule: keep the sinks and the recent window."""
        policy, size = self.manager.policy, self.manager.block_tokens
        blocks = -(-len(model.tokens) // size)
        end = blocks - policy.window_blocks
        if end > policy.sink_blocks:
            del model.tokens[policy.sink_blocks * size : end * size]
            keep = [i for i in range(model.kv.shape[2]) if not policy.sink_blocks * size <= i < end * size]
            model.kv = model.kv[:, :, keep]


DEFAULT_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def paged_machine(
    factory: Callable[..., Any],
    *,
    manager_type: type[BlockManager] = BlockManager,
    policy: PagingPolicy | None = None,
    num_blocks: int = 8,
    block_shape: tuple[int, int, int, int, int] = (2, 2, 2, 2, 8),
    settings: settings | None = None,
) -> type[PagedMachine]:
    """A state machine class for a ``manager_type`` over ``factory``'s (synchronous) pool.

    ``TestPaged = paged_machine(MyPool).TestCase``. ``policy`` defaults to queue with a zero
    timeout (try once: the machine runs sequentially, so nobody else can free a block).
    """
    if not callable(factory):
        raise ValueError(f"factory must be a pool class or callable, got {factory!r}")
    if not (isinstance(manager_type, type) and issubclass(manager_type, BlockManager)):
        raise ValueError(f"manager_type must be a BlockManager subclass, got {manager_type!r}")
    chosen = policy or PagingPolicy(Degradation.QUEUE, queue_timeout_s=0)
    options = PagedOptions(num_blocks=num_blocks, block_shape=block_shape, policy=chosen)
    name = f"{getattr(factory, '__name__', 'Pool')}{manager_type.__name__}"
    machine = type(
        f"{name}PagedMachine",
        (PagedMachine,),
        {
            "factory": staticmethod(factory),
            "manager_type": manager_type,
            "options": options,
            "__module__": PagedMachine.__module__,
        },
    )
    machine.TestCase.settings = settings or DEFAULT_SETTINGS  # type: ignore[attr-defined]
    return machine
