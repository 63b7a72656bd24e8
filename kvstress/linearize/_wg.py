"""Wing & Gong's search with Lowe's memoization, over one block's operations or the whole pool's.

The history is a doubly linked list of call and return events in time order. The search walks
it: at a call it tries to linearize that operation now (apply it to the model, then lift its call
and return out of the list); at a return it has met an operation that had to be linearized
already, so it backtracks and tries the next candidate. A set of (linearized operations, state)
configurations already explored keeps it from exploring one twice, which is what makes it
practical (Lowe; Porcupine does the same).
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from kvstress.linearize._model import FREE, OPEN, BlockOp, step

S = TypeVar("S", bound=Hashable)
T = TypeVar("T")

_END = -1
_TICKS = 1023  # look at the clock once per this many steps: time.monotonic() is not free
_LOOK_BACK = 200  # cuts tried when shrinking a witness: each one re-runs a search


class TimeUp(Exception):
    """The deadline passed before the search could decide."""


class _Events:
    """The call and return events of operations in time order, as a doubly linked list from which
    a linearized operation's two events are lifted (and put back on backtracking)."""

    def __init__(self, spans: Sequence[tuple[int, int]], members: Sequence[int]) -> None:
        # At one position calls sort first, so operations that share an instant are concurrent.
        calls = [(spans[i][0], 0, i) for i in members]
        events = sorted(calls + [(spans[i][1], 1, i) for i in members])
        count = len(events)
        self.head = count  # the sentinel; nxt[head] is the first event left
        self.nxt = [*range(1, count), _END, 0]
        self.prv = [self.head, *range(count - 1), _END]
        self.op = [i for _, _, i in events]
        self.is_call = [kind == 0 for _, kind, _ in events]
        self.partner = [0] * count  # a call's return event
        call_of: dict[int, int] = {}
        for event, i in enumerate(self.op):
            if i in call_of:
                self.partner[call_of[i]] = event
            call_of[i] = event

    def lift(self, call: int) -> None:
        nxt, prv = self.nxt, self.prv
        for e in (call, self.partner[call]):
            nxt[prv[e]] = nxt[e]
            if nxt[e] != _END:
                prv[nxt[e]] = prv[e]

    def unlift(self, call: int) -> None:
        nxt, prv = self.nxt, self.prv
        for e in (self.partner[call], call):
            nxt[prv[e]] = e
            if nxt[e] != _END:
                prv[nxt[e]] = e


def linearize(ops: Sequence[BlockOp], deadline: float) -> tuple[tuple[int, int], ...] | None:
    """A legal order of one block's ``ops`` that respects real time, as (position in ``ops``,
    refcount after it) pairs, or None when there is none. Starts from a FREE block."""
    kinds = [int(op.kind) for op in ops]
    return search([(op.lo, op.hi) for op in ops], lambda i, rc: step(kinds[i], rc), FREE, kinds, deadline)


def search(
    spans: Sequence[tuple[int, int]],
    moves: Callable[[int, S], tuple[S, ...]],
    initial: S,
    classes: Sequence[int],
    deadline: float,
) -> tuple[tuple[int, S], ...] | None:
    """Wing & Gong with memoization over operations taking effect in positions ``spans[i]``.

    ``moves(i, state)`` gives the states operation i may leave (() when it cannot run). Open
    operations (``hi == OPEN``) may also never happen; those of one ``classes[i]`` must be
    interchangeable. Returns a legal order as (operation, state after) pairs, or None. Raises
    ``TimeUp`` once ``time.monotonic()`` passes ``deadline``.
    """
    is_open = [hi >= OPEN for _, hi in spans]
    events = _Events(spans, [i for i in range(len(spans)) if not is_open[i]])
    tokens = _Tokens(spans, [i for i in range(len(spans)) if is_open[i]], classes)
    nxt, op_of, is_call = events.nxt, events.op, events.is_call
    due = len(spans) - sum(is_open)  # operations not yet linearized that must be
    linearized, state, choice, first, ticks = 0, initial, 0, 0, 0
    explored: set[tuple[int, S]] = set()
    stack: list[tuple[int, S, int, int]] = []  # (event, state before, choice, token class or -1)
    event = nxt[events.head]
    while due:
        ticks += 1
        if ticks & _TICKS == 0 and time.monotonic() > deadline:
            raise TimeUp
        if is_call[event]:
            op, cls = op_of[event], -1
            outcomes = moves(op, state)
        else:  # a dead end, unless an open operation that has begun can help first
            op, cls, outcomes = tokens.next_helpful(first, spans[op_of[event]][1], state, moves)
            if cls < 0:
                if not stack:
                    return None
                event, state, choice, cls = stack.pop()
                if cls < 0:
                    linearized ^= 1 << op_of[event]
                    due += 1
                    events.unlift(event)
                else:
                    linearized ^= 1 << tokens.give_back(cls)
                    first = cls
                choice += 1  # retry the same candidate with its next possible outcome
                continue
        grown = linearized | (1 << op)
        for k in range(choice, len(outcomes)):
            if (grown, outcomes[k]) not in explored:
                explored.add((grown, outcomes[k]))
                stack.append((event, state, k, cls))
                linearized, state = grown, outcomes[k]
                if cls < 0:
                    due -= 1
                    events.lift(event)
                else:
                    tokens.take(cls)
                event, first = nxt[events.head], 0
                break
        else:
            if cls < 0:
                event, first = nxt[event], 0
            else:
                first = cls + 1  # nothing new from this class here: try the next one
        choice = 0
    after = [before for _, before, _, _ in stack[1:]] + [state] if stack else []
    return tuple((op, s) for op, s in zip(tokens.order(stack, op_of), after, strict=True))


