"""Concurrent scenarios under controlled schedules: generate, run, check, report, replay."""

from kvstress.scenarios._execution import ExecutionRecord as ExecutionRecord
from kvstress.scenarios._execution import ScenarioConfig as ScenarioConfig
from kvstress.scenarios._execution import run_execution as run_execution
from kvstress.scenarios._programs import Scenario as Scenario
from kvstress.scenarios._programs import generate as generate
from kvstress.scenarios._search import ScenarioFailure as ScenarioFailure
from kvstress.scenarios._search import SearchResult as SearchResult
from kvstress.scenarios._search import replay as replay
from kvstress.scenarios._search import search as search
from kvstress.scenarios._search import shrink_failure as shrink_failure
from kvstress.scenarios._stress import StressFailure as StressFailure
from kvstress.scenarios._stress import StressResult as StressResult
from kvstress.scenarios._stress import run_stress_execution as run_stress_execution
from kvstress.scenarios._stress import stress as stress
from kvstress.scenarios._table import interleaving_table as interleaving_table
