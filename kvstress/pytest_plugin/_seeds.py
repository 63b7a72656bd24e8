"""Per-test seeds: a stable function of the session seed and the test's node id.

Each test gets its own seed, so two tests never search the same slice of the space, yet a whole
session repeats from one number: rerun with ``--kvstress-seed N`` (shown in the header) and
every test, on any xdist worker, sees the seeds it saw before. ``hash()`` would not do: string
hashing is salted per process.
"""

from __future__ import annotations

import hashlib


def seed_for(session_seed: int, nodeid: str) -> int:
    """The seed of test ``nodeid`` in the session seeded ``session_seed``, in [0, 2**63)."""
    digest = hashlib.blake2b(f"{session_seed}:{nodeid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # below 2**63: fits every scheduler and Hypothesis
