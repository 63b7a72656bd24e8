"""Block memory through the audit's eyes: zero at acquire, and unchanged since a release.

What can be told apart, and what cannot, is set out in ``kvstress.audit``'s docstring.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from kvstress.audit._ledger import Lease
from kvstress.audit._report import holders

_ZEROS: dict[int, bytes] = {}  # all-zero bytes of each block size met, to compare against
# A ctypes array over each (address, size) met: ``.raw`` copies the memory out in one C call,
# several times cheaper than ``ctypes.string_at`` (a foreign-function call) on small blocks.
# The array owns nothing: it is only read while a View holds the tensor that owns the memory.
_ARRAYS: dict[tuple[int, int], Any] = {}
_ARRAYS_MAX = 1 << 16  # a tiered pool moves its memory: forget old addresses past this many
_SPAN_TYPES: dict[type, bool] = {}  # whether a handle class has ``host_span``, per class met


# A block's memory as the audit reads it: the tensor (kept, so the memory stays allocated), or
# for a handle with a ``host_span`` the handle (our pools' holds the pool's memory; its ``data``
# is made only when torch must decide); for a contiguous host block a ctypes array over its bytes
# and as many zero bytes; (tensor, None, b"") for any other block, which torch reads.
View = tuple[Any, Any, bytes]


def view_of(inner: Any) -> View | None:
    """The block's memory through the pool's handle; None when it cannot be read (a tiered
    pool's segment given back: nobody can read it, so nobody can write it either)."""
    span = _host_span(inner)  # a fixed host address: no tensor view to make (1 us a call)
    if span is not None:
        array = _ARRAYS.get(span)
        zeros = _ZEROS.get(span[1])
        if array is None or zeros is None:
            array, zeros = _host_bytes(*span)
        return inner, array, zeros
    try:
        data = inner.data
    except Exception:
        return None
    if not isinstance(data, torch.Tensor):
        return None
    try:
        if data.is_cpu and data.is_contiguous():
            key = (data.data_ptr(), data.nbytes)
            array = _ARRAYS.get(key)
            zeros = _ZEROS.get(key[1])
            if array is None or zeros is None:  # first time at this address: made once
                array, zeros = _host_bytes(*key)
            return data, array, zeros
    except Exception:  # a tensor without host memory to point at: torch reads it
        pass
    return data, None, b""


def _host_span(inner: Any) -> tuple[int, int] | None:
    """(address, bytes) of the block where its handle's class says its memory is host memory at
    a fixed address (a ``host_span`` property, as our pools' ``Block`` has); None otherwise."""
    kind = type(inner)
    spans = _SPAN_TYPES.get(kind)
    if spans is None:
        spans = _SPAN_TYPES[kind] = getattr(kind, "host_span", None) is not None
    if not spans:
        return None
    try:
        span = inner.host_span
    except Exception:
        return None
    # Spelled out, not all(...) over a generator: this runs at every audited acquire.
    if type(span) is tuple and len(span) == 2:
        address, size = span
        if type(address) is int and type(size) is int and address > 0 and size > 0:
            return span
    return None


def _host_bytes(address: int, size: int) -> tuple[Any, bytes]:
    """The array over ``size`` bytes at ``address`` and ``size`` zero bytes, made once each."""
    key = (address, size)
    array = _ARRAYS.get(key)
    if array is None:
        if len(_ARRAYS) >= _ARRAYS_MAX:
            _ARRAYS.clear()
        array = _ARRAYS.setdefault(key, (ctypes.c_char * size).from_address(address))
    zeros = _ZEROS.get(size)
    if zeros is None:
        zeros = _ZEROS.setdefault(size, bytes(size))
    return array, zeros


def is_zero(view: View | None) -> bool | None:
    """Whether every element reads as zero; None when there is no memory to read.

    A contiguous host block is compared byte for byte with zeros (a copy and a memcmp: a few
    times cheaper than a torch reduction on small blocks); all-zero bytes are zero in every
    dtype. Anything else, or bytes that are not all zero (a -0.0 is zero, and not zero bytes),
    is decided by torch. The view holds the tensor, so the address stays valid.
    """
    if view is None:
        return None
    data, array, zeros = view
    if array is not None and array.raw == zeros:
        return True
    try:
        if not isinstance(data, torch.Tensor):
            data = data.data  # a handle with a ``host_span`` (``view_of``)
        return not bool(data.any())
    except Exception:  # memory that cannot be read here (a meta tensor): no finding from it
        return None


def nonzero_detail(inner: Any) -> str:
    """``3 of 8 elements not zero (first at flat index 2: 7.0)``."""
    try:
        # one snapshot: a thread still zeroing the block must not change it between the count
        # and the value quoted ("8 of 8 not zero (first ...: 0.0)")
        flat = inner.data.detach().reshape(-1).clone()
        where = (flat != 0).nonzero()
        first = int(where[0, 0])
        count, value = where.shape[0], flat[first].item()
        return f"{count} of {flat.numel()} elements not zero (first at flat index {first}: {value!r})"
    except Exception as error:  # the memory changed under us: still not zero, say so plainly
        return f"elements not zero ({type(error).__name__} while counting them)"


def dirty_read(inner: Any, holder: str, previous: Lease | None) -> tuple[str, str]:
    """The violation for a block that came out of acquire not all zero, with whose fault it is."""
    block = f"block {inner.id}"
    detail = nonzero_detail(inner)
    if previous is not None and previous.zero_at_release is True:
        return (
            "dirty-read",
            f"{block} came out of {holder}'s acquire with {detail}, but it read as all zeros when "
            f"{previous.ended_by} released its last reference (tenancy {previous.number}, operation "
            f"{previous.ended_op}): it was written after its release, {_kept_view(previous)}",
        )
    released = "" if previous is None else f" (last released by {previous.ended_by})"
    return (
        "dirty-read",
        f"{block} came out of {holder}'s acquire with {detail}{released}: the pool did not reset "
        "it, or a holder wrote into it after releasing it where the audit could not time the write",
    )


def released_block_changed(lease: Lease) -> str | None:
    """At close: a block whose memory was all zero when its last reference was released, and
    which nobody acquired since, must still be all zero. The message when it is not."""
    if lease.zero_at_release is not True or is_zero(view_of(lease.inner)) is not False:
        return None
    return (
        f"block {lease.block_id} read as all zeros when {lease.ended_by} released its last reference "
        f"(tenancy {lease.number}, operation {lease.ended_op}), and now holds "
        f"{nonzero_detail(lease.inner)}: it was written after its release, {_kept_view(lease)}"
    )


def _kept_view(lease: Lease) -> str:
    """Who may have written a block after ``lease`` (its last tenancy) ended: the write comes
    later than any call of the audit's, so it cannot be tied to one holder; a view kept from
    an earlier tenancy writes as well as one from the last."""
    last = _one_of(holders(lease))
    return (
        "through a view of its memory some holder kept past a release: one of its last tenancy's "
        f"({last}) or of an earlier one; the write itself is not seen, so the audit cannot say "
        "whose (a caller bug: use after release)"
    )


def _one_of(names: tuple[str, ...] | list[str]) -> str:
    """``Task-3``, or ``one of Task-3, Task-4``: who may have written, without a lone "one of"."""
    unique = list(dict.fromkeys(names))  # a holder that also retained is named once
    return unique[0] if len(unique) == 1 else f"one of {', '.join(unique)}"
