"""One line of ``requests.csv``: a named row whose fields are the file's columns, in order.

The master makes rows from results as they arrive, writes them and counts
them; on resume it reads its own file back; ``drtp analyze results`` reads a
finished run back.  All of them go through :class:`ResultRow`, so a column
has one name, one type and one way to be written.  Times are rounded to the
microsecond when a row is made, so a row read back from the file holds
exactly the numbers the master counted while the run went on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec

from drtp.replay.messages import AuxResult, ReplayRequest, ReplayResult
from drtp.replay.outcome import ERROR, HTTP, LOST, OK, is_failed

TIME_DIGITS = 6  # times are kept and written to the microsecond
TIME_FORMAT = f"%.{TIME_DIGITS}f"


class ResultRow(msgspec.Struct, gc=False):
    """One request as ``requests.csv`` holds it; the fields are the columns, in the file's order."""

    client: str  # the trace's client address
    node: str  # the client node that sent the request
    trace_id: str
    method: str
    kind: str  # "manifest" or "blob"
    repository: str
    reference: str  # the trace's reference (tag, layer, uploads/<uuid>); for a helper, what it did
    digest: str  # the digest addressed, or the new digest a push got
    size: int  # bytes the trace recorded
    bytes: int  # bytes actually sent or received
    intended_s: float | None  # as-is mode: intended start after the run's start
    start_s: float | None  # actual start after the run's start (None: never sent, or no result came back)
    latency_s: float | None  # from the actual start (service time)
    response_s: float | None  # as-is mode: from the intended start (includes lateness)
    status: int  # the registry's status; 0 when no complete answer came
    expected_status: int  # the trace's status (0 for helper requests: they have none)
    ok: bool  # outcome == "ok"
    outcome: str  # drtp.replay.outcome: the class of how it ended; anything but "ok" is a failure
    attempts: int  # how often it was sent (> 1 only with retries; 0 when no result came back)
    error: str  # why it failed ("HTTP 503", "timeout: …"); empty when ok
    auxiliary: bool  # a protocol helper request issued for the trace request written before it
    # the answer's Retry-After in seconds (an HTTP-date made seconds from the answer's arrival); None: it had none
    retry_after_s: float | None = None
    # 401 auth challenges answered by sending it again: round trips the registry served beside ``attempts``
    challenges: int = 0
    # a request through a cache: "hit", "miss" or "wait" (a hit that waited on another client's upstream fetch);
    # empty when the registry has no upstream, or until the run's end classes the rows the cache gave no verdict
    cache: str = ""


COLUMNS: tuple[str, ...] = ResultRow.__struct_fields__


def unclassified_outcome(status: int, error: str) -> str:
    """The class of a failure its producer did not classify (a producer or a file that predates outcome
    classes): ``lost`` for a lost row, ``http`` when an answer came, else ``error`` — never a success."""
    if error.startswith("lost:"):
        return LOST
    return HTTP if status else ERROR


def result_outcome(res: ReplayResult) -> str:
    """The outcome class of a trace request's result (a failure marked only by ``ok`` gets one)."""
    if res.outcome == OK and not res.ok:
        return unclassified_outcome(res.status, res.error)
    return res.outcome


def failure_text(outcome: str, status: int, error: str) -> str:
    """The error column: the producer's message, else ``HTTP <code>`` for a failed answer; empty when ok."""
    if error or not is_failed(outcome):
        return error
    return f"HTTP {status}" if status else outcome


def trace_row(node: str, req: ReplayRequest, res: ReplayResult) -> ResultRow:
    """The row of a trace request that got a result.

    Built with positional fields, in the columns' order (one per line, named in the comments): every
    finished request makes one, and keywords cost a msgspec Struct twice the work per row."""
    outcome = result_outcome(res)
    at = req.at
    return ResultRow(
        req.client,  # client
        node,  # node
        req.trace_id,  # trace_id
        req.method,  # method
        req.kind,  # kind
        req.repository,  # repository
        req.reference,  # reference
        res.digest or req.digest or "",  # digest
        req.size,  # size
        res.bytes,  # bytes
        None if at is None else round(at, TIME_DIGITS),  # intended_s
        round(res.start, TIME_DIGITS),  # start_s
        round(res.latency, TIME_DIGITS),  # latency_s
        None if at is None else round(res.start + res.latency - at, TIME_DIGITS),  # response_s
        res.status,  # status
        req.expected_status,  # expected_status
        outcome == OK,  # ok
        outcome,  # outcome
        res.attempts,  # attempts
        failure_text(outcome, res.status, res.error),  # error
        False,  # auxiliary
        None if res.retry_after is None else round(res.retry_after, TIME_DIGITS),  # retry_after_s
        res.challenges,  # challenges
        res.cache,  # cache
    )


