"""Lines that need no scheduling point: they touch nothing another thread can see.

A scheduling point before a line lets other threads run before it. Where the line only moves
values between the frame's own locals and constants, the other threads' steps commute with it:
a switch before it and a switch after it (at the next line's point) give the same execution.
Dropping such points loses no interleaving, and every point dropped is one decision fewer for
the delay-bounded search to try a delay at, and one hand-off fewer a run.

By opcode, so by what the line does, not what its names mean: a line that tests a local's
truth (``if free:``), compares, indexes or calls may read a shared object through a local
alias, and keeps its point. A backward jump keeps a point somewhere in every loop: a line
that jumps back is quiet only when the line it jumps to is not, so a loop of quiet lines
cannot spin past the controller.

A ``return`` line keeps its point: what the caller does with the value before its own next
line (``self.n = self._count()`` stores it) may be seen by others.
"""

from __future__ import annotations

import dis
from types import CodeType

_LOCAL_OPS = frozenset(
    {
        "NOP", "RESUME", "CACHE", "EXTENDED_ARG", "POP_TOP", "COPY", "SWAP", "PUSH_NULL",
        "LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST",
        "STORE_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST", "DELETE_FAST", "IS_OP",
        "BUILD_TUPLE", "JUMP_FORWARD",
        "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_IF_NONE",
        "POP_JUMP_IF_NOT_NONE",
    }
)  # fmt: skip
"""Ops that read and write only the frame's locals, constants and its value stack (``is``
compares identities: no object's contents are read)."""
_BACKWARD = frozenset(
    {
        "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "POP_JUMP_BACKWARD_IF_NONE",
        "POP_JUMP_BACKWARD_IF_NOT_NONE",
    }
)  # fmt: skip
_cache: dict[CodeType, frozenset[int]] = {}


def quiet_lines(code: CodeType) -> frozenset[int]:
    """The lines of ``code`` that need no scheduling point (see the module's docstring)."""
    found = _cache.get(code)
    if found is None:
        found = _cache[code] = _find_quiet(code)
    return found


def _find_quiet(code: CodeType) -> frozenset[int]:
    lines: dict[int, list[dis.Instruction]] = {}
    line_at: dict[int, int] = {}
    line = code.co_firstlineno
    for instruction in dis.get_instructions(code):
        # An instruction of no line (an implicit return) runs with the line before it.
        if instruction.positions is not None and instruction.positions.lineno is not None:
            line = instruction.positions.lineno
        lines.setdefault(line, []).append(instruction)
        line_at[instruction.offset] = line
    allowed = _LOCAL_OPS | _BACKWARD
    local = {line for line, ops in lines.items() if all(op.opname in allowed for op in ops)}
    # A loop's jump back is quiet only where it lands on a line with a point.
    return frozenset(
        line
        for line in local
        if not any(op.opname in _BACKWARD and line_at.get(op.argval) in local for op in lines[line])
    )
