"""A correct pool whose module takes seconds to import (a heavy dependency, an interpreter made
slow by ``-X tracemalloc``): loading is no part of the budget, and no hang."""

from __future__ import annotations

import time

from kvstress.mutants import CondvarPool

IMPORT_S = 4.0
time.sleep(IMPORT_S)


class SlowToImportPool(CondvarPool):
    """``CondvarPool`` itself: correct."""
