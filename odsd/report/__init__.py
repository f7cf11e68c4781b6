"""``odsd report``: plots and a short summary of a store's runs.

::

    from odsd.report import build_report
    result = build_report(Path("store"), Path("report"))   # report/summary.md + report/*.png
"""

from odsd.report.build import ReportResult, build_report
from odsd.report.data import ReportData, RunData, SegmentStats, load_report_data

__all__ = ["ReportData", "ReportResult", "RunData", "SegmentStats", "build_report", "load_report_data"]
