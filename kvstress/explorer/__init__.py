"""Explored tests: a test function run under many controlled schedules, each replayable.

``explore`` runs one outside pytest; the pytest plugin's ``kvstress_explore`` marker and
``--kvstress-replay`` option run a test the same way. This module only re-exports.
"""

from kvstress.explorer._explore import Explored as Explored
from kvstress.explorer._explore import explore as explore
