"""Workload-profile targets (``configs/profiles/*.yaml``) checked against a characterization.

A profile's ``targets`` map a characteristic to ``[value, tolerance]``; the
tolerance is absolute, except for ``interarrival_p99_s`` where it is a factor
(value/f … value·f).  This module says where each characteristic lives in
:func:`drtp.analysis.characterize.characterize`'s output, so a generated
trace (or a real one) is compared with what its profile promises.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from drtp.errors import DrtpError
from drtp.trace.profiles import builtin_profiles, load_profile


def _get(*path) -> Callable[[dict], float | None]:
    def read(c: dict):
        for k in path:
            if isinstance(c, list):
                c = c[k] if len(c) > k else None
            elif isinstance(c, dict):
                c = c.get(k)
            if c is None:
                return None
        return float(c)

    return read


MEASURES: dict[str, tuple[str, Callable[[dict], float | None]]] = {
    "pull_ratio": ("image pulls / (pulls + pushes)", _get("request_types", "pull_ratio")),
    "get_share": ("GET share of requests", _get("request_types", "method_share", "GET")),
    "head_share": ("HEAD share of requests", _get("request_types", "method_share", "HEAD")),
    "put_per_patch": ("PUT requests per PATCH", _get("request_types", "put_per_patch")),
    "layers_below_1mb": ("GET layers < 1 MB", _get("sizes", "GET blob", "share_below", "1MB")),
    "manifest_get_median_bytes": ("GET manifest median size (B)", _get("sizes", "GET manifest", "p50")),
    "top1pct_layer_share": ("top-1 % layers' share of layer GETs", _get("popularity", "layers", "top1pct_share")),
    "top10_repo_share": ("top-10 repositories' share of requests", _get("popularity", "repositories", "top10_share")),
    "top_client_share": ("top client's share of requests", _get("popularity", "clients", "top_shares", 0)),
    "manifest_follow_rate": ("GET manifests followed by a GET layer", _get("follow_ups", "all", "followed")),
    "interarrival_p99_s": ("inter-arrival p99 (s)", _get("arrivals", "inter_arrival", "p99")),
}
FACTOR_TOLERANCE = {"interarrival_p99_s"}


def profile_for(label: str, explicit: str | None) -> str | None:
    """The profile to check a label against: the one given, or a built-in named like the label."""
    if explicit:
        return explicit
    return label if label in builtin_profiles() else None


def check_targets(char: dict, profile: str) -> list[dict]:
    """One row per target of the profile: target, tolerance, range, measured, within."""
    targets = load_profile(profile)["targets"]
    rows = []
    for key, (value, tol) in targets.items():
        if key not in MEASURES:
            raise DrtpError(f"profile {profile}: target '{key}' is not a known characteristic ({', '.join(MEASURES)})")
        name, read = MEASURES[key]
        lo, hi = (value / tol, value * tol) if key in FACTOR_TOLERANCE else (value - tol, value + tol)
        measured = read(char)
        rows.append(
            {
                "profile": profile,
                "target": key,
                "characteristic": name,
                "value": value,
                "low": lo,
                "high": hi,
                "measured": measured,
                "within": measured is not None and lo <= measured <= hi,
            }
        )
    return rows


def targets_table(rows_by_label: dict[str, list[dict]]) -> pd.DataFrame:
    rows = [{"trace": label} | row for label, rows in rows_by_label.items() for row in rows]
    return pd.DataFrame(rows).set_index("trace") if rows else pd.DataFrame()
