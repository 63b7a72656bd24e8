"""Fuzzing: spend a budget across strategies on a pool named MODULE:ATTR; report what fails."""

from kvstress.fuzz._replay import ReplayOutcome as ReplayOutcome
from kvstress.fuzz._replay import replay_report as replay_report
from kvstress.fuzz._run import DEFAULT_MIX as DEFAULT_MIX
from kvstress.fuzz._run import FuzzOutcome as FuzzOutcome
from kvstress.fuzz._run import Progress as Progress
from kvstress.fuzz._run import fuzz as fuzz
from kvstress.fuzz._run import parse_mix as parse_mix
from kvstress.fuzz._run import slice_seed as slice_seed
from kvstress.fuzz._slices import STRATEGIES as STRATEGIES
from kvstress.fuzz._slices import Finding as Finding
from kvstress.fuzz._target import FuzzTarget as FuzzTarget
from kvstress.fuzz._target import TargetError as TargetError
from kvstress.fuzz._target import load_target as load_target
