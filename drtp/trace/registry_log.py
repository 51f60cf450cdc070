"""A Distribution registry's JSON access log read as a trace: one record per completed object request.

The registry logs one ``response completed`` line per request, with its
completion time and a Go duration; requests that are not for a manifest or a
blob (``/v2/`` pings, ``_catalog``, tag lists) are counted as ignored.
``drtp capture`` reads the same lines (:func:`decode_log_line`) to make an
anonymized trace.
"""

from __future__ import annotations

import re

import msgspec

from drtp.trace.bad_records import TOO_DEEP, decode_record, reject
from drtp.trace.input_files import line_chunks
from drtp.trace.records import AgentRecord, TraceRecord, is_object_uri


class RegistryLogLine(msgspec.Struct, gc=False):
    """A line of the registry's JSON log; only 'response completed' lines are requests."""

    msg: str = ""
    time: str = ""
    method: str = msgspec.field(default="", name="http.request.method")
    uri: str = msgspec.field(default="", name="http.request.uri")
    client: str = msgspec.field(default="", name="http.request.remoteaddr")
    useragent: str = msgspec.field(default="", name="http.request.useragent")
    host: str = msgspec.field(default="", name="http.request.host")
    request_id: str = msgspec.field(default="", name="http.request.id")
    status: int = msgspec.field(default=0, name="http.response.status")
    written: int = msgspec.field(default=0, name="http.response.written")
    duration: str = msgspec.field(default="0s", name="http.response.duration")


_log_decoder = msgspec.json.Decoder(RegistryLogLine)
_GO_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string such as ``909.307µs`` or ``1m2.5s``."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.lstrip("+"):
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def decode_log_line(raw: bytes) -> RegistryLogLine | str:
    """A registry log line, or what is wrong with it (not JSON, too deep, not UTF-8, wrong types)."""
    try:
        return _log_decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        return f"invalid log line ({e})"
    except RecursionError:
        return f"invalid log line ({TOO_DEEP})"


def read_registry_log(path, chunk_bytes, skip_bad, stats, agent: bool = False):
    """Chunks of requests from a registry's JSON log; index = line number - 1; ``agent``: AgentRecords,
    with the client's ``User-Agent``."""
    convert = msgspec.json.Decoder(AgentRecord if agent else TraceRecord)
    for first_line, body in line_chunks(path, chunk_bytes):
        records = []
        for i, raw in enumerate(body.split(b"\n")):
            if not raw.strip():
                continue
            index = first_line + i
            line = decode_log_line(raw)
            if isinstance(line, str):
                reject(path, index, line, skip_bad, stats)
                continue
            if not line.msg.startswith("response completed"):
                continue
            if not is_object_uri(line.uri):
                stats.ignored += 1  # /v2/ pings, _catalog, tags/list
                continue
            try:
                duration = parse_go_duration(line.duration)
            except ValueError as e:
                reject(path, index, str(e), skip_bad, stats)
                continue
            raw_record = msgspec.json.encode(
                {
                    "host": line.host,
                    "http.request.duration": duration,
                    "http.request.method": line.method,
                    "http.request.remoteaddr": line.client,
                    "http.request.uri": line.uri.lstrip("/"),
                    "http.response.status": line.status,
                    "http.response.written": line.written,
                    "id": line.request_id,
                    "timestamp": line.time,
                }
                | ({"http.request.useragent": line.useragent} if agent else {})
            )
            rec = decode_record(path, index, raw_record, convert, skip_bad, stats)
            if rec is not None:
                records.append(rec)
        if records:
            yield path, first_line, records
