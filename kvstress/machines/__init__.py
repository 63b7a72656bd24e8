"""Hypothesis state machines that drive any pool through the protocol."""

from kvstress.machines._machine import MachineOptions as MachineOptions
from kvstress.machines._machine import PoolMachine as PoolMachine
from kvstress.machines._machine import Ref as Ref
from kvstress.machines._machine import pool_machine as pool_machine
