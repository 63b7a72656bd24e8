"""Concurrent scenarios: a few workers, each a short program of protocol steps.

A step is ``(kind, argument)``, as ``Scenarios.run_program`` runs it:

- ``("acquire", timeout)``: acquire with a timeout (finite in drawn scenarios; ``None``, no
  limit, only in a motif where a block is sure to come back); on success mark it in use and
  write a fresh canary over it;
- ``("release", None)``: verify the canary of the worker's newest block, then release it;
  ``("release", "oldest")`` does so with its oldest (a request that frees its first block
  while it keeps a later one);
- ``("share", peer)``: retain the newest block and hand the new reference to worker ``peer``;
- ``("verify", None)``: the newest block's canary is intact;
- ``("pause", n)``: ``n`` scheduling points;
- ``("sleep", seconds)``: sleep (virtual time moves, the others run);
- ``("wait", seconds)``: unless the worker holds a block, park until a peer shares one with it,
  at most ``seconds``;
- ``("cancel", peer)``: (async) cancel ``peer``'s acquire if one is in flight;
- ``("acquire_many", [n, timeout])``: (pools with the optional ``acquire_many``) take n blocks
  at once, with a finite timeout (``None`` only in a motif where the blocks are sure to come
  back); each is marked in use and given a fresh canary;
- ``("release_many", None)``: (pools with the optional ``release_many``) verify the canaries of
  every block the worker holds, then give them all back in one ``release_many`` (a request's
  block table freed at once);
- ``("rerelease", peer)``: once ``peer``'s release of its latest block has begun, release that
  block's handle again, a double release racing the peer's own (two paths of a server freeing
  one request's blocks at once: an abort and the normal finish). Of the two, one puts the block
  back and the other is refused. Only the motif that races them uses it: a block taken again by
  a third worker meanwhile would make it a stale handle's release, which the protocol does not
  ask a pool to tell from its new holder's.

Acquires always have a finite timeout: a worker waiting forever for a block another worker keeps
until its program ends would be a deadlock of the scenario, not of the pool. Blocks still held
when the programs end are released by the harness, and then the pool is checked at rest.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

Step = tuple[str, Any]
Program = tuple[Step, ...]

STEP_KINDS = (
    "acquire",
    "release",
    "share",
    "verify",
    "pause",
    "sleep",
    "wait",
    "cancel",
    "acquire_many",
    "rerelease",
    "release_many",
)

TIMEOUTS = (0.0, 0.01, 0.05, 0.2)
"""The acquire timeouts a generated step draws from, in seconds."""

SHARED_SHARE = 0.25
"""The share of scenarios that open with one block shared by every worker (see ``generate``)."""

SMALL_SHARE = 0.3
"""The share of scenarios drawn with two workers of three steps (``draw``): short executions,
in which each preemption PCT places is more likely to be the one a shallow race needs."""

DRAIN_SHARE = 0.15
"""The share of scenarios that open by draining the pool (see ``generate``)."""

DRAIN_MAX_BLOCKS = 4
"""The most blocks a draining opening takes; a larger pool gets none."""

HANDOFF_WAIT = 0.05
"""Seconds a peer of the shared opening waits for its reference before it goes on without."""

_WEIGHTS = {"acquire": 34, "release": 26, "share": 10, "verify": 10, "pause": 12, "cancel": 8}
_BATCH_WEIGHT = 12  # acquire_many's, drawn only for a pool that has it (other draws unchanged)
_RELEASE_MANY_WEIGHT = 10  # release_many's, likewise


@dataclass(frozen=True)
class Scenario:
    """One run's programs, one per worker (worker i is named ``b{i}``)."""

    programs: tuple[Program, ...]

    @property
    def workers(self) -> tuple[str, ...]:
        """The workers' names, as the history and the ledger know them."""
        return tuple(f"b{i}" for i in range(len(self.programs)))

    def describe(self) -> str:
        """One line per worker: ``b0: acquire(0.01) share(b1) release``."""
        return "\n".join(
            f"{worker}: " + " ".join(_step_text(step) for step in program)
            for worker, program in zip(self.workers, self.programs, strict=True)
        )

    @property
    def total_timeout(self) -> float:
        """Seconds every acquire would wait if each timed out, one after another: no run of the
        scenario needs longer, but for the pool's own lateness."""
        return sum(
            float(arg or 0)
            for program in self.programs
            for kind, arg in program
            if kind in ("acquire", "sleep", "wait")
        ) + sum(
            float(arg[1] or 0) for program in self.programs for kind, arg in program if kind == "acquire_many"
        )

    @property
    def longest_timeout(self) -> float:
        """The longest timeout any one acquire of the scenario is given (0 when none)."""
        return max(
            [float(arg or 0) for program in self.programs for kind, arg in program if kind == "acquire"]
            + [
                float(arg[1] or 0)
                for program in self.programs
                for kind, arg in program
                if kind == "acquire_many"
            ]
            + [0.0]
        )

    def to_json(self) -> list[list[list[Any]]]:
        """A JSON-ready form."""
        return [[[kind, arg] for kind, arg in program] for program in self.programs]

    @classmethod
    def from_json(cls, data: Any) -> Scenario:
        """The scenario ``to_json`` wrote; ValueError naming what is wrong otherwise."""
        if not isinstance(data, list) or not data:
            raise ValueError(f"scenario must be a non-empty list of programs, got {data!r:.80}")
        programs = []
        for number, program in enumerate(data):
            if not isinstance(program, list):
                raise ValueError(f"scenario program {number} must be a list of steps, got {program!r:.80}")
            steps = []
            for step in program:
                if not (isinstance(step, list) and len(step) == 2 and step[0] in STEP_KINDS and _fits(*step)):
                    raise ValueError(f"scenario program {number} has a bad step {step!r:.80}")
                steps.append((step[0], step[1]))
            programs.append(tuple(steps))
        return cls(tuple(programs))


