"""Failure reports: JSON records (schema ``kvstress.failure/1``) and their HTML pages."""

from kvstress.reports._report import REQUIRED as REQUIRED
from kvstress.reports._report import SCHEMA as SCHEMA
from kvstress.reports._report import ReportError as ReportError
from kvstress.reports._report import load_report as load_report
from kvstress.reports._report import replay_line as replay_line
from kvstress.reports._report import versions as versions
from kvstress.reports._report import write_html as write_html
from kvstress.reports._report import write_report as write_report
from kvstress.reports._sections import pool_size as pool_size
