"""Benchmarks: what the pool buys, measured against a fresh tensor per request on a serving-like load."""

from kvstress.bench._config import FreshAlloc as FreshAlloc
from kvstress.bench._config import OverloadPolicy as OverloadPolicy
from kvstress.bench._config import WorkloadConfig as WorkloadConfig
from kvstress.bench._load import LoadSpec as LoadSpec
from kvstress.bench._load import Phase as Phase
from kvstress.bench._load import Request as Request
from kvstress.bench._load import request_stream as request_stream
from kvstress.bench._measure import CudaMemory as CudaMemory
from kvstress.bench._measure import GcSummary as GcSummary
from kvstress.bench._measure import Measurements as Measurements
from kvstress.bench._plot import latency_svg as latency_svg
from kvstress.bench._report import SCHEMA as SCHEMA
from kvstress.bench._report import Latency as Latency
from kvstress.bench._report import PathReport as PathReport
from kvstress.bench._report import PoolEnd as PoolEnd
from kvstress.bench._report import WorkloadReport as WorkloadReport
from kvstress.bench._result import Outcome as Outcome
from kvstress.bench._result import RequestResult as RequestResult
from kvstress.bench._run import run_workload as run_workload
from kvstress.bench._setup import WorkloadSetup as WorkloadSetup
from kvstress.bench._table import workload_table as workload_table
