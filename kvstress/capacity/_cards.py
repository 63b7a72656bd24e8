"""Model cards: a model's KV-cache geometry, read from one TOML file per model.

The shipped cards live in the repository's ``models/`` folder, which a wheel installs as
``kvstress/models/``. Folders named in ``KVSTRESS_MODELS`` (``os.pathsep``-separated) add user
cards; a user card shadows a shipped card of the same name, so a wrong number can be fixed
without waiting for a release.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, replace
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypeVar

import torch

from kvstress._checks import got, non_empty_str, positive_int

ENV_VAR: Final = "KVSTRESS_MODELS"

DTYPES: Final[Mapping[str, torch.dtype]] = MappingProxyType(
    {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
)

_INT_FIELDS: Final = (
    "layers",
    "attention_heads",
    "kv_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "max_context",
)

_PoolT = TypeVar("_PoolT")


@dataclass(frozen=True, slots=True)
class ModelCard:
    """One model's KV-cache geometry and the source of its numbers.

    Invariant, checked on construction: every int field is an int >= 1, ``dtype`` is a key of
    ``DTYPES``, ``name`` and ``source`` are non-empty. ``head_dim * attention_heads`` need not
    equal ``hidden_size`` (some models decouple them, and scaled cards do). Raises ValueError
    naming the field otherwise.
    """

    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    dtype: str
    max_context: int
    source: str
    notes: str = ""

    def __post_init__(self) -> None:
        non_empty_str("name", self.name)
        non_empty_str("source", self.source)
        if not isinstance(self.notes, str):
            raise ValueError(f"notes must be a string, got {got(self.notes)}")
        for name in _INT_FIELDS:
            positive_int(name, getattr(self, name))
        if not isinstance(self.dtype, str) or self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {got(self.dtype)}")

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype of the KV cache."""
        return DTYPES[self.dtype]

    @property
    def bytes_per_element(self) -> int:
        """Bytes of one K or V element."""
        return self.torch_dtype.itemsize

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes one token takes: K and V, in every layer, for every KV head."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_element

    def block_shape(self, block_tokens: int = 16) -> tuple[int, int, int, int, int]:
        """The shape of one block: ``(2, layers, block_tokens, kv_heads, head_dim)``, K then V."""
        positive_int("block_tokens", block_tokens)
        return (2, self.layers, block_tokens, self.kv_heads, self.head_dim)

    def scaled(
        self,
        *,
        layers: int | None = None,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        dtype: str | None = None,
    ) -> ModelCard:
        """A copy with the given geometry (for CPU tests); its name says what was changed.

        Raises ValueError when nothing is given, or when a value is invalid (naming it).
        """
        changes: dict[str, Any] = {
            key: value
            for key, value in (
                ("layers", layers),
                ("kv_heads", kv_heads),
                ("head_dim", head_dim),
                ("dtype", dtype),
            )
            if value is not None
        }
        if not changes:
            raise ValueError("scaled() needs at least one of layers, kv_heads, head_dim, dtype")
        label = ",".join(f"{key}={value}" for key, value in changes.items())
        return replace(self, name=f"{self.name}-scaled[{label}]", **changes)


def pool_for_model(
    factory: Callable[..., _PoolT],
    card: ModelCard,
    num_blocks: int,
    *,
    block_tokens: int = 16,
    device: torch.device | str | None = None,
    **pool_kwargs: Any,
) -> _PoolT:
    """Build ``factory`` (a pool class) with the card's block shape and dtype.

    The pool allocates ``num_blocks * block_tokens * card.bytes_per_token`` bytes at once; on a
    CPU use a ``card.scaled(...)`` or the ``tiny`` card. Other keyword arguments go to the pool.
    """
    return factory(
        num_blocks,
        card.block_shape(block_tokens),
        dtype=card.torch_dtype,
        device=device,
        **pool_kwargs,
    )


def list_cards() -> list[str]:
    """The names of every known card, shipped and user, sorted."""
    names = {
        entry.name.removesuffix(".toml")
        for folder in _card_folders()
        for entry in folder.iterdir()
        if entry.name.endswith(".toml") and entry.is_file()
    }
    return sorted(names)


def load_card(name_or_path: str | os.PathLike[str]) -> ModelCard:
    """The card of a known model name, or of a ``.toml`` file given by path.

    Raises ValueError for an unknown name (listing the known ones), a missing file, or a
    malformed card (naming the file and the field).
    """
    if _looks_like_path(name_or_path):
        path = Path(name_or_path)
        if not path.is_file():
            shown = os.fspath(name_or_path)
            raise ValueError(f"name_or_path must be an existing .toml file, got {shown!r}")
        return _read_card(path)
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(f"name_or_path must be a model name or a path, got {got(name_or_path)}")
    for folder in _card_folders():
        candidate = folder.joinpath(f"{name_or_path}.toml")
        if candidate.is_file():
            return _read_card(candidate)
    known = ", ".join(list_cards()) or "(none found)"
    raise ValueError(
        f"name_or_path must be a known model or a .toml file, got {name_or_path!r}; known models: {known}"
    )


def _looks_like_path(name_or_path: object) -> bool:
    """A path object, or a string with a folder separator or the .toml suffix; never a name."""
    if isinstance(name_or_path, os.PathLike):
        return True
    if not isinstance(name_or_path, str):
        return False
    separators = {os.sep, os.altsep or os.sep}
    return name_or_path.endswith(".toml") or any(sep in name_or_path for sep in separators)


def _read_card(file: Traversable) -> ModelCard:
    """Parse and validate one card; every error names the file."""
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"model card {file}: cannot be read as TOML: {exc}") from exc
    known = {field.name for field in fields(ModelCard)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"model card {file}: unknown field {unknown[0]!r}")
    required = [field.name for field in fields(ModelCard) if field.default is MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"model card {file}: missing field {missing[0]!r}")
    try:
        card = ModelCard(**data)
    except ValueError as exc:
        raise ValueError(f"model card {file}: {exc}") from exc
    stem = file.name.removesuffix(".toml")
    if card.name != stem:
        raise ValueError(f"model card {file}: name must equal the file name {stem!r}, got {card.name!r}")
    return card


def _card_folders() -> list[Traversable]:
    """Where cards are looked up, first match wins: ``KVSTRESS_MODELS`` folders, then shipped."""
    folders: list[Traversable] = []
    for entry in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if not entry:
            continue
        folder = Path(entry)
        if not folder.is_dir():
            raise ValueError(f"{ENV_VAR} must name existing folders, got {entry!r}")
        folders.append(folder)
    shipped = _shipped_folder()
    if shipped is not None:
        folders.append(shipped)
    return folders


def _shipped_folder() -> Traversable | None:
    """The shipped cards: inside the package when installed from a wheel, else in the checkout."""
    installed = resources.files("kvstress").joinpath("models")
    if installed.is_dir():
        return installed
    # setuptools' editable install (lenient mode) cannot import a package-dir mapped folder
    # without __init__.py, so an editable install, like a bare checkout, reads the cards in
    # place. The pyproject.toml check keeps a stray site-packages/models from being taken.
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "models").is_dir():
        return root / "models"
    return None
