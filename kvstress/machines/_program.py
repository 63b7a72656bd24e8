"""The state machine's own record of what it ran, as a program to paste, and flaky failures.

Hypothesis prints the failing program only when its final replay fails again. A race on real
threads may not recur there: Hypothesis then raises ``FlakyFailure`` with the exceptions it saw
and no program at all. So the machine records its own steps (``recorded``) in Hypothesis's
format (``blocks_0 = state.acquire(holder='h0', timeout=0)``), a violation carries the program
up to its failing step, and ``run_pool_machine`` turns a flaky failure into an
``InvariantViolation`` holding that program and how often it fails when run again.
"""

from __future__ import annotations

import functools
import re
import unittest
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import settings as Settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from kvstress._violation import InvariantViolation

RERUNS = 10
"""Times a flaky failure's program is run again to measure how often it fails."""

F = TypeVar("F", bound=Callable[..., Any])


class ProgramRecorder:
    """The steps of one example as program lines; a value a rule returns gets a bundle name."""

    def __init__(self, machine_name: str) -> None:
        self.lines = [f"state = {machine_name}()"]
        self._names: dict[int, str] = {}
        self._counts: dict[str, int] = {}
        self._kept: list[object] = []  # keeps named values alive, so their ids stay theirs
        self.cut: int | None = None  # lines up to the failing step, once a step failed

    def step(self, name: str, kwargs: dict[str, Any], target: str | None, result: object) -> None:
        """Record ``state.<name>(**kwargs)``, assigned to a fresh ``<target>_<n>`` if given."""
        args = ", ".join(f"{key}={self._names.get(id(value), repr(value))}" for key, value in kwargs.items())
        assign = ""
        if target is not None:
            number = self._counts.get(target, 0)
            self._counts[target] = number + 1
            assign = f"{target}_{number} = "
            self._names[id(result)] = f"{target}_{number}"
            self._kept.append(result)
        self.lines.append(f"{assign}state.{name}({args})")

    def failed(self) -> None:
        """The step just recorded found the violation: the program ends there."""
        if self.cut is None:
            self.cut = len(self.lines)

    def program(self) -> str:
        """The program to paste: the steps up to the failing one, then ``state.teardown()``."""
        return "\n".join([*self.lines[: self.cut], "state.teardown()"])


