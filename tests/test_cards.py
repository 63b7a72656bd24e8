"""Model cards: the shipped cards, their geometry, loading, validation, user folders, pools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import kvstress.capacity
from kvstress import ThreadedBlockPool
from kvstress.capacity import ModelCard, list_cards, load_card, pool_for_model

SHIPPED_BYTES_PER_TOKEN = {
    "llama-2-7b": 2 * 32 * 32 * 128 * 2,
    "llama-3-8b": 2 * 32 * 8 * 128 * 2,
    "mistral-7b": 2 * 32 * 8 * 128 * 2,
    "qwen2.5-7b": 2 * 28 * 4 * 128 * 2,
    "opt-13b": 2 * 40 * 40 * 128 * 2,
    "tiny": 2 * 2 * 2 * 8 * 4,
}

TINY: dict[str, Any] = {
    "name": "tiny",
    "layers": 2,
    "attention_heads": 4,
    "kv_heads": 2,
    "head_dim": 8,
    "hidden_size": 32,
    "vocab_size": 64,
    "dtype": "float32",
    "max_context": 256,
    "source": "a test",
}


@pytest.fixture(autouse=True)
def _no_user_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVSTRESS_MODELS", raising=False)


def _write_card(folder: Path, fields: dict[str, Any], stem: str | None = None) -> Path:
    # JSON string and int literals are valid TOML for the plain values a card holds.
    path = folder / f"{stem or fields['name']}.toml"
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in fields.items()))
    return path


def test_capacity_exports_exactly_its_public_names() -> None:
    """kvstress.capacity re-exports the six public names and nothing else."""
    # isidentifier: pytest rewrites kvstress (it ships a pytest11 plugin), adding @py_builtins, @pytest_ar
    exported = {name for name in vars(kvstress.capacity) if name.isidentifier() and not name.startswith("_")}
    assert exported == {"CapacityPlan", "ModelCard", "list_cards", "load_card", "plan", "pool_for_model"}


def test_list_cards_names_every_shipped_card() -> None:
    """list_cards() is exactly the shipped models, sorted."""
    assert list_cards() == sorted(SHIPPED_BYTES_PER_TOKEN)


@pytest.mark.parametrize("name", sorted(SHIPPED_BYTES_PER_TOKEN))
def test_every_shipped_card_loads_with_positive_kv_bytes(name: str) -> None:
    """Each shipped card loads under its own name, cites a source and has bytes_per_token > 0."""
    card = load_card(name)
    assert card.name == name
    assert card.source.strip()
    assert card.bytes_per_token > 0


@pytest.mark.parametrize(("name", "expected"), sorted(SHIPPED_BYTES_PER_TOKEN.items()))
def test_bytes_per_token_is_k_and_v_for_every_layer_and_kv_head(name: str, expected: int) -> None:
    """bytes_per_token = 2 x layers x kv_heads x head_dim x bytes per element."""
    assert load_card(name).bytes_per_token == expected


def test_gqa_card_counts_kv_heads_not_query_heads() -> None:
    """Llama-3-8B (8 KV heads of 32) takes 131072 bytes per token at bf16, a quarter of MHA."""
    card = load_card("llama-3-8b")
    assert (card.attention_heads, card.kv_heads, card.dtype) == (32, 8, "bfloat16")
    assert card.bytes_per_token == 131072


@pytest.mark.parametrize(
    ("dtype", "torch_dtype", "size"),
    [("float16", torch.float16, 2), ("bfloat16", torch.bfloat16, 2), ("float32", torch.float32, 4)],
)
def test_dtype_names_map_to_torch_dtypes(dtype: str, torch_dtype: torch.dtype, size: int) -> None:
    """Each known dtype name gives its torch dtype and element size."""
    card = ModelCard(**{**TINY, "dtype": dtype})
    assert card.torch_dtype is torch_dtype
    assert card.bytes_per_element == size


def test_block_shape_is_k_v_by_layers_tokens_heads_dims() -> None:
    """block_shape(B) is (2, layers, B, kv_heads, head_dim); B defaults to 16."""
    card = load_card("tiny")
    assert card.block_shape() == (2, 2, 16, 2, 8)
    assert card.block_shape(4) == (2, 2, 4, 2, 8)


def test_block_shape_refuses_a_non_positive_block_size() -> None:
    """block_shape(0) raises ValueError naming block_tokens."""
    with pytest.raises(ValueError, match=r"block_tokens must be an int >= 1, got 0 \(int\)"):
        load_card("tiny").block_shape(0)


def test_tiny_card_builds_a_threaded_pool_of_its_block_shape() -> None:
    """pool_for_model on the tiny card gives a ThreadedBlockPool whose blocks have block_shape."""
    card = load_card("tiny")
    pool = pool_for_model(ThreadedBlockPool, card, 3, block_tokens=4, device="cpu")
    block = pool.acquire(timeout=0)
    assert block is not None
    assert tuple(block.data.shape) == card.block_shape(4)
    assert block.data.dtype is torch.float32
    assert tuple(pool.storage.shape) == (3, *card.block_shape(4))
    assert pool.release(block)


def test_scaled_card_builds_a_small_pool_with_the_model_s_layout() -> None:
    """A scaled Llama-2 card builds a real pool whose memory is num_blocks x B x bytes_per_token."""
    card = load_card("llama-2-7b").scaled(layers=2, kv_heads=2, head_dim=8, dtype="float32")
    pool = pool_for_model(ThreadedBlockPool, card, 5, device="cpu")
    block = pool.acquire(timeout=0)
    assert block is not None
    assert tuple(block.data.shape) == (2, 2, 16, 2, 8) == card.block_shape()
    assert pool.storage.numel() * pool.storage.element_size() == 5 * 16 * card.bytes_per_token


def test_pool_for_model_passes_shape_dtype_device_and_extra_arguments() -> None:
    """pool_for_model calls factory(num_blocks, shape, dtype=, device=, **pool_kwargs)."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def factory(*args: Any, **kwargs: Any) -> str:
        calls.append((args, kwargs))
        return "pool"

    card = load_card("llama-3-8b")
    assert pool_for_model(factory, card, 7, block_tokens=32, device="meta", leak_threshold=1.0) == "pool"
    assert calls == [
        ((7, (2, 32, 32, 8, 128)), {"dtype": torch.bfloat16, "device": "meta", "leak_threshold": 1.0})
    ]