class _Tokens:
    """Open operations, per class, as tokens handed out earliest start first.

    An open operation that changes nothing is the same as one that never happens, so one is
    only ever linearized for an effect, and only where the search would otherwise have to
    backtrack; the search ends as soon as every other operation is linearized. Operations of
    one class are interchangeable once begun, so only the earliest unused one is ever tried.
    """

    def __init__(
        self, spans: Sequence[tuple[int, int]], members: Sequence[int], classes: Sequence[int]
    ) -> None:
        by_class: dict[int, list[int]] = {}
        for i in sorted(members, key=lambda i: (spans[i][0], i)):
            by_class.setdefault(classes[i], []).append(i)
        self.ops = list(by_class.values())
        self.starts = [[spans[i][0] for i in ops] for ops in self.ops]
        self.used = [0] * len(self.ops)

    def next_helpful(
        self, first: int, until: int, state: S, moves: Callable[[int, S], tuple[S, ...]]
    ) -> tuple[int, int, tuple[S, ...]]:
        """From class ``first`` on, the first class with an unused operation begun by position
        ``until`` that changes ``state``: (operation, class, outcomes), or (-1, -1, ())."""
        for cls in range(first, len(self.ops)):
            used = self.used[cls]
            if used < bisect_right(self.starts[cls], until):
                op = self.ops[cls][used]
                outcomes = tuple(o for o in moves(op, state) if o != state)
                if outcomes:
                    return op, cls, outcomes
        return -1, -1, ()

    def take(self, cls: int) -> None:
        self.used[cls] += 1

    def give_back(self, cls: int) -> int:
        """Return the last token taken from ``cls``; its operation."""
        self.used[cls] -= 1
        return self.ops[cls][self.used[cls]]

    def order(self, stack: Sequence[tuple[int, Any, int, int]], op_of: Sequence[int]) -> list[int]:
        """The operations of a finished search's stack, in order."""
        handed = [0] * len(self.ops)
        out = []
        for event, _, _, cls in stack:
            if cls < 0:
                out.append(op_of[event])
            else:
                out.append(self.ops[cls][handed[cls]])
                handed[cls] += 1
        return out


def shrink_failing(
    items: Sequence[T],
    span: Callable[[T], tuple[int, int]],
    solve: Callable[[Sequence[T]], tuple[tuple[int, S], ...] | None],
    initial: S,
) -> tuple[T, ...]:
    """A small sub-list of ``items`` (in start order) that ``solve`` still finds no order for.

    First the shortest failing prefix: its last item is the *culprit*. Then the history before
    the latest clean cut (nothing in flight across it, the state back to ``initial``) is
    dropped, keeping at least one item before the culprit to show the state it contradicts.
    Then single items go while the rest still fails and still needs its culprit. Every step is
    re-checked, so whatever is returned, even when time runs out, fails.
    """
    ops = list(items)

    def fails(sub: Sequence[T]) -> bool:
        return solve(sub) is None

    try:
        passes, fails_at = 0, len(ops)  # ops[:passes] passes, ops[:fails_at] fails
        while passes + 1 < fails_at:
            mid = (passes + fails_at) // 2
            passes, fails_at = (passes, mid) if fails(ops[:mid]) else (mid, fails_at)
        ops = ops[:fails_at]
        cuts = _clean_cuts([span(op) for op in ops], solve(ops[:-1]) or (), initial)
        start = next((j for j in cuts[-_LOOK_BACK:][::-1] if j <= len(ops) - 2 and fails(ops[j:])), 0)
        ops = ops[start:]
        if len(ops) <= 64:
            for op in ops[-2::-1]:
                rest = [o for o in ops if o is not op]
                if fails(rest) and not fails(rest[:-1]):
                    ops = rest
    except TimeUp:
        pass
    return tuple(ops)


def _clean_cuts(spans: Sequence[tuple[int, int]], order: Sequence[tuple[int, S]], initial: S) -> list[int]:
    """The cuts j, ascending, where every item before j ends before any from j starts and the
    state is back to ``initial`` after them in ``order`` (a legal order of all but the last
    item: across such a cut, real time puts the items before it first). A heuristic for
    readable witnesses only: what is cut away is re-checked."""
    ends_before = [-1]
    for lo, hi in spans:  # an open item may as well never happen: it holds no cut open
        ends_before.append(max(ends_before[-1], lo if hi >= OPEN else hi))
    starts_from = [OPEN] * (len(spans) + 1)
    for j in range(len(spans) - 1, -1, -1):
        starts_from[j] = min(starts_from[j + 1], spans[j][0])
    placed = sorted(i for i, _ in order)
    cuts = [0]
    for j in range(1, len(spans)):
        before = bisect_left(placed, j)  # how many of the order's items come before the cut
        state = order[before - 1][1] if before else initial
        if ends_before[j] < starts_from[j] and state == initial:
            cuts.append(j)
    return cuts


def slack(order: Sequence[BlockOp]) -> list[tuple[int, int]]:
    """For each operation of a legal order: (the latest start of those before it, the earliest
    end of those after it). It can sit anywhere between these (and within its own span) while
    the others make way, and any operation that fits there can stand in for it."""
    before, latest = [], -1
    for op in order:
        before.append(latest)
        latest = max(latest, op.lo)
    after, earliest = [], OPEN
    for op in reversed(order):
        after.append(earliest)
        earliest = min(earliest, op.hi)
    after.reverse()
    return list(zip(before, after, strict=True))
