"""The per-client gate of the client nodes (client/client_gate.py), the upload keys the master gives
(master/run/plan.py ``Planner.upload_of``) and its round-robin of trace clients (master/run/routing.py): which
request of a trace client may start while others run, and on which node."""

from __future__ import annotations

import msgspec

from drtp.client.client_gate import ClientGate
from drtp.master.run.plan import Planner
from drtp.master.run.routing import Router
from drtp.replay.messages import TRACE_ORDER, UNLIMITED, ClientModel
from drtp.trace.records import TraceRecord
from tests.conftest import ibm_record
from tests.replay_support import blob_get


class Engine:
    """What an engine does with the gate: a queue of listed lanes, requests started and finished."""

    def __init__(self, model: ClientModel) -> None:
        self.gate = ClientGate(model)
        self.ready = []
        self.running = []

    def submit(self, *reqs) -> None:
        for req in reqs:
            lane = self.gate.add(req)
            if lane is not None:
                self.ready.append(lane)

    def start_all(self) -> list[int]:
        """Start every request that may start now; their seqs."""
        started = []
        while self.ready:
            lane = self.ready.pop(0)
            req, again = self.gate.take(lane)
            if again:
                self.ready.append(lane)
            self.running.append(req)
            started.append(req.seq)
        return started

    def finish(self, seq: int) -> None:
        req = next(r for r in self.running if r.seq == seq)
        self.running.remove(req)
        lane = self.gate.done(req)
        if lane is not None:
            self.ready.append(lane)


def span(seq: int, start: float, end: float, **over):
    return blob_get(seq, trace_start=start, trace_end=end, **over)


def pull() -> list:
    """A manifest GET, three layer GETs that overlapped each other after it, a fourth after they ended."""
    return [
        span(0, 0.0, 0.1, kind="manifest", reference="latest", digest=None),
        span(1, 0.2, 1.0),
        span(2, 0.21, 1.2),
        span(3, 0.22, 0.9),
        span(4, 1.3, 1.5),
    ]


def test_trace_order_overlaps_what_overlapped_and_orders_the_rest() -> None:
    e = Engine(ClientModel(concurrency=TRACE_ORDER))
    e.submit(*pull())
    assert e.start_all() == [0]  # the layers started after the manifest GET ended
    e.finish(0)
    assert e.start_all() == [1, 2, 3]  # they overlapped in the trace
    e.finish(1)
    e.finish(3)
    assert e.start_all() == []  # the fourth started after all three had ended: it waits for layer 2
    e.finish(2)
    assert e.start_all() == [4]
    e.finish(4)
    assert len(e.gate) == 0  # an idle client keeps no lane


def test_trace_order_waits_for_a_running_request_that_ended_before_the_head_started() -> None:
    e = Engine(ClientModel(concurrency=TRACE_ORDER))
    # 1 overlaps 0; 2 overlaps 1 but started after 0 ended: it waits for 0 even though 1 (its predecessor) runs
    e.submit(span(0, 0.0, 1.0), span(1, 0.5, 3.0), span(2, 1.5, 2.0))
    assert e.start_all() == [0, 1]
    e.finish(1)
    assert e.start_all() == []
    e.finish(0)
    assert e.start_all() == [2]


def test_requests_without_a_trace_span_run_one_at_a_time() -> None:
    e = Engine(ClientModel(concurrency=TRACE_ORDER))
    e.submit(blob_get(0), blob_get(1))
    assert e.start_all() == [0]
    e.finish(0)
    assert e.start_all() == [1]


def test_n_at_once_in_trace_order_whatever_the_timing() -> None:
    e = Engine(ClientModel(concurrency=2))
    e.submit(*pull())
    assert e.start_all() == [0, 1]
    e.finish(1)
    assert e.start_all() == [2]
    e.finish(0)
    assert e.start_all() == [3]
    e1 = Engine(ClientModel(concurrency=1))
    e1.submit(*pull())
    assert e1.start_all() == [0]
    e1.finish(0)
    assert e1.start_all() == [1]


def test_clients_are_independent() -> None:
    e = Engine(ClientModel(concurrency=1))
    e.submit(span(0, 0, 1, client="a"), span(1, 0, 1, client="a"), span(2, 0, 1, client="b"))
    assert e.start_all() == [0, 2]


