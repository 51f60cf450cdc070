"""The records that travel master → client node → master during a replay.

One module, imported by both sides, so the wire format has one definition:
the master turns each trace record into a :class:`ReplayRequest`, sends them
to a client node in a :class:`Batch`, and the node streams back one
:class:`ReplayResult` per request inside its result frames (drtp.replay.frames).
"""

from __future__ import annotations

from typing import Literal

import msgspec

# What the node does for a request; derived from the trace record by the master.
Op = Literal[
    "get",  # GET of a manifest or blob (also HEAD and DELETE: see method)
    "upload-open",  # POST v2/<repo>/blobs/uploads/
    "upload-chunk",  # PATCH v2/<repo>/blobs/uploads/<uuid>
    "upload-close",  # PUT of a layer (closes the upload, returns the new digest)
    "manifest-put",  # PUT v2/<repo>/manifests/<tag>: a real schema-2 manifest
]


KINDS = ("manifest", "blob")

# A node closes a control connection that brought no request (or stalled in one) for this long; the
# master's feeder keeps its connection between batches and reuses it only while it was idle for at most
# half of it, so a batch is never written into a connection the node is closing.
NODE_IDLE_CLOSE_S = 10.0


def op_for(method: str, kind: str) -> Op:
    """What a node does for a trace request of ``method`` on a ``kind``: the one mapping master and node share."""
    if kind == "manifest":
        return "manifest-put" if method == "PUT" else "get"
    if method == "POST":
        return "upload-open"
    if method == "PATCH":
        return "upload-chunk"
    if method == "PUT":
        return "upload-close"
    return "get"  # GET/HEAD/DELETE of a blob (or of an upload's status)


class Layer(msgspec.Struct, array_like=True, gc=False):
    digest: str
    size: int


class ReplayRequest(msgspec.Struct, gc=False, omit_defaults=True):
    """One trace record, ready to be sent to a registry by a client node."""

    seq: int  # position in the trace (0-based); results refer to it
    trace_id: str
    client: str  # the trace's client address (http.request.remoteaddr)
    method: str
    kind: str  # "manifest" or "blob"
    op: Op
    registry: str  # host:port or http(s)://host:port
    repository: str
    reference: str  # the trace's reference: tag, layer id or uploads/<uuid>
    size: int  # bytes the trace says were written (to push for uploads)
    expected_status: int  # the trace's status
    digest: str | None = None  # the real digest to address (blob reads)
    object_size: int | None = None  # the addressed blob's real size when known: a shorter 200 body is truncated
    at: float | None = None  # intended start, seconds after the run's start; None: as soon as possible
    layers: list[Layer] = []  # manifest-put: the layers the manifest references
    # upload-open of a cross-repository mount: the real digest to mount and the repository it comes
    # from (None: no repository of this registry holds it, e.g. the source lives on another registry)
    mount: str | None = None
    mount_from: str | None = None
    config: Layer | None = None  # manifest-put: the image's config blob (None: the minimal config blob)
    # the request's span in the trace, seconds after the trace's first request (its arrival, and arrival +
    # duration): requests of one trace client that overlapped there may overlap in the replay
    trace_start: float | None = None
    trace_end: float | None = None
    upload: str | None = None  # the trace's id of the upload this POST/PATCH/PUT belongs to, when it has one
    user_agent: str | None = None  # the trace's user agent, sent when the run replays it (user_agent: trace)


class RegistryAuth(msgspec.Struct, omit_defaults=True):
    """How a node reaches one registry: credentials and TLS trust (travels only in the signed RunSpec)."""

    registry: str  # base URL, http(s)://host:port
    username: str | None = None
    password: str | None = None
    ca_pem: str | None = None  # the CA bundle's text (nodes need not share the master's files)
    insecure: bool = False  # https without certificate verification
    # where the master got the secret, for messages ("credential_helper ecr-login") and the entry's id;
    # renewable: the master asks for it again and sends it in a SecretUpdate (a refused one is worth waiting for)
    source: str = ""
    name: str = ""
    renewable: bool = False
    generation: int = 0  # which answer of the master's source the password is (SecretUpdate counts on)

    def __repr__(self) -> str:  # never show the password in a log or traceback
        return f"RegistryAuth({self.registry!r}, username={self.username!r})"


class SecretUpdate(msgspec.Struct):
    """A renewed secret for one registry of a run, sent by the master to each node (a signed, once-only call)."""

    run: str
    registry: str  # base URL of a registry whose credentials the run spec declared
    generation: int  # newer than the one the node holds; an older or equal one is ignored
    username: str
    password: str

    def __repr__(self) -> str:
        return f"SecretUpdate({self.registry!r}, generation={self.generation})"


