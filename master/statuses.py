"""A run's failed trace requests per HTTP status (``failed_statuses``), for ``throttled`` objectives and the ramp.

summary.json carries ``failed_statuses`` (overall, per method and kind, per
node) where the results model counts them; a summary without them (written by
an older drtp) gets them here from the run's own ``requests.csv``, by the
definition the model uses: trace requests that failed with an HTTP answer,
keyed by its status as text.  Failures without an answer (timeouts, resets)
have no status and are not among them.
"""

from __future__ import annotations

from pathlib import Path

KEY = "failed_statuses"


def with_failed_statuses(summary: dict, run_dir: Path) -> tuple[dict, str]:
    """``summary`` with ``failed_statuses`` at every level, and where they came from (``summary.json`` or
    ``requests.csv``); the summary is returned as is when it has them."""
    if KEY in summary:
        return summary, "summary.json"
    from drtp.analysis.results import load_requests

    df = load_requests(Path(run_dir) / "requests.csv")
    failed = df[~df["auxiliary"] & (df["outcome"] != "ok") & (df["status"] > 0)]
    out = dict(summary)
    out[KEY] = _counts(failed)
    slices = failed["method"] + " " + failed["kind"]
    out["per_method"] = {k: {**g, KEY: _counts(failed[slices == k])} for k, g in summary.get("per_method", {}).items()}
    out["per_node"] = {
        k: {**g, KEY: _counts(failed[failed["node"] == k])} for k, g in summary.get("per_node", {}).items()
    }
    return out, "requests.csv"


def _counts(rows) -> dict[str, int]:
    counts = rows["status"].astype(int).value_counts()
    return {str(status): int(n) for status, n in sorted(counts.items())}


def judged_summary(summary: dict, run_dir: Path, objectives: list) -> dict:
    """The summary ``objectives`` are judged on: with ``failed_statuses`` when a ``throttled`` one needs them
    (reading requests.csv back costs a pass over the file: only then)."""
    if not any(o.stat == "throttled" for o in objectives):
        return summary
    return with_failed_statuses(summary, run_dir)[0]
