"""What the registry received, read from its JSON log: the ground truth a replay's rows are checked against."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Logged:
    """One request the registry answered."""

    method: str
    path: str  # the request target without the query string
    status: int
    query: str = ""  # the query string, without '?' (a mount's mount= and from=)


def log_entries(log_path: Path, offset: int = 0, settle_s: float = 0.3) -> Iterator[dict]:
    """The registry's JSON log lines after byte ``offset``, in log order.

    ``settle_s``: the registry writes its log line just after the answer went
    out, so a reader that has just seen the answer waits a moment first.
    """
    time.sleep(settle_s)
    with open(log_path, "rb") as f:
        f.seek(offset)
        for line in f:
            if line.startswith(b"{"):
                yield json.loads(line)


def logged_requests(log_path: Path, offset: int = 0, settle_s: float = 0.3) -> list[Logged]:
    """The requests logged after byte ``offset``, in log order (see :func:`log_entries`)."""
    out = []
    for entry in log_entries(log_path, offset, settle_s):
        if str(entry.get("msg", "")).startswith("response completed"):
            path, _, query = entry["http.request.uri"].partition("?")
            out.append(Logged(entry["http.request.method"], path, int(entry["http.response.status"]), query))
    return out


def refused_requests(log_path: Path, offset: int = 0, settle_s: float = 0.3) -> list[Logged]:
    """The requests logged after byte ``offset`` that the registry refused for their credentials (401).

    The registry does not log a "response completed" line for them, only an "error authorizing context" one.
    """
    return [
        Logged(entry["http.request.method"], entry["http.request.uri"].split("?", 1)[0], 401)
        for entry in log_entries(log_path, offset, settle_s)
        if str(entry.get("msg", "")).startswith("error authorizing context")
    ]


def connections(log_path: Path, offset: int = 0, settle_s: float = 0.3) -> dict[str, int]:
    """The client connections the registry served after byte ``offset``: remote ``host:port`` -> requests
    answered on it (a client's connection keeps its port, a new connection gets a new one)."""
    served: dict[str, int] = {}
    for entry in log_entries(log_path, offset, settle_s):
        if str(entry.get("msg", "")).startswith("response completed"):
            remote = str(entry.get("http.request.remoteaddr", ""))
            served[remote] = served.get(remote, 0) + 1
    return served


def user_agents(log_path: Path, offset: int = 0, settle_s: float = 0.3) -> list[str]:
    """The User-Agent of each request the registry answered after byte ``offset``, in log order."""
    return [
        str(entry.get("http.request.useragent", ""))
        for entry in log_entries(log_path, offset, settle_s)
        if str(entry.get("msg", "")).startswith("response completed")
    ]


def served_between(log_path: Path, from_epoch: float, to_epoch: float, settle_s: float = 0.3) -> list[Logged]:
    """The requests the registry logged as answered from ``from_epoch`` to ``to_epoch`` (Unix seconds, by the
    log line's own time): those it completed, and those it refused for their credentials (status 401)."""
    out = []
    for entry in log_entries(log_path, 0, settle_s):
        msg = str(entry.get("msg", ""))
        completed = msg.startswith("response completed")
        if not (completed or msg.startswith("error authorizing context")):
            continue
        at = pd.Timestamp(entry["time"]).value / 1e9  # RFC 3339 with nanoseconds
        if from_epoch <= at <= to_epoch:
            status = int(entry["http.response.status"]) if completed else 401
            path, _, query = entry["http.request.uri"].partition("?")
            out.append(Logged(entry["http.request.method"], path, status, query))
    return out