class ClientModel(msgspec.Struct, omit_defaults=True):
    """How each trace client behaves on a node (drtp.replay.client_profiles makes it from the config)."""

    # requests of one trace client at once: TRACE_ORDER (as they overlapped in the trace), UNLIMITED, or N
    concurrency: int = 0
    downloads: int = 0  # blob GETs of one trace client at once (0: no cap of their own)
    uploads: int = 0  # blob uploads of one trace client at once (0: no cap of their own)
    connections: int = 0  # keep-alive connections per registry host kept per trace client (0: one per slot)
    idle_timeout_s: float = 0.0  # a kept connection idle this long is closed before reuse (0: never)
    user_agent: str = ""  # sent with every request ("": drtp's own)


TRACE_ORDER = 0  # ClientModel.concurrency: overlap as in the trace, order the rest
UNLIMITED = -1  # ClientModel.concurrency: no per-client order (up to ``threads`` at once)


class RunSpec(msgspec.Struct, omit_defaults=True):
    """Sent once per run to each node: how to execute the batches that follow."""

    run: str
    start_epoch: float  # the common start (time.time() on the master) requests' ``at`` counts from
    threads: int = 16
    timeout: float = 30.0  # read timeout: seconds without progress on an answer before it fails as a timeout
    random: bool = True  # random (True) or zero content for pushed blobs
    auth: list[RegistryAuth] = []  # credentials/TLS per registry; registries not listed are anonymous
    engine: Literal["loop", "threads"] = "threads"  # client/loop_engine.py or client/scheduler.py
    connect_timeout: float = 5.0  # seconds to establish a connection (TCP and TLS)
    retries: int = 0  # GET/HEAD only, and only when no byte of the answer arrived; every attempt is counted
    registries: list[str] = []  # base URLs (registry_base) this run may send to; a node refuses any other target
    # how the node reports (drtp.replay.frames): its name in the rows' node column, the summary's as-is
    # settings, and the width of stats_history.csv's intervals
    node: str = ""
    timed: bool = False
    on_time_s: float = 0.0
    stats_interval_s: float = 1.0
    client: ClientModel = msgspec.field(default_factory=ClientModel)  # per trace client: order, connections, agent
    live: bool = False  # the master exports live metrics: frames carry LivePart counts (drtp.replay.frames)


class Batch(msgspec.Struct):
    run: str
    requests: list[ReplayRequest]


class AuxResult(msgspec.Struct, array_like=True, gc=False):
    """A protocol helper request issued for a trace request (e.g. the POST opening an upload)."""

    method: str
    what: str
    status: int
    start: float
    latency: float
    bytes: int
    error: str = ""
    outcome: str = "ok"  # drtp.replay.outcome: ok, http, timeout, refused, reset, truncated, tls, protocol…
    attempts: int = 1
    retry_after: float | None = None  # the answer's Retry-After, in seconds (None: the answer had none)
    challenges: int = 0  # 401 auth challenges answered by sending it again (each one more round trip)


class ReplayResult(msgspec.Struct, gc=False, omit_defaults=True):
    """What happened to one request; ``start`` counts from the run's common start."""

    seq: int
    status: int  # 0 when no complete answer came (timeout, refused, reset, truncated…)
    ok: bool  # outcome == "ok"
    start: float
    latency: float  # seconds from the actual start to the end of the response
    bytes: int = 0  # body bytes sent or received
    digest: str | None = None  # digest addressed, or the new digest of a pushed layer/manifest
    size: int | None = None  # size of the object pushed (a layer's total over PATCH and PUT)
    error: str = ""
    outcome: str = "ok"  # drtp.replay.outcome: the class of how it ended; anything but "ok" is a failure
    attempts: int = 1  # how often it was sent (> 1 only with client_info.retries)
    aux: list[AuxResult] = []
    retry_after: float | None = None  # the answer's Retry-After, in seconds (None: the answer had none)
    challenges: int = 0  # 401 auth challenges answered by sending it again (each one more round trip)
    # the cache's own verdict on the answer (``X-Cache-Status``, Varnish's ``X-Cache``): "hit", "miss", or ""
    # when the answer carried none (drtp.registry.flow.cache_verdict)
    cache: str = ""


def registry_base(entry: str) -> str:
    """``host:port`` → ``http://host:port``; URLs are kept (trailing slash dropped)."""
    entry = entry.rstrip("/")
    return entry if entry.startswith(("http://", "https://")) else f"http://{entry}"


batch_decoder = msgspec.json.Decoder(Batch)
spec_decoder = msgspec.json.Decoder(RunSpec)
secret_decoder = msgspec.json.Decoder(SecretUpdate)
result_decoder = msgspec.json.Decoder(ReplayResult)  # the stream also carries blank keep-alive lines
