"""Concurrent scenarios under controlled schedules: generate, run, check, report, replay."""

from kvstress.scenarios._execution import ExecutionRecord as ExecutionRecord
from kvstress.scenarios._execution import ScenarioConfig as ScenarioConfig
from kvstress.scenarios._execution import run_execution as run_execution
from kvstress.scenarios._programs import Scenario as Scenario
from kvstress.scenarios._programs import generate as generate
