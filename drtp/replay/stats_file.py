"""The name and columns of a run's ``stats_history.csv``: one definition for its writer and its readers.

The master writes the file as a run goes (drtp.master.stats_history, where each
column's meaning is told); the pandas view of a run reads it back
(drtp.analysis.run_stats).
"""

from __future__ import annotations

STATS_FILE = "stats_history.csv"
DEFAULT_INTERVAL_S = 1.0  # the width of an interval, in seconds of the run, unless the run sets another
STATS_COLUMNS: tuple[str, ...] = ("elapsed_s", "requests", "failures", "bytes", "rate_per_s", "p50_ms", "p99_ms")
