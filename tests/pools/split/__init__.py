"""Correct pools laid out as a package usually is: the pool in one module, its free list, its
block class and its deadline helper each in another (``freelist`` imports ``deadline``, two
steps from the pool). The harness must control the locks, conditions and clock reads of every
one of them, not only of the pool class's own module."""
