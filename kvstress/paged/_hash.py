"""The prefix cache's block identity: a stable hash chained over a block's tokens and its parent."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

ROOT_HASH = b""  # the parent of a sequence's first block


def block_hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    """SHA-256 over the parent block's hash and this block's token ids.

    Stable across processes (Python's ``hash()`` is salted per process), and chained, so two
    blocks with the same tokens after different prefixes get different hashes.
    """
    digest = hashlib.sha256()
    digest.update(len(parent).to_bytes(1, "little"))
    digest.update(parent)
    for token in tokens:
        digest.update(int(token).to_bytes(8, "little", signed=True))
    return digest.digest()


def chain_hashes(tokens: Sequence[int], block_tokens: int) -> list[bytes]:
    """The chained hash of every full block of ``tokens``, first block first."""
    hashes: list[bytes] = []
    parent = ROOT_HASH
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        parent = block_hash(parent, tokens[start : start + block_tokens])
        hashes.append(parent)
    return hashes
