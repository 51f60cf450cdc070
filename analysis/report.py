"""One self-contained ``report.html``: key-number tables and the PNG figures embedded (base64).

A report is a title and a list of sections; a section holds text, tables
(pandas DataFrames), figure files and notes (e.g. a chart left out because it
had no data, and why).  Nothing is linked from outside the file, so it can be
mailed or attached as it is.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from drtp.analysis.plotting import Charts

CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; line-height: 1.4; padding: 0 1em; }
h1 { border-bottom: 2px solid #4C72B0; padding-bottom: .2em; }
h2 { margin-top: 2em; color: #2a4d8f; }
table { border-collapse: collapse; margin: .8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #eef2f8; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
p.note { font-size: 0.9em; color: #555; }
p.banner { background: #fff3cd; border: 1px solid #e0b000; padding: .6em 1em; font-weight: bold; }
nav a { margin-right: 1em; }
"""


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    figures: list[tuple[str, Path]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def with_charts(section: Section, charts: Charts, captions: dict[str, str], *names: str) -> Section:
    """``section`` plus the named charts: each drawn one as a figure with its caption, each left out
    (no data) as a note saying why, so a reader never wonders where a chart went."""
    section.figures += [(captions[n], charts.written[n]) for n in names if n in charts.written]
    section.notes += [f"Chart {n!r} not drawn: {charts.left_out[n]}." for n in names if n in charts.left_out]
    return section


def _anchor(title: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in title.lower()).strip("-")


def _fmt(x) -> str:
    if isinstance(x, float):
        if x != x:  # NaN
            return ""
        if x.is_integer() and abs(x) < 1e15:
            return f"{int(x):,}"
        if abs(x) >= 1e4:
            return f"{x:,.0f}"
        if 0 < abs(x) < 1e-3:
            return f"{x:.3g}"
        return f"{x:.4g}"
    if isinstance(x, int):
        return f"{x:,}"
    return html.escape(str(x))


def table_html(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in [df.index.name or ""] + list(df.columns))
    rows = []
    for idx, row in df.iterrows():
        cells = "".join(f"<td>{_fmt(v)}</td>" for v in row.tolist())
        rows.append(f"<tr><td>{html.escape(str(idx))}</td>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def image_html(caption: str, path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def cache_latency_table(summaries: dict[str, dict]) -> pd.DataFrame:
    """Per run and registry behind a cache, the trace requests per cache class (hit, wait, miss: summary.json
    ``upstream[<id>].latency_by_class``) with their latency in ms; empty when no run has classes."""
    rows = []
    for run, summary in summaries.items():
        for registry, block in ((summary or {}).get("upstream") or {}).items():
            for cls, s in ((block or {}).get("latency_by_class") or {}).items():
                lat = s.get("latency_s") or {}
                row = {"run": run, "registry": registry, "class": cls, "requests": s["requests"], "failed": s["failed"]}
                row.update(
                    {f"{q} ms": None if lat.get(q) is None else lat[q] * 1000 for q in ("p50", "p90", "p99", "max")}
                )
                rows.append(row)
    return pd.DataFrame(rows)


def write_report(
    path: Path, title: str, sections: list[Section], intro: str = "", banners: list[str] | None = None
) -> Path:
    """Write the report; returns its path.  ``banners``: warnings the reader must see before any number (a run
    that measured its own replayer), each in a box under the title."""
    nav = " ".join(f'<a href="#{_anchor(s.title)}">{html.escape(s.title)}</a>' for s in sections)
    body = [f"<h1>{html.escape(title)}</h1>"]
    body += [f'<p class="banner">{html.escape(b)}</p>' for b in banners or []]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body.append(f'<p class="note">Generated by drtp on {stamp}. {html.escape(intro)}</p>')
    body.append(f"<nav>{nav}</nav>")
    for s in sections:
        body.append(f'<h2 id="{_anchor(s.title)}">{html.escape(s.title)}</h2>')
        body += [f"<p>{html.escape(t)}</p>" for t in s.text]
        for caption, df in s.tables:
            if caption:
                body.append(f"<h3>{html.escape(caption)}</h3>")
            body.append(table_html(df))
        body += [image_html(caption, p) for caption, p in s.figures]
        body += [f'<p class="note">{html.escape(note)}</p>' for note in s.notes]
    doc = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc, encoding="utf-8")
    return path