def test_downloads_cap_blob_gets_only() -> None:
    e = Engine(ClientModel(concurrency=TRACE_ORDER, downloads=2))
    reqs = pull()
    e.submit(*reqs)
    e.start_all()
    e.finish(0)
    assert e.start_all() == [1, 2]  # the third layer waits for one of the two downloads
    e.finish(2)
    assert e.start_all() == [3]
    # HEADs are no downloads
    e2 = Engine(ClientModel(concurrency=TRACE_ORDER, downloads=1))
    e2.submit(span(0, 0, 1), span(1, 0.1, 1, method="HEAD"), span(2, 0.2, 1))
    assert e2.start_all() == [0, 1]


def upload(seq: int, op: str, start: float, end: float, key: str | None, repo: str = "r"):
    method = {"upload-open": "POST", "upload-chunk": "PATCH", "upload-close": "PUT"}[op]
    return span(seq, start, end, op=op, method=method, repository=repo, upload=key, digest=None)


def test_an_upload_session_never_overlaps_itself_whatever_the_mode() -> None:
    for model in (ClientModel(concurrency=TRACE_ORDER), ClientModel(concurrency=4), ClientModel(concurrency=UNLIMITED)):
        e = Engine(model)
        # the trace's clock is off: the PATCH "overlapped" its POST; it still waits for it
        e.submit(upload(0, "upload-open", 0.0, 1.0, "u1"), upload(1, "upload-chunk", 0.5, 2.0, "u1"))
        assert e.start_all() == [0], model
        e.finish(0)
        assert e.start_all() == [1], model


def test_two_uploads_of_one_client_overlap_when_the_trace_names_them() -> None:
    e = Engine(ClientModel(concurrency=TRACE_ORDER, uploads=2))
    e.submit(
        upload(0, "upload-open", 0.0, 1.0, "u1"),
        upload(1, "upload-open", 0.1, 1.0, "u2"),
        upload(2, "upload-open", 0.2, 1.0, "u3"),
    )
    assert e.start_all() == [0, 1]  # the third waits for one of the two uploads
    e.finish(0)
    assert e.start_all() == [2]
    # no ids in the trace: one client's uploads into one repository follow each other
    e = Engine(ClientModel(concurrency=TRACE_ORDER))
    e.submit(upload(0, "upload-open", 0.0, 1.0, None), upload(1, "upload-open", 0.1, 1.0, None))
    assert e.start_all() == [0]
    e.submit(upload(2, "upload-open", 0.2, 1.0, None, repo="other"))
    e.finish(0)
    assert e.start_all() == [1, 2]  # another repository's upload is another session


def test_unlimited_has_no_per_client_order() -> None:
    e = Engine(ClientModel(concurrency=UNLIMITED))
    e.submit(*pull())
    assert e.start_all() == [0, 1, 2, 3, 4]


def test_cancel_forgets_waiting_requests_and_running_ones_still_finish() -> None:
    e = Engine(ClientModel(concurrency=TRACE_ORDER))
    e.submit(*pull())
    e.start_all()
    e.gate.clear()
    e.ready.clear()
    e.finish(0)
    assert e.start_all() == [] and len(e.gate) == 0


def record(i: int, method: str, uri: str, client: str = "c", status: int = 202, **over) -> TraceRecord:
    raw = ibm_record(
        i, **{"http.request.method": method, "http.request.uri": uri, "http.request.remoteaddr": client}, **over
    )
    raw["http.response.status"] = status
    return msgspec.convert(raw, TraceRecord)


def keys(records: list[TraceRecord]) -> list[str | None]:
    planner = Planner(["127.0.0.1:5000"])
    return [planner.upload_of(r, r.parts, i) for i, r in enumerate(records)]


def test_upload_keys_of_a_capture_are_its_upload_ids() -> None:
    recs = [
        record(0, "POST", "v2/u/r/blobs/uploads/?upload=A"),
        record(1, "POST", "v2/u/r/blobs/uploads/?upload=B"),
        record(2, "PATCH", "v2/u/r/blobs/uploads/B"),
        record(3, "PATCH", "v2/u/r/blobs/uploads/A"),
        record(4, "PUT", "v2/u/r/blobs/layer1?upload=A", status=201),
        record(5, "GET", "v2/u/r/blobs/layer1", status=200),
    ]
    assert keys(recs) == ["A", "B", "B", "A", "A", None]


