"""The verification harness: drive a pool through the protocol, record, check, dump."""

from kvstress._violation import INVARIANTS as INVARIANTS
from kvstress._violation import BlockRecord as BlockRecord
from kvstress._violation import InvariantViolation as InvariantViolation
from kvstress._violation import Operation as Operation
from kvstress.harness._driver import PoolDriver as PoolDriver
from kvstress.harness._driver import PoolSetupError as PoolSetupError