def test_scaled_changes_only_the_given_fields_and_says_so_in_the_name() -> None:
    """scaled() keeps the other fields and suffixes the name with what changed."""
    card = load_card("llama-2-7b")
    small = card.scaled(layers=2, dtype="float32")
    assert small.name == "llama-2-7b-scaled[layers=2,dtype=float32]"
    assert (small.layers, small.dtype) == (2, "float32")
    assert (small.kv_heads, small.head_dim, small.source) == (card.kv_heads, card.head_dim, card.source)


def test_scaled_without_changes_is_refused() -> None:
    """scaled() with no argument raises ValueError listing what it takes."""
    with pytest.raises(ValueError, match="layers, kv_heads, head_dim, dtype"):
        load_card("tiny").scaled()


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"layers": 0}, r"layers must be an int >= 1, got 0 \(int\)"),
        ({"kv_heads": -1}, r"kv_heads must be an int >= 1, got -1"),
        ({"dtype": "int8"}, r"dtype must be one of float16, bfloat16, float32, got 'int8' \(str\)"),
    ],
)
def test_scaled_validates_like_a_card(kwargs: dict[str, Any], pattern: str) -> None:
    """An invalid scaled() value raises ValueError naming the field and the value."""
    with pytest.raises(ValueError, match=pattern):
        load_card("tiny").scaled(**kwargs)


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"layers": True}, r"layers must be an int >= 1, got True \(bool\)"),
        ({"head_dim": 8.0}, r"head_dim must be an int >= 1, got 8.0 \(float\)"),
        ({"source": " "}, r"source must be a non-empty string"),
        ({"name": ""}, r"name must be a non-empty string"),
        ({"notes": 3}, r"notes must be a string, got 3 \(int\)"),
    ],
)
def test_card_construction_names_the_bad_field(change: dict[str, Any], pattern: str) -> None:
    """ModelCard refuses a bad field with a ValueError naming it, the value and its type."""
    with pytest.raises(ValueError, match=pattern):
        ModelCard(**{**TINY, **change})