def lost_row(node: str, req: ReplayRequest, reason: str) -> ResultRow:
    """The row of a trace request whose result never came back (its node died)."""
    return ResultRow(
        client=req.client,
        node=node,
        trace_id=req.trace_id,
        method=req.method,
        kind=req.kind,
        repository=req.repository,
        reference=req.reference,
        digest=req.digest or "",
        size=req.size,
        bytes=0,
        intended_s=None if req.at is None else round(req.at, TIME_DIGITS),
        start_s=None,
        latency_s=None,
        response_s=None,
        status=0,
        expected_status=req.expected_status,
        ok=False,
        outcome=LOST,
        attempts=0,
        error=f"lost: {reason}",
        auxiliary=False,
        retry_after_s=None,
    )


def aux_row(node: str, req: ReplayRequest, a: AuxResult) -> ResultRow:
    """The row of a helper request issued for ``req`` (e.g. the POST opening an upload)."""
    return ResultRow(
        client=req.client,
        node=node,
        trace_id=req.trace_id,
        method=a.method,
        kind="blob",
        repository=req.repository,
        reference=a.what,
        digest="",
        size=0,
        bytes=a.bytes,
        intended_s=None,
        start_s=round(a.start, TIME_DIGITS),
        latency_s=round(a.latency, TIME_DIGITS),
        response_s=None,
        status=a.status,
        expected_status=0,
        ok=a.outcome == OK,
        outcome=a.outcome,
        attempts=a.attempts,
        error=failure_text(a.outcome, a.status, a.error),
        auxiliary=True,
        retry_after_s=None if a.retry_after is None else round(a.retry_after, TIME_DIGITS),
        challenges=a.challenges,
    )


def rows_of(node: str, req: ReplayRequest, res: ReplayResult | None, lost_reason: str = "") -> Iterator[ResultRow]:
    """The rows one result makes: the trace request's, then its helpers' in the order they were sent."""
    if res is None:
        yield lost_row(node, req, lost_reason)
        return
    yield trace_row(node, req, res)
    for a in res.aux:
        yield aux_row(node, req, a)


# -- the CSV text of a row ------------------------------------------------------------------------------


_TIME_AT = tuple(i for i, f in enumerate(msgspec.structs.fields(ResultRow)) if f.type == float | None)


def cells(row: ResultRow) -> list:
    """The row as CSV cells: times with microsecond digits, a missing time as an empty cell."""
    values = list(msgspec.structs.astuple(row))
    for i in _TIME_AT:
        v = values[i]
        values[i] = "" if v is None else TIME_FORMAT % v
    return values


def _bool(text: str) -> bool:
    if text == "True":
        return True
    if text == "False":
        return False
    raise ValueError(f"not a flag: {text!r}")


def _optional_float(text: str) -> float | None:
    return float(text) if text else None


def _parser(tp) -> Callable[[str], object]:
    if tp is bool:
        return _bool
    if tp is int:
        return int
    if tp is str:
        return str
    return _optional_float  # the times: float | None


_PARSERS = tuple(_parser(f.type) for f in msgspec.structs.fields(ResultRow))


# the columns of a file written before requests went through caches (no ``cache`` column): read as rows with it empty
COLUMNS_BEFORE_CACHE: tuple[str, ...] = COLUMNS[:-1]


def parse_cells(values: list[str]) -> ResultRow:
    """A row back from its CSV cells; ValueError when they are not a whole row (e.g. torn by an interruption).

    A row of a file without the ``cache`` column (:data:`COLUMNS_BEFORE_CACHE`) is read with it empty."""
    if len(values) == len(COLUMNS_BEFORE_CACHE):
        values = [*values, ""]
    elif len(values) != len(COLUMNS):
        raise ValueError(f"{len(values)} cells, not {len(COLUMNS)}")
    return ResultRow(*(parse(v) for parse, v in zip(_PARSERS, values, strict=True)))
