"""``drtp analyze trace``: characterize labelled traces, write JSON, figures and a report.

Files that share a label (e.g. the daily files of one availability zone) are
read together as one trace; each label is loaded, characterized and dropped
before the next, so memory holds one trace's columns at a time. The report's
figures are numbered as in the IBM Cloud registry workload study (Anwar et al.,
FAST '18) whose measures they repeat, and its intro says so.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pandas as pd

from drtp.analysis.characterize import DEFAULT_BIN_S, DEFAULT_SESSION_S, characterize
from drtp.analysis.report import Section, with_charts, write_report
from drtp.analysis.targets import check_targets, profile_for, targets_table
from drtp.analysis.trace_figures import FIGURES, draw_all
from drtp.analysis.trace_frame import load_trace
from drtp.errors import DrtpError
from drtp.units import to_ms

_AZ = re.compile(r"^(?:prod|stage|dev)?-?([a-z]+)\d*-logstash")
CAPTIONS = {
    "fig04_request_types": "Fig. 4 — (a) share of image pulls (GET manifest) and pushes (PUT manifest); "
    "(b) requests by method.",
    "fig05_manifest_layer": "Fig. 5 — manifest vs layer share of pulls (GET) and pushes (PUT or HEAD).",
    "fig06_sizes": "Fig. 6 — CDFs of bytes written by successful GET/PUT requests to layers and manifests.",
    "fig07_requests_per_minute": "Fig. 7 — CDF of requests received per minute (minutes without requests count as 0).",
    "fig08_response_times": "Fig. 8 — CDFs of the trace's recorded response times (ms) per method and kind.",
    "fig09_response_vs_size": "Fig. 9 — GET layer response time (ms) by layer size: median and interquartile band "
    "per bin.",
    "fig10_popularity": "Fig. 10 — share of accesses taken by the most accessed items "
    "(Lorenz-style; steeper = more skew).",
    "fig11_top10": "Fig. 11 — share of accesses of each of the ten most popular items.",
    "fig12_follow_ups": "Fig. 12 — GET layer requests by the same client to the same repository "
    "within the session after a GET manifest.",
    "fig13_concurrency": "Fig. 13 — active clients and requests: CDFs over bins and series over time.",
    "fig14_rhythm": "Fig. 14 — average requests per hour of day and per day of week (UTC).",
    "fig15_arrivals": "Fig. 15 — CDFs of inter-arrival times and of idle periods (no request in flight).",
    "data_volume": "Data ingress (successful PUT/PATCH/POST bytes) and egress (successful GET bytes) per trace.",
}


def section_title(figure: str) -> str:
    """``fig04_request_types`` → ``Fig. 4: request types``; ``data_volume`` → ``Data volume``."""
    m = re.match(r"fig(\d+)_(.*)", figure)
    if m:
        return f"Fig. {int(m.group(1))}: {m.group(2).replace('_', ' ')}"
    return figure.replace("_", " ").capitalize()


def default_label(path: str | Path) -> str:
    """``prod-dal09-logstash-2017.08.01-0.json`` → ``dal``; otherwise the file name without suffixes."""
    name = Path(path).name
    m = _AZ.match(name)
    if m:
        return m.group(1)
    return name.split(".")[0] or name


def group_files(files: list[str], labels: list[str] | None) -> dict[str, list[str]]:
    """label → files; labels are given one per file, or derived from the file names."""
    if labels and len(labels) != len(files):
        raise DrtpError(f"--label needs one name per file: {len(files)} files, {len(labels)} labels")
    groups: dict[str, list[str]] = {}
    for f, lab in zip(files, labels or [default_label(f) for f in files], strict=True):
        groups.setdefault(lab, []).append(f)
    return groups


def key_numbers(chars: dict[str, dict]) -> pd.DataFrame:
    """The headline numbers of each trace, one column per label (the report's main table).

    A table for people: response times in milliseconds (characterization.json keeps seconds);
    inter-arrival and idle times, seconds apart, stay in seconds.
    """

    def g(c: dict, *path, default=None):
        for k in path:
            if not isinstance(c, dict) or k not in c:
                return default
            c = c[k]
        return c

    rows = {
        "requests": lambda c: g(c, "summary", "records"),
        "time span (h)": lambda c: g(c, "summary", "span_s", default=0) / 3600,
        "clients": lambda c: g(c, "summary", "clients"),
        "repositories": lambda c: g(c, "summary", "repositories"),
        "data ingress (GB)": lambda c: g(c, "data", "ingress_bytes", default=0) / 1e9,
        "data egress (GB)": lambda c: g(c, "data", "egress_bytes", default=0) / 1e9,
        "image pulls / (pulls+pushes)": lambda c: g(c, "request_types", "pull_ratio"),
        "GET share of requests": lambda c: g(c, "request_types", "method_share", "GET", default=0.0),
        "HEAD share of requests": lambda c: g(c, "request_types", "method_share", "HEAD", default=0.0),
        "PUT per PATCH": lambda c: g(c, "request_types", "put_per_patch"),
        "pulls: manifest share": lambda c: g(c, "manifest_layer_share", "pull", "manifest"),
        "pushes: manifest share": lambda c: g(c, "manifest_layer_share", "push", "manifest"),
        "GET layers < 1 MB": lambda c: g(c, "sizes", "GET blob", "share_below", "1MB"),
        "GET layers < 10 MB": lambda c: g(c, "sizes", "GET blob", "share_below", "10MB"),
        "GET manifest median size (B)": lambda c: g(c, "sizes", "GET manifest", "p50"),
        "requests/minute median": lambda c: g(c, "requests_per_minute", "p50"),
        "minutes with no request": lambda c: g(c, "requests_per_minute", "share_zero"),
        "minutes with ≥100 requests": lambda c: g(c, "requests_per_minute", "share_at_least_100"),
        "GET layer response p50 (ms)": lambda c: to_ms(g(c, "response_times", "GET blob", "p50")),
        "GET layer response p90 (ms)": lambda c: to_ms(g(c, "response_times", "GET blob", "p90")),
        "GET manifest response p50 (ms)": lambda c: to_ms(g(c, "response_times", "GET manifest", "p50")),
        "top-1% layers: share of GETs": lambda c: g(c, "popularity", "layers", "top1pct_share"),
        "top-10 layers: share of GETs": lambda c: g(c, "popularity", "layers", "top10_share"),
        "rank-1 layer: share of GETs": lambda c: (g(c, "popularity", "layers", "top_shares") or [None])[0],
        "top-10 manifests: share of GETs": lambda c: g(c, "popularity", "manifests", "top10_share"),
        "top-10 repositories: share": lambda c: g(c, "popularity", "repositories", "top10_share"),
        "top-10 users: share": lambda c: g(c, "popularity", "users", "top10_share"),
        "top client: share of requests": lambda c: (g(c, "popularity", "clients", "top_shares") or [None])[0],
        "GET manifests not followed by a GET layer": lambda c: g(c, "follow_ups", "all", "not_followed"),
        "… after a PUT to the repository": lambda c: g(c, "follow_ups", "after_push", "not_followed"),
        "active clients median": lambda c: g(c, "concurrency", "active_clients", "p50"),
        "active clients max": lambda c: g(c, "concurrency", "active_clients", "max"),
        "inter-arrival p99 (s)": lambda c: g(c, "arrivals", "inter_arrival", "p99"),
        "idle periods": lambda c: g(c, "arrivals", "idle_periods"),
        "idle period median (s)": lambda c: g(c, "arrivals", "idle", "p50"),
    }
    table = pd.DataFrame({lab: {name: f(c) for name, f in rows.items()} for lab, c in chars.items()})
    table.index.name = "metric"
    return table


def analyze_traces(
    groups: dict[str, list[str]],
    out: Path,
    *,
    session_s: float = DEFAULT_SESSION_S,
    push_window_s: float | None = None,
    bin_s: float = DEFAULT_BIN_S,
    reader_options: dict | None = None,
    profile: str | None = None,
    log=print,
) -> dict[str, dict]:
    """Characterize each labelled trace; write characterization.json, key_numbers.csv, PNGs and report.html."""
    out.mkdir(parents=True, exist_ok=True)
    chars: dict[str, dict] = {}
    for label, files in groups.items():
        t0 = time.perf_counter()
        df = load_trace(files, progress_desc=f"read {label}", **(reader_options or {}))
        t1 = time.perf_counter()
        if df.empty:
            raise DrtpError(f"trace {label!r} ({', '.join(files)}) holds no records")
        chars[label] = characterize(df, session_s=session_s, push_window_s=push_window_s, bin_s=bin_s)
        chars[label]["files"] = list(files)
        wanted = profile_for(label, profile)
        if wanted:
            chars[label]["targets"] = check_targets(chars[label], wanted)
        t2 = time.perf_counter()
        log(f"{label}: {len(df):,} records read in {t1 - t0:.1f} s, characterized in {t2 - t1:.1f} s")
        del df
    (out / "characterization.json").write_text(json.dumps(chars, indent=1))
    table = key_numbers(chars)
    table.to_csv(out / "key_numbers.csv")
    checked = {label: c["targets"] for label, c in chars.items() if c.get("targets")}
    targets = targets_table(checked)
    if not targets.empty:
        targets.to_csv(out / "targets.csv")
        for label, rows in checked.items():
            missed = [r["target"] for r in rows if not r["within"]]
            log(
                f"{label}: {len(rows) - len(missed)}/{len(rows)} profile targets met"
                + (f"; missed: {', '.join(missed)}" if missed else "")
            )
    charts = draw_all(chars, out)
    log(charts.note())
    sections = [
        Section(
            "Key numbers",
            text=[f"Traces: {', '.join(f'{k} ({len(v)} file(s))' for k, v in groups.items())}."],
            tables=[("", table)],
        )
    ]
    if not targets.empty:
        shown = targets[["profile", "characteristic", "value", "low", "high", "measured", "within"]]
        sections.append(
            Section(
                "Profile targets",
                text=["Each characteristic against the workload profile's target range (configs/profiles/)."],
                tables=[("", shown)],
            )
        )
    sections += [with_charts(Section(section_title(name)), charts, CAPTIONS, name) for name in FIGURES]
    write_report(
        out / "report.html",
        "Registry workload characterization",
        sections,
        intro=f"Session threshold {session_s:g} s, concurrency bins {bin_s:g} s. Definitions: docs/analysis.md. "
        "Figures are numbered as in the IBM Cloud registry workload study (Anwar et al., FAST '18).",
    )
    return chars