def test_card_is_frozen() -> None:
    """A ModelCard cannot be changed after construction."""
    card = load_card("tiny")
    with pytest.raises(AttributeError):
        card.layers = 3  # type: ignore[misc]


def test_unknown_model_names_the_argument_the_value_and_the_known_models() -> None:
    """load_card('nope') raises ValueError naming name_or_path, 'nope' and the known names."""
    with pytest.raises(ValueError, match="name_or_path") as info:
        load_card("nope")
    assert "'nope'" in str(info.value)
    assert all(name in str(info.value) for name in SHIPPED_BYTES_PER_TOKEN)


def test_card_loads_from_a_path(tmp_path: Path) -> None:
    """load_card accepts a Path or a string path to a .toml card."""
    path = _write_card(tmp_path, {**TINY, "name": "mine", "layers": 3})
    assert load_card(path).layers == 3
    assert load_card(str(path)).name == "mine"


def test_missing_card_file_names_the_argument(tmp_path: Path) -> None:
    """A path to no file raises ValueError naming name_or_path and the path."""
    missing = tmp_path / "gone.toml"
    with pytest.raises(ValueError, match=r"name_or_path must be an existing \.toml file") as info:
        load_card(missing)
    assert str(missing) in str(info.value)


@pytest.mark.parametrize(
    ("change", "drop", "pattern"),
    [
        ({"layers": 0}, None, r"layers must be an int >= 1, got 0"),
        ({"layers": "32"}, None, r"layers must be an int >= 1, got '32' \(str\)"),
        ({"dtype": "int8"}, None, r"dtype must be one of"),
        ({"kv_head": 2}, None, r"unknown field 'kv_head'"),
        ({}, "kv_heads", r"missing field 'kv_heads'"),
        ({"name": "other"}, None, r"name must equal the file name 'tiny', got 'other'"),
    ],
)
def test_malformed_card_names_the_file_and_the_field(
    tmp_path: Path, change: dict[str, Any], drop: str | None, pattern: str
) -> None:
    """A malformed card raises ValueError naming its file and the offending field."""
    fields = {key: value for key, value in {**TINY, **change}.items() if key != drop}
    path = _write_card(tmp_path, fields, stem="tiny")
    with pytest.raises(ValueError, match=pattern) as info:
        load_card(path)
    assert str(path) in str(info.value)


def test_card_that_is_not_toml_names_the_file(tmp_path: Path) -> None:
    """A card with a TOML syntax error raises ValueError naming the file."""
    path = tmp_path / "broken.toml"
    path.write_text("layers = = 2\n")
    with pytest.raises(ValueError, match="cannot be read as TOML") as info:
        load_card(path)
    assert str(path) in str(info.value)


def test_user_folder_adds_cards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cards in a KVSTRESS_MODELS folder are listed and loadable by name."""
    _write_card(tmp_path, {**TINY, "name": "my-model", "layers": 5})
    monkeypatch.setenv("KVSTRESS_MODELS", str(tmp_path))
    assert list_cards() == sorted([*SHIPPED_BYTES_PER_TOKEN, "my-model"])
    assert load_card("my-model").layers == 5


def test_user_card_shadows_the_shipped_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user card named like a shipped one is the one loaded."""
    _write_card(tmp_path, {**TINY, "layers": 7})
    monkeypatch.setenv("KVSTRESS_MODELS", str(tmp_path))
    assert load_card("tiny").layers == 7
    assert list_cards().count("tiny") == 1


def test_user_folder_that_does_not_exist_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A KVSTRESS_MODELS entry that is not a folder raises ValueError naming the variable."""
    monkeypatch.setenv("KVSTRESS_MODELS", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="KVSTRESS_MODELS must name existing folders"):
        load_card("tiny")