def test_upload_keys_pair_an_ibm_post_with_the_first_new_session() -> None:
    recs = [
        record(0, "POST", "v2/u/r/blobs/uploads/"),
        record(1, "POST", "v2/u/r/blobs/uploads/"),
        record(2, "PATCH", "v2/u/r/blobs/uploads/X"),
        record(3, "PATCH", "v2/u/r/blobs/uploads/Y"),
        record(4, "PUT", "v2/u/r/blobs/uploads/X", status=201),
        record(5, "PATCH", "v2/u/r/blobs/uploads/Y"),
        record(6, "PUT", "v2/u/r/blobs/uploads/Y", status=201),
        record(7, "POST", "v2/u/r/blobs/uploads/", client="other"),  # another client's: paired apart
        record(8, "PATCH", "v2/u/r/blobs/uploads/Z", client="other"),
    ]
    assert keys(recs) == ["#0", "#1", "#0", "#1", "#0", "#1", "#1", "#7", "#7"]


def test_upload_keys_of_a_generated_trace_continue_the_last_session() -> None:
    # a generated trace: the POST and the closing PUT name no session, the PATCH does
    recs = [
        record(0, "POST", "v2/u/r/blobs/uploads/"),
        record(1, "PATCH", "v2/u/r/blobs/uploads/up1"),
        record(2, "PUT", "v2/u/r/blobs/layer1", status=201),
        record(3, "POST", "v2/u/r/blobs/uploads/"),
        record(4, "PUT", "v2/u/r/blobs/layer2", status=201),
        # an upload closed by a PUT that names nothing leaves no open for a later session to pair with
        record(5, "POST", "v2/u/r/blobs/uploads/"),
        record(6, "PATCH", "v2/u/r/blobs/uploads/up2"),
        record(7, "PUT", "v2/u/r/blobs/layer3", status=201),
    ]
    assert keys(recs) == ["#0", "#0", "#0", "#3", "#3", "#5", "#5", "#5"]
    # and a closed session leaves nothing behind in the planner (a long trace's uploads do not pile up)
    planner = Planner(["127.0.0.1:5000"])
    for i, r in enumerate(recs):
        planner.upload_of(r, r.parts, i)
    assert planner.upload_keys == {} and planner.named_of == {} and planner.last_upload == {}


def test_trace_spans_count_from_the_first_request_and_a_registry_log_subtracts_the_duration() -> None:
    recs = [
        record(0, "GET", "v2/u/r/blobs/l0", status=200, timestamp="2017-07-01T01:00:00.000Z"),
        record(1, "GET", "v2/u/r/blobs/l1", status=200, timestamp="2017-07-01T01:00:02.000Z"),
    ]
    planner = Planner(["127.0.0.1:5000"])
    reqs = [planner.plan(r, i, None) for i, r in enumerate(recs)]
    assert (reqs[1].trace_start, reqs[1].trace_end) == (2.0, 2.25)
    planner = Planner(["127.0.0.1:5000"], completion_stamped=True)
    reqs = [planner.plan(r, i, None) for i, r in enumerate(recs)]
    assert (reqs[1].trace_start, reqs[1].trace_end) == (1.75, 2.0)


def test_round_robin_gives_each_trace_client_a_node_it_keeps() -> None:
    router = Router(["n1", "n2"], hashed=False, per_client=True)
    assert [router.pick(c) for c in ("x", "y", "x", "z", "y", "x")] == ["n1", "n2", "n1", "n1", "n2", "n1"]
    router.remove("n1")  # a client whose node died gets the next live one, and keeps it
    assert [router.pick(c) for c in ("x", "y", "x")] == ["n2", "n2", "n2"]
    # no per-client order (client_concurrency: unlimited): every request gets the next node
    router = Router(["n1", "n2"], hashed=False, per_client=False)
    assert [router.pick("x") for _ in range(3)] == ["n1", "n2", "n1"]
