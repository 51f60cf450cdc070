"""What the registry received, read from its JSON log: the ground truth a replay's rows are checked against."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Logged:
    """One request the registry answered."""

    method: str
    path: str  # the request target without the query string
    status: int
    query: str = ""  # the query string, without '?' (a mount's mount= and from=)


def logged_requests(log_path: Path, offset: int = 0, settle_s: float = 0.3) -> list[Logged]:
    """The requests logged after byte ``offset``, in log order.

    ``settle_s``: the registry writes its log line just after the answer went
    out, so a reader that has just seen the answer waits a moment first.
    """
    time.sleep(settle_s)
    out = []
    with open(log_path, "rb") as f:
        f.seek(offset)
        for line in f:
            if not line.startswith(b"{"):
                continue
            entry = json.loads(line)
            if not str(entry.get("msg", "")).startswith("response completed"):
                continue
            path, _, query = entry["http.request.uri"].partition("?")
            out.append(Logged(entry["http.request.method"], path, int(entry["http.response.status"]), query))
    return out


def refused_requests(log_path: Path, offset: int = 0, settle_s: float = 0.3) -> list[Logged]:
    """The requests logged after byte ``offset`` that the registry refused for their credentials (401).

    The registry does not log a "response completed" line for them, only an "error authorizing context" one.
    """
    time.sleep(settle_s)
    out = []
    with open(log_path, "rb") as f:
        f.seek(offset)
        for line in f:
            if not line.startswith(b"{"):
                continue
            entry = json.loads(line)
            if str(entry.get("msg", "")).startswith("error authorizing context"):
                uri = entry["http.request.uri"]
                out.append(Logged(entry["http.request.method"], uri.split("?", 1)[0], 401))
    return out
