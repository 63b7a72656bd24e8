"""Linearizability checking of block-pool histories (Wing & Gong, partitioned per block)."""

from kvstress.linearize._check import LinearizabilityResult as LinearizabilityResult
from kvstress.linearize._check import check_history as check_history