def _is_seconds(value: object, *, none: bool = False) -> bool:
    if value is None:
        return none
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _fits(kind: str, arg: object) -> bool:
    """Whether ``arg`` is what a step of ``kind`` takes (a report's steps are read back)."""
    if kind == "acquire":
        return _is_seconds(arg, none=True)
    if kind in ("sleep", "wait"):
        return _is_seconds(arg)
    if kind in ("pause", "share", "cancel", "rerelease"):
        return isinstance(arg, int) and not isinstance(arg, bool) and arg >= 0
    if kind == "acquire_many":
        return (
            isinstance(arg, (list, tuple))
            and len(arg) == 2
            and isinstance(arg[0], int)
            and not isinstance(arg[0], bool)
            and arg[0] >= 1
            and _is_seconds(arg[1], none=True)
        )
    if kind == "release":
        return arg in (None, "oldest")
    return arg is None  # verify, release_many


def generate(
    rng: random.Random,
    *,
    workers: int,
    length: int,
    cancel: bool,
    blocks: int = 2,
    batch: bool = False,
    release_batch: bool = False,
) -> Scenario:
    """Draw ``workers`` programs of ``length`` steps each; ``cancel`` allows cancel steps (async);
    ``blocks`` is the pool's size; ``batch`` allows acquire_many steps and ``release_batch``
    release_many steps (a pool that has them).

    Mostly, every program starts with an acquire, so each worker holds something to share and
    release. One scenario in ``SHARED_SHARE`` starts from one block shared by all: worker 0
    acquires it and hands a reference to each other worker, each peer parked until its
    reference comes. Races on a refcount (a lost update, a zero test outside the lock) need two
    holders of one block releasing together, or a release racing a share, which random programs
    seldom line up. In half of these openings every holder then sleeps a little, and all
    release at the same instant; in the other half each peer releases as soon as it has its
    reference, racing worker 0's next share and its own release.

    One scenario in ``DRAIN_SHARE`` (for a pool of at most ``DRAIN_MAX_BLOCKS`` blocks) opens
    by draining the pool: worker 0 takes every block, sleeps a little, and gives them all back
    in a row, while the others either wait in acquire already or arrive at that same instant.
    Wake-up bugs need one or the other: several waiters and releases in a row (a release that
    notifies only when the queue was empty), or an acquirer that looks, finds nothing and is
    about to park while a block comes back (a check outside the lock the wait releases).
    """
    if type(workers) is not int or not 1 <= workers <= 16:
        raise ValueError(f"workers must be an int in [1, 16], got {workers!r}")
    if type(length) is not int or length < 1:
        raise ValueError(f"length must be an int >= 1, got {length!r}")
    kinds = [k for k in _WEIGHTS if cancel or k != "cancel"]
    weights = [_WEIGHTS[k] for k in kinds]
    if batch:
        kinds, weights = [*kinds, "acquire_many"], [*weights, _BATCH_WEIGHT]
    if release_batch:
        kinds, weights = [*kinds, "release_many"], [*weights, _RELEASE_MANY_WEIGHT]
    opening = rng.random()
    shared = workers > 1 and length >= 3 and opening < SHARED_SHARE
    together = rng.random() < 0.5
    drain = (
        workers > 1
        and 1 <= blocks <= DRAIN_MAX_BLOCKS
        and SHARED_SHARE <= opening < SHARED_SHARE + DRAIN_SHARE
    )
    programs = []
    for me in range(workers):
        steps: list[Step]
        if shared:
            steps = _shared_opening(rng, me, workers, together)
        elif drain:
            steps = _drain_opening(rng, me, blocks, together)
        else:
            steps = [("acquire", rng.choice(TIMEOUTS))]
        while len(steps) < length:
            steps.append(_draw(rng, rng.choices(kinds, weights)[0], me, workers, blocks))
        programs.append(tuple(steps))
    return Scenario(tuple(programs))