def recorded(target: str | None = None) -> Callable[[F], F]:
    """Record each call of the decorated rule (or invariant) in ``self.recorder``."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(self: Any, **kwargs: Any) -> Any:
            before = self.violation
            result = function(self, **kwargs)
            self.recorder.step(function.__name__, kwargs, target, result)
            if before is None and self.violation is not None:
                self.recorder.failed()
            return result

        return wrapper  # type: ignore[return-value]

    return decorate


def run_pool_machine(machine: type[Any], settings: Settings) -> None:
    """``run_state_machine_as_test``, with a flaky failure raised as the violation it was.

    Raises ``InvariantViolation`` whose message ends with the program and "it failed in k of
    10 re-runs of this program" when Hypothesis saw a violation that its replay did not repeat.
    Any other ``Flaky`` (data generation that depends on the pool, say) goes through as it is.
    """
    try:
        run_state_machine_as_test(machine, settings=settings)
    except Flaky as flaky:
        violation = _violation_in(flaky)
        program = getattr(violation, "program", None)
        if violation is None or not isinstance(program, str):
            raise
        hits = sum(_fails_again(machine, program, violation.invariant) for _ in range(RERUNS))
        raise InvariantViolation(
            violation.invariant,
            f"{violation.message}\nThis failure is nondeterministic (Hypothesis could not repeat it): "
            f"it failed in {hits} of {RERUNS} re-runs of this program:\n{program}",
            history=violation.history,
            blocks=violation.blocks,
        ) from flaky


def _violation_in(error: BaseException) -> InvariantViolation | None:
    if isinstance(error, InvariantViolation):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _violation_in(inner)
            if found is not None:
                return found
    return None


def _fails_again(machine: type[Any], program: str, invariant: str) -> bool:
    """Run ``program`` (text this module wrote) once; True if it fails with ``invariant``."""
    return _failure_of(machine, program, invariant) is not None


def _failure_of(machine: type[Any], program: str, invariant: str) -> InvariantViolation | None:
    """Run ``program`` (text this module wrote) once: its violation, if it is of ``invariant``."""
    try:
        exec(program, {machine.__name__: machine})  # our own program text, not input
    except InvariantViolation as violation:
        return violation if violation.invariant == invariant else None
    return None


def shortened(
    machine: type[Any], violation: InvariantViolation, budget_s: float, clock: Callable[[], float]
) -> InvariantViolation:
    """``violation`` with its program cut to fewer steps where a shorter one fails the same way.

    Hypothesis shrinks by the draws, replaying every candidate example; on a machine whose
    steps start real threads (``concurrent_batch``) it had shrunk a three-step sequential bug
    (acquire, share, release) to 24-52 steps when its time was up (a blind user's LMCache
    rebuild). Here the steps themselves are dropped, chunks first, halving (ddmin's first
    half), each with the later steps that use a value it made: a candidate is kept when it
    fails with the same invariant twice running, so a race that fails now and then is not
    traded for a shorter program that seldom does. Within ``budget_s`` of ``clock``; the
    violation returned is the shortest program's own run, cut at its failing step."""
    parsed = _steps_of(violation)
    if parsed is None or not parsed[1]:
        return violation
    (head, steps), best = parsed, violation
    until = clock() + budget_s
    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and clock() < until:
        at = 0
        while at < len(steps) and clock() < until:
            candidate = _without(steps, at, chunk)
            found = _fails_twice(machine, [head, *candidate, "state.teardown()"], violation.invariant)
            cut = _steps_of(found) if found is not None else None
            if found is not None and cut is not None and len(cut[1]) < len(steps):
                steps, best = cut[1], found
                chunk = min(chunk, max(1, len(steps) // 2))
            else:
                at += chunk
        chunk //= 2
    return best


def _steps_of(violation: InvariantViolation) -> tuple[str, list[str]] | None:
    """(the ``state = ...`` line, the steps) of the violation's program, up to its failing step."""
    program = getattr(violation, "program", None)
    lines = program.splitlines() if isinstance(program, str) else []
    if len(lines) < 2 or lines[-1] != "state.teardown()":
        return None
    return lines[0], lines[1:-1]


_NAMED = re.compile(r"^(\w+) = state\.")


def _without(steps: list[str], at: int, count: int) -> list[str]:
    """``steps`` less ``count`` of them from ``at``, and less every later step that uses a value
    a dropped step made (``blocks_0 = ...``, then ``state.share(ref=blocks_0)``)."""
    dropped: set[str] = set()
    kept: list[str] = []
    for index, step in enumerate(steps):
        named = _NAMED.match(step)
        uses = set(re.findall(r"\b\w+_\d+\b", step.split(" = ", 1)[-1]))
        if at <= index < at + count or uses & dropped:
            if named:
                dropped.add(named.group(1))
            continue
        kept.append(step)
    return kept


def _fails_twice(machine: type[Any], lines: list[str], invariant: str) -> InvariantViolation | None:
    """The violation of the second of two runs of the program, if both fail with ``invariant``."""
    program = "\n".join(lines)
    try:
        if _failure_of(machine, program, invariant) is None:
            return None
        return _failure_of(machine, program, invariant)
    except Exception:  # a step whose value a dropped step made (NameError), and the like
        return None


class MachineTestCase:
    """``Machine.TestCase``: a ``unittest.TestCase`` that runs the machine with ``run_pool_machine``.

    One class per machine class, made on first use and kept, so that ``Machine.TestCase.settings
    = ...`` sticks, as with Hypothesis's own ``TestCase``.
    """

    def __get__(self, obj: object, owner: type[Any] | None = None) -> type[unittest.TestCase]:
        machine: type[Any] | None = type(obj) if obj is not None else owner
        assert machine is not None
        made = machine.__dict__.get("_kvstress_test_case")
        if made is None:
            made = _test_case_for(machine)
            setattr(machine, "_kvstress_test_case", made)  # noqa: B010 (not an attribute mypy knows)
        return made


def _test_case_for(machine: type[Any]) -> type[unittest.TestCase]:
    class TestCase(unittest.TestCase):
        settings = Settings()

        def runTest(self) -> None:
            run_pool_machine(machine, type(self).settings)

    TestCase.__name__ = TestCase.__qualname__ = f"{machine.__name__}.TestCase"
    return TestCase
