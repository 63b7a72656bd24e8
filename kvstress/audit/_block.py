"""The handle an audited pool gives out: the pool's own handle, bound to one lease."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvstress.audit._ledger import Lease

if TYPE_CHECKING:
    from kvstress.audit._core import AuditCore


class AuditedBlock:
    """A block as its holder sees it through the audit: ``id``, ``data``, ``state``, ``refcount``.

    It belongs to one lease (tenancy): every reference to it, the acquire's and each retain's,
    shares this handle, and once the last is released the handle is stale. ``data`` through a
    stale handle raises InvariantViolation (a use after release); ``state`` and ``refcount``
    stay live views of the block, as the pool's own handle gives them.
    """

    __slots__ = ("_audit", "_lease", "id")

    def __init__(self, audit: AuditCore, lease: Lease) -> None:
        self._audit = audit
        self._lease = lease
        self.id = lease.block_id

    @property
    def data(self) -> Any:
        """This block's memory (the pool's view), while the lease holds a reference."""
        lease = self._lease
        if lease.refs <= 0:
            self._audit.stale_data(lease)
        return lease.inner.data

    @property
    def state(self) -> Any:
        """The block's state now, read through the pool's handle."""
        return self._lease.inner.state

    @property
    def refcount(self) -> Any:
        """The block's reference count now, read through the pool's handle."""
        return self._lease.inner.refcount

    @property
    def generation(self) -> int:
        """Which tenancy of the block this handle belongs to (1 for the first)."""
        return self._lease.number

    @property
    def inner(self) -> Any:
        """The pool's own handle (for reading only: calls made through it are not audited)."""
        return self._lease.inner

    def __repr__(self) -> str:
        lease = self._lease
        status = "stale" if lease.refs <= 0 else f"{lease.refs} ref(s)"
        return f"<AuditedBlock {lease.block_id} tenancy {lease.number}, {status}: {lease.inner!r}>"