def draw(
    rng: random.Random,
    *,
    workers: int,
    length: int,
    cancel: bool,
    blocks: int = 2,
    batch: bool = False,
    release_batch: bool = False,
) -> Scenario:
    """``generate``, but one scenario in ``SMALL_SHARE`` has two workers of three steps (when
    ``workers`` and ``length`` are larger than that)."""
    if workers > 2 and length > 3 and rng.random() < SMALL_SHARE:
        workers, length = 2, 3
    return generate(
        rng,
        workers=workers,
        length=length,
        cancel=cancel,
        blocks=blocks,
        batch=batch,
        release_batch=release_batch,
    )


def _drain_opening(rng: random.Random, me: int, blocks: int, together: bool) -> list[Step]:
    settle: Step = ("sleep", HANDOFF_WAIT / 50)
    if me == 0:
        return [*[("acquire", 0.0)] * blocks, settle, *[("release", None)] * blocks]
    # Long enough to be waiting when the blocks come back; or arriving as they come back.
    acquire: Step = ("acquire", rng.choice(TIMEOUTS[2:]))
    return [settle, acquire] if together else [acquire]


def _shared_opening(rng: random.Random, me: int, workers: int, together: bool) -> list[Step]:
    shares: list[Step] = [("share", peer) for peer in range(1, workers)]
    settle: list[Step] = [("sleep", HANDOFF_WAIT / 50)] if together else []
    if me == 0:
        return [("acquire", 0.0), *shares, *settle, ("release", None)]
    return [("wait", HANDOFF_WAIT), *settle, ("release", None)]


def _draw(rng: random.Random, kind: str, me: int, workers: int, blocks: int) -> Step:
    if kind == "acquire":
        return ("acquire", rng.choice(TIMEOUTS))
    if kind == "acquire_many":
        return ("acquire_many", [_batch_size(rng, blocks), rng.choice(TIMEOUTS)])
    if kind in ("share", "cancel"):
        peers = [p for p in range(workers) if p != me] or [me]
        return (kind, rng.choice(peers))
    if kind == "pause":
        return ("pause", rng.randint(1, 3))
    return (kind, None)


SMALL_BATCH = 3
"""The largest batch drawn on every pool; on a larger one, half the batches are larger."""


def _batch_size(rng: random.Random, blocks: int) -> int:
    """How many blocks an ``acquire_many`` step asks for: 1 to ``SMALL_BATCH``; on a pool of
    more, half the time ``SMALL_BATCH + 1`` to all of it, as a long prompt's prefill takes most
    of a pool at once (a batch of more than half the pool, served a way of its own by a pool
    that would otherwise starve it, was out of reach on every larger pool: a blind tester's)."""
    if blocks <= SMALL_BATCH or rng.random() < 0.5:
        return rng.randint(1, max(1, min(blocks, SMALL_BATCH)))
    return rng.randint(SMALL_BATCH + 1, blocks)


def _step_text(step: Step) -> str:
    kind, arg = step
    if kind in ("share", "cancel"):
        return f"{kind}(b{arg})"
    if kind in ("acquire", "pause", "sleep", "wait"):
        return f"{kind}({_seconds(arg)})"
    if kind == "acquire_many":
        return f"acquire_many({arg[0]}, {_seconds(arg[1])})"
    if kind == "release" and arg == "oldest":
        return "release(oldest)"
    return kind


def _seconds(value: float | None) -> str:
    """A timeout as a step shows it: ``0.05``; ``None`` (no limit, a motif's waiter) as it is."""
    return "None" if value is None else f"{value:g}"
