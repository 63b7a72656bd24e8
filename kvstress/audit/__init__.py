"""Audit the code that uses a pool: a proxy with the pool's protocol that checks every call.

``kvstress.audit(pool)`` returns an ``AuditedPool`` (threaded pools) or an ``AsyncAuditedPool``
(pools whose ``acquire`` is a coroutine). Each call goes to the pool and is checked against the
audit's own ledger of leases (tenancies), as the harness checks its calls:

- ``dirty-read``: a block that comes out of acquire not all zero. When the block read as all
  zero as its last release returned, the message says it was written after that release (a
  use after release, the caller's bug); otherwise that the pool did not reset it.
- ``double-release``: a release through a handle whose lease has ended, refused before the pool
  sees it (so a stale handle never frees the block's next holder); also a pool that answers
  True twice in one tenancy.
- ``illegal-transition``: retain or mark_in_use through a stale handle (refused), or a retain
  that raced the release of the last reference.
- ``shared-block``: ``data`` read through a stale handle; acquire handing out a held block.
- ``lost-block``: blocks still held at ``close()`` (each with its holder and the stack of its
  acquire); a released lease whose releases never answered True.
- ``counter-mismatch``, ``queue-corruption``, ``refcount``: at quiet points (no call in flight
  through the audit), the pool's counter against the ledger, and periodically its queue.

A violation raises ``kvstress.InvariantViolation`` at the faulty call, with the history (the
last ``history`` operations) and the block table. The first one found is raised again by
``close()``, so a violation that an ``except Exception`` swallowed still fails the test. Once
closed (by ``close()`` or by leaving ``with``), every protocol call through the audit raises
ValueError naming the call: a call the audit no longer checks must not pass for an audited one.

Use after release, exactly. Writes are seen only through memory, so what is caught is:

- any use of ``block.data`` through a handle whose lease has ended (raised at that access);
- a write through a view of ``data`` kept past release (``view = block.data``, release, then
  ``view.fill_(...)``) that lands between the release and the block's next acquire, when the
  pool resets blocks on release (as the protocol asks): the memory is read when the last
  release returns and again when acquire next returns the block, and at ``close()``.

What is not caught: a write through a kept view after the block was acquired again (it lands
in the next holder's data; only that holder's own checks can see it); a write of zeros; a write
where the pool resets on acquire instead of on release (the reset erases it before the audit
looks); writes into memory the pool has given back (a tiered pool's shrunk segment: nobody
can read it any more); and calls made on the pool itself rather than through the audit.

The proxy's methods set ``__tracebackhide__``: under pytest a failing test's traceback ends at the
test's own call, not in the audit's source (``--full-trace`` shows it all).
"""

from kvstress.audit._async import AsyncAuditedPool as AsyncAuditedPool
from kvstress.audit._audit import audit as audit
from kvstress.audit._block import AuditedBlock as AuditedBlock
from kvstress.audit._threaded import AuditedPool as AuditedPool
