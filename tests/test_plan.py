"""The capacity model: known answers, exact rounding, the core/elastic split, device fit, misuse."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvstress.capacity import CapacityPlan, ModelCard, load_card, plan

GIB = 1 << 30


@pytest.fixture(autouse=True)
def _no_user_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVSTRESS_MODELS", raising=False)


@pytest.fixture(scope="module")
def llama2() -> ModelCard:
    return load_card("llama-2-7b")


def test_llama2_known_answer(llama2: ModelCard) -> None:
    """Llama-2-7B fp16, 64 x 2048 tokens, 16-token blocks: 8 MiB blocks, 8192 -> 12288, 96 GiB."""
    result = plan(llama2, concurrency=64, seq_len=2048)
    assert result.bytes_per_token == 524288
    assert result.block_bytes == 8 * 1024 * 1024 == 8388608
    assert result.n_min == 8192
    assert result.n_pool == 12288
    assert result.pool_bytes == 96 * GIB


def test_known_margins_give_exactly_12288(llama2: ModelCard) -> None:
    """8192 blocks x 1.2 x 1.25 is exactly 12288 blocks, not 12289."""
    assert plan(llama2, concurrency=64, seq_len=2048, frag=0.2, burst=0.25).n_pool == 12288


def test_float_ceil_trap_is_avoided(llama2: ModelCard) -> None:
    """100 blocks x 1.1 (x 1.1) ceil to 111 (122) in floats; the plan gives exactly 110 and 121."""
    assert (math.ceil(100 * 1.1), math.ceil(100 * 1.1 * 1.1)) == (111, 122)  # the trap is real
    result = plan(llama2, concurrency=100, seq_len=16, frag=0.1, burst=0.1)
    assert (result.n_min, result.core_blocks, result.n_pool) == (100, 110, 121)


def test_core_and_elastic_split_the_pool(llama2: ModelCard) -> None:
    """core = ceil(8192 x 1.2) = 9831 preallocated; the 2457 elastic blocks make up n_pool."""
    result = plan(llama2, concurrency=64, seq_len=2048)
    assert (result.core_blocks, result.elastic_blocks) == (9831, 2457)
    assert result.core_bytes == 9831 * result.block_bytes


def test_zero_margins_give_exactly_the_minimum(llama2: ModelCard) -> None:
    """With frag = burst = 0 the pool is n_min blocks, all of them core."""
    result = plan(llama2, concurrency=3, seq_len=100, frag=0, burst=0.0)
    assert result.n_min == result.core_blocks == result.n_pool == 19
    assert result.elastic_blocks == 0


def test_a_partly_filled_block_counts_whole() -> None:
    """3 requests of 17 tokens fill 51 tokens: 4 blocks of 16, not 3.19."""
    assert plan(load_card("tiny"), concurrency=3, seq_len=17, frag=0, burst=0).n_min == 4


@given(
    concurrency=st.integers(1, 4096),
    seq_len=st.integers(1, 1 << 17),
    block_tokens=st.sampled_from([1, 8, 16, 32, 128]),
    frag_pct=st.integers(0, 300),
    burst_pct=st.integers(0, 300),
)
def test_rounding_matches_integer_arithmetic(
    concurrency: int, seq_len: int, block_tokens: int, frag_pct: int, burst_pct: int
) -> None:
    """For margins in whole percent, n_min, core and n_pool equal their integer-only formulas."""
    result = plan(
        load_card("tiny"),
        concurrency=concurrency,
        seq_len=seq_len,
        block_tokens=block_tokens,
        frag=frag_pct / 100,
        burst=burst_pct / 100,
    )
    n_min = -(-concurrency * seq_len // block_tokens)
    assert result.n_min == n_min
    assert result.core_blocks == -(-n_min * (100 + frag_pct) // 100)
    assert result.n_pool == -(-n_min * (100 + frag_pct) * (100 + burst_pct) // 10000)
    assert result.core_blocks + result.elastic_blocks == result.n_pool
    assert result.pool_bytes == result.n_pool * result.block_bytes


def test_device_fit_for_llama2_on_80_gib(llama2: ModelCard) -> None:
    """On 80 GiB the 96 GiB pool does not fit, its core does, and 53 requests of 2048 would."""
    result = plan(llama2, concurrency=64, seq_len=2048, device_memory_gib=80)
    assert result.device_bytes == 80 * GIB
    assert (result.fits, result.core_fits) == (False, True)
    assert result.max_blocks_fit == 10240
    assert result.max_concurrency_fit == 53


def test_a_pool_exactly_the_device_size_fits(llama2: ModelCard) -> None:
    """A 96 GiB pool fits 96 GiB of memory (the bound is inclusive)."""
    result = plan(llama2, concurrency=64, seq_len=2048, device_memory_gib=96)
    assert result.fits is True
    assert result.max_concurrency_fit == 64


def test_fractional_gib_rounds_down_to_whole_bytes(llama2: ModelCard) -> None:
    """device_memory_gib=0.1 is floor(0.1 x 2**30) = 107374182 bytes."""
    assert plan(llama2, concurrency=1, seq_len=1, device_memory_gib=0.1).device_bytes == 107374182


def test_no_request_fits_a_tiny_device(llama2: ModelCard) -> None:
    """1 GiB holds 128 blocks but one 2048-token request needs 192: max concurrency is 0."""
    result = plan(llama2, concurrency=1, seq_len=2048, device_memory_gib=1)
    assert (result.fits, result.max_blocks_fit, result.max_concurrency_fit) == (False, 128, 0)


def test_without_device_memory_the_fit_is_unknown(llama2: ModelCard) -> None:
    """Without device_memory_gib every device field is None."""
    result = plan(llama2, concurrency=1, seq_len=1)
    fields = (result.device_bytes, result.fits, result.core_fits, result.max_blocks_fit)
    assert fields == (None, None, None, None)
    assert result.max_concurrency_fit is None


@given(
    seq_len=st.integers(1, 32768),
    gib=st.integers(1, 200),
    frag_pct=st.integers(0, 100),
    burst_pct=st.integers(0, 100),
)
def test_max_concurrency_is_the_largest_that_fits(
    seq_len: int, gib: int, frag_pct: int, burst_pct: int
) -> None:
    """max_concurrency_fit requests fit the device; one more request does not."""
    card = load_card("llama-3-8b")
    margins: dict[str, Any] = {"frag": frag_pct / 100, "burst": burst_pct / 100, "device_memory_gib": gib}
    best = plan(card, concurrency=1, seq_len=seq_len, **margins).max_concurrency_fit
    assert best is not None
    if best >= 1:
        assert plan(card, concurrency=best, seq_len=seq_len, **margins).fits is True
    assert plan(card, concurrency=best + 1, seq_len=seq_len, **margins).fits is False


def test_to_dict_is_json_with_the_results_and_the_inputs(llama2: ModelCard) -> None:
    """to_dict() survives a JSON round trip and carries the results and every input."""
    result = plan(llama2, concurrency=64, seq_len=2048, device_memory_gib=80)
    data = json.loads(json.dumps(result.to_dict()))
    assert {
        "model": "llama-2-7b",
        "concurrency": 64,
        "seq_len": 2048,
        "block_tokens": 16,
        "frag": 0.2,
        "burst": 0.25,
        "bytes_per_token": 524288,
        "block_bytes": 8388608,
        "n_min": 8192,
        "n_pool": 12288,
        "pool_bytes": 96 * GIB,
        "core_blocks": 9831,
        "elastic_blocks": 2457,
        "fits": False,
        "max_concurrency_fit": 53,
    }.items() <= data.items()
    assert set(data) == {field.name for field in dataclasses.fields(CapacityPlan)}


def test_plan_is_frozen(llama2: ModelCard) -> None:
    """A CapacityPlan cannot be changed after it is made."""
    result = plan(llama2, concurrency=1, seq_len=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.n_pool = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"concurrency": 0}, r"concurrency must be an int >= 1, got 0 \(int\)"),
        ({"concurrency": True}, r"concurrency must be an int >= 1, got True \(bool\)"),
        ({"concurrency": 2.0}, r"concurrency must be an int >= 1, got 2.0 \(float\)"),
        ({"seq_len": -1}, r"seq_len must be an int >= 1, got -1 \(int\)"),
        ({"block_tokens": 0}, r"block_tokens must be an int >= 1, got 0 \(int\)"),
        ({"frag": -0.1}, r"frag must be a finite number >= 0, got -0.1 \(float\)"),
        ({"frag": math.nan}, r"frag must be a finite number >= 0, got nan \(float\)"),
        ({"burst": math.inf}, r"burst must be a finite number >= 0, got inf \(float\)"),
        ({"burst": "0.25"}, r"burst must be a finite number >= 0, got '0.25' \(str\)"),
        ({"device_memory_gib": 0}, r"device_memory_gib must be a finite number > 0, got 0 \(int\)"),
        ({"device_memory_gib": -8.0}, r"device_memory_gib must be a finite number > 0, got -8.0"),
    ],
)
def test_bad_arguments_are_named(llama2: ModelCard, kwargs: dict[str, Any], pattern: str) -> None:
    """Each bad argument raises ValueError naming it, the value and its type."""
    arguments: dict[str, Any] = {"concurrency": 4, "seq_len": 128, **kwargs}
    with pytest.raises(ValueError, match=pattern):
        plan(llama2, **arguments)


def test_card_must_be_a_model_card() -> None:
    """Passing a model name where the card goes raises ValueError naming card."""
    with pytest.raises(ValueError, match=r"card must be a ModelCard, got 'llama-2-7b' \(str\)"):
        plan("llama-2-7b", concurrency=1, seq_len=1)  # type: ignore[arg-type]
